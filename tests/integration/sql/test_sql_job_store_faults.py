"""SqlJobStore under a connection that drops after the statement was sent, on the real
PostgreSQL behind the suite's fault proxy: the statement committed, its reply never came.

The store sends it again (the same token), so a short drop answers as one call would and the
job is as after one call; an outage past the bound is ``StoreUnavailableError``; inside a unit
of work nothing is sent again (the caller's transaction is gone with the connection).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest
from fault_proxy import FaultProxy
from services import DATABASE_URL
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import sessionmaker

from ddd_celery.background.errors import JOB_INTERRUPTED
from ddd_celery.background.store import (
    AttemptRecord,
    AttemptState,
    ClaimedJob,
    Dispatch,
    EnqueuedBy,
    JobLease,
    JobStatus,
    NewJob,
    StoredJob,
)
from ddd_celery.sql import (
    SqlAlchemyUnitOfWork,
    SqlJobStore,
    StoreUnavailableError,
    create_tables,
    drop_tables,
)

pytestmark = pytest.mark.postgres

NOW = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)
LEASE_MS = 30_000
REDISPATCH_MS = 60_000
WORKER = "celery@sqlfaults-1"
REPLY_LATE_S = 1.0
"""How long the proxy holds the reply back: the drop comes while it waits."""


@pytest.fixture(scope="module")
def prefix(engine: Engine) -> Iterator[str]:
    prefix = f"test_{uuid.uuid4().hex[:12]}_"
    create_tables(engine, prefix)
    yield prefix
    drop_tables(engine, prefix)


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    with FaultProxy.to_url(DATABASE_URL) as proxy:
        yield proxy


@pytest.fixture
def proxied(proxy: FaultProxy) -> Iterator[Engine]:
    engine = create_engine(
        proxy.url(DATABASE_URL), connect_args={"connect_timeout": 2}, hide_parameters=True
    )
    yield engine
    engine.dispose()


@dataclass(frozen=True, slots=True)
class Stores:
    store: SqlJobStore
    """Through the proxy."""
    direct: SqlJobStore
    """Straight to PostgreSQL: what the job is."""


@pytest.fixture
def stores(proxied: Engine, engine: Engine, prefix: str) -> Iterator[Stores]:
    yield Stores(SqlJobStore(proxied, prefix=prefix), SqlJobStore(engine, prefix=prefix))
    with engine.begin() as connection:
        connection.execute(create_tables(engine, prefix).jobs.delete())


def new_job(job_id: str, *, key: str | None = None) -> NewJob:
    return NewJob(
        id=job_id,
        name="sqlfaults.compile-statement",
        queue="sqlfaults",
        payload={"month": "2026-10"},
        enqueued_at=NOW,
        run_at=NOW,
        max_attempts=3,
        enqueued_by=EnqueuedBy(tenant_id="acme"),
        idempotency_key=key,
    )


def dropped_after_sending(proxy: FaultProxy, matching: bytes, *, back_after_s: float) -> None:
    """The next request holding ``matching`` reaches PostgreSQL, and its reply is lost: the
    proxy holds it back, the connection is cut while it waits (the statement has run and
    committed by then), and new connections are refused for ``back_after_s``."""
    proxy.delay_replies(REPLY_LATE_S, matching=matching, count=1)
    delayed = proxy.delayed

    def cut_while_late() -> None:
        deadline = time.monotonic() + 10
        while proxy.delayed == delayed and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(REPLY_LATE_S / 2)  # PostgreSQL has long run the statement: only the reply waits
        proxy.cut()
        time.sleep(back_after_s)
        proxy.restore()

    threading.Thread(target=cut_while_late, daemon=True).start()


Faulted = tuple[Callable[[], Any], Callable[[Any, StoredJob], None]]
"""The call to make through the proxy, and what it must have answered and left."""


def running(stores: Stores, job_id: str) -> JobLease:
    stores.direct.add(new_job(job_id), dispatched=True)
    claim = stores.direct.claim_job(
        job_id, now=NOW, lease_ms=LEASE_MS, token="attempt-1", worker=WORKER
    )
    assert claim is not None
    return claim.lease


def ended(outcome: AttemptState, *error: str) -> tuple[AttemptRecord, ...]:
    """The history of a job whose one attempt (``running``) ended at NOW with ``outcome``."""
    return (AttemptRecord(1, NOW, WORKER, outcome, NOW, *error),)


def claim_job(stores: Stores, job_id: str) -> Faulted:
    stores.direct.add(new_job(job_id), dispatched=True)

    def check(answer: ClaimedJob | None, job: StoredJob) -> None:
        assert answer is not None, "the claim sent again answered not claimable"
        assert (answer.lease.token, answer.lease.attempt) == ("attempt-1", 1)
        assert (job.status, job.attempts) == (JobStatus.RUNNING, 1)
        assert job.history == (AttemptRecord(1, NOW, WORKER),), "one attempt recorded"

    call = partial(
        stores.store.claim_job, job_id, now=NOW, lease_ms=LEASE_MS, token="attempt-1", worker=WORKER
    )
    return call, check


def claim_due(stores: Stores, job_id: str) -> Faulted:
    stores.direct.add(new_job(job_id), dispatched=True)

    def check(answer: list[ClaimedJob], job: StoredJob) -> None:
        assert [(c.job.id, c.lease.token, c.lease.attempt) for c in answer] == [
            (job_id, "poll-1:0", 1)
        ]
        assert (job.status, job.attempts) == (JobStatus.RUNNING, 1)
        assert job.history == (AttemptRecord(1, NOW, WORKER),), "one attempt recorded"

    call = partial(
        stores.store.claim_due,
        ["sqlfaults"],
        now=NOW,
        lease_ms=LEASE_MS,
        limit=5,
        token="poll-1",
        worker=WORKER,
    )
    return call, check


def complete(stores: Stores, job_id: str) -> Faulted:
    lease = running(stores, job_id)

    def check(answer: None, job: StoredJob) -> None:
        assert (job.status, job.attempts) == (JobStatus.SUCCEEDED, 1)
        assert job.history == ended(AttemptState.SUCCEEDED)

    return partial(stores.store.complete, lease, now=NOW), check


def fail(stores: Stores, job_id: str) -> Faulted:
    lease = running(stores, job_id)
    retry_at = NOW + timedelta(seconds=5)

    def check(answer: None, job: StoredJob) -> None:
        assert (job.status, job.attempts, job.run_at) == (JobStatus.FAILED, 1, retry_at)
        assert job.history == ended(AttemptState.FAILED, "E", "Boom")

    call = partial(
        stores.store.fail, lease, now=NOW, error_code="E", error_type="Boom", retry_at=retry_at
    )
    return call, check


def release(stores: Stores, job_id: str) -> Faulted:
    lease = running(stores, job_id)

    def check(answer: None, job: StoredJob) -> None:
        assert (job.status, job.attempts) == (JobStatus.QUEUED, 0), "the release counted twice"
        assert job.history == ended(AttemptState.RELEASED)

    return partial(stores.store.release, lease, now=NOW), check


def cancel(stores: Stores, job_id: str) -> Faulted:
    running(stores, job_id)

    def check(answer: bool, job: StoredJob) -> None:
        assert answer is True
        assert job.status is JobStatus.CANCELLED
        assert job.history == ended(AttemptState.CANCELLED)

    return partial(stores.store.cancel, job_id, tenant_id="acme", now=NOW), check


def take_due(stores: Stores, job_id: str) -> Faulted:
    stores.direct.add(new_job(job_id), dispatched=False)

    def check(answer: list[Dispatch], job: StoredJob) -> None:
        assert [dispatch.job_id for dispatch in answer] == [job_id], "a wake-up was lost"
        assert (
            stores.direct.take_due(
                now=NOW + timedelta(milliseconds=REDISPATCH_MS),
                limit=10,
                redispatch_after_ms=REDISPATCH_MS,
            )
            == []
        ), "marked dispatched once, at NOW"

    call = partial(
        stores.store.take_due, now=NOW, limit=10, redispatch_after_ms=REDISPATCH_MS, token="pass-1"
    )
    return call, check


def add(stores: Stores, job_id: str) -> Faulted:
    def check(answer: str, job: StoredJob) -> None:
        assert answer == job_id
        assert job.status is JobStatus.QUEUED

    return partial(stores.store.add, new_job(job_id, key="invoice-7"), dispatched=True), check


def retry_dead(stores: Stores, job_id: str) -> Faulted:
    lease = running(stores, job_id)
    stores.direct.fail(lease, now=NOW, error_code="E", error_type="Boom", retry_at=None)

    def check(answer: bool, job: StoredJob) -> None:
        assert answer is True, "the retry sent again answered not dead"
        assert (job.status, job.attempts) == (JobStatus.QUEUED, 0)
        assert job.history == ended(AttemptState.FAILED, "E", "Boom"), "kept as it was"

    return partial(stores.store.retry_dead, job_id, tenant_id="acme", now=NOW), check


def expire_leases(stores: Stores, job_id: str) -> Faulted:
    running(stores, job_id)

    def check(answer: list[StoredJob], job: StoredJob) -> None:
        assert [(handed.id, handed.status) for handed in answer] == [(job_id, JobStatus.FAILED)]
        assert (job.status, job.attempts) == (JobStatus.FAILED, 1)
        interrupted = AttemptState.INTERRUPTED, expired, JOB_INTERRUPTED, "JobInterruptedError"
        assert job.history == (AttemptRecord(1, NOW, WORKER, *interrupted),)

    expired = NOW + timedelta(milliseconds=LEASE_MS + 1)
    return partial(stores.store.expire_leases, now=expired, limit=10), check


OPERATIONS = {
    operation.__name__: operation
    for operation in (
        claim_job,
        claim_due,
        complete,
        fail,
        release,
        cancel,
        take_due,
        add,
        retry_dead,
        expire_leases,
    )
}


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_a_statement_whose_reply_is_lost_is_sent_again_and_answers_as_one_call(
    stores: Stores, proxy: FaultProxy, operation: str
) -> None:
    job_id = f"job-{operation}-{uuid.uuid4().hex[:8]}"
    call, check = OPERATIONS[operation](stores, job_id)
    stores.store.stats()  # a connection in the proxied pool
    by_id = {"claim_due", "take_due", "expire_leases"}
    matching = b"UPDATE" if operation in by_id else job_id.encode()
    dropped_after_sending(proxy, matching, back_after_s=0.3)

    answer = call()

    assert proxy.delayed == 1, "the fault did not happen"
    job = stores.direct.find(job_id, tenant_id=None)
    assert job is not None
    check(answer, job)


def test_a_drop_past_the_bound_is_store_unavailable_after_three_sends(
    stores: Stores, proxy: FaultProxy, proxied: Engine
) -> None:
    stores.direct.add(new_job("job-down"), dispatched=True)
    connects: list[object] = []
    stores.store.find("job-down", tenant_id=None)  # a connection in the pool
    event.listen(proxied, "do_connect", lambda *args: connects.append(args))
    dropped_after_sending(proxy, b"job-down", back_after_s=30)

    with pytest.raises(StoreUnavailableError, match="claim the job 'job-down'"):
        stores.store.claim_job("job-down", now=NOW, lease_ms=LEASE_MS, token="attempt-1")

    proxy.restore()
    assert len(connects) == 2, "sent again twice, each on a new connection"
    job = stores.direct.find("job-down", tenant_id=None)
    assert job is not None
    assert (job.status, job.attempts) == (JobStatus.RUNNING, 1)
    again = stores.store.claim_job("job-down", now=NOW, lease_ms=LEASE_MS, token="attempt-1")
    assert again is not None, "the caller's retry with its token is not lost"
    assert again.lease.attempt == 1


def test_in_a_unit_of_work_a_statement_is_sent_once(
    stores: Stores, proxy: FaultProxy, proxied: Engine, prefix: str
) -> None:
    unit_of_work = SqlAlchemyUnitOfWork(sessionmaker(proxied))
    store = SqlJobStore(proxied, unit_of_work=unit_of_work, prefix=prefix)
    sends: list[str] = []
    event.listen(
        proxied,
        "before_cursor_execute",
        lambda _c, _cur, statement, *_: sends.append(statement) if "INSERT" in statement else None,
    )

    dropped_after_sending(proxy, b"job-in-unit", back_after_s=0.2)
    with pytest.raises(StoreUnavailableError), unit_of_work.begin():
        store.add(new_job("job-in-unit"), dispatched=True)

    assert len(sends) == 1
    assert stores.direct.find("job-in-unit", tenant_id=None) is None
