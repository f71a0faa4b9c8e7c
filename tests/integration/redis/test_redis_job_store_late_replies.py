"""RedisJobStore behind the fault proxy: a script whose reply comes 1.5 s late, with
``connect()``'s defaults (1 s socket timeout, one retry on a new connection), runs twice on
Redis, and the caller sees the answer of the second run. Each command must answer as if it had
run once (issue 18, item 1).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from fault_proxy import FaultProxy
from redis import Redis

from ddd_celery.background.store import (
    AttemptState,
    EnqueuedBy,
    JobLease,
    JobStatus,
    LostLeaseError,
    NewJob,
)
from ddd_celery.redis import RedisJobStore, connect

pytestmark = pytest.mark.redis

T0 = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
LEASE_MS = 30_000
LATE_S = 1.5
"""Longer than connect()'s 1 s socket timeout: redis-py gives up and sends the script again."""


@dataclass
class Stores:
    late: RedisJobStore
    """Through the proxy, whose next EVALSHA reply is held back (``make_late``)."""
    direct: RedisJobStore
    """On the same keys, straight to Redis: to set up and to look."""
    proxy: FaultProxy

    def make_late(self) -> None:
        self.proxy.delay_replies(LATE_S, matching=b"EVALSHA", count=1)

    def assert_sent_twice(self) -> None:
        """The fault happened: one reply held back, the script sent again on a new connection."""
        assert self.proxy.delayed == 1
        assert self.proxy.connections >= 2


@pytest.fixture
def stores(redis_url: str, prefix: str) -> Iterator[Stores]:
    with FaultProxy.to_url(redis_url) as proxy:
        late_client: Redis = connect(proxy.url(redis_url))
        direct_client: Redis = connect(redis_url)
        yield Stores(
            late=RedisJobStore(late_client, prefix=prefix),
            direct=RedisJobStore(direct_client, prefix=prefix),
            proxy=proxy,
        )
        late_client.close()
        direct_client.close()


def at(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def new_job(job_id: str, *, run_at: datetime = T0, max_attempts: int = 1) -> NewJob:
    return NewJob(
        id=job_id,
        name="billing.compile-statements",
        queue="billing",
        payload={"month": "2026-10"},
        enqueued_at=T0,
        run_at=run_at,
        max_attempts=max_attempts,
        enqueued_by=EnqueuedBy("corr-1", "user:42", None, None),
    )


def warm(stores: Stores) -> None:
    """Run each script once through the proxy, so Redis knows it (a NOSCRIPT answer would make
    redis-py load it instead of sending it twice) and the proxy holds a connection."""
    forged = JobLease("nope", 1, "forged", T0)
    store = stores.late
    store.claim_job("nope", now=T0, lease_ms=LEASE_MS)
    store.claim_due(["nothing"], now=T0, lease_ms=LEASE_MS, limit=1)
    store.take_due(now=at(-1), limit=1, redispatch_after_ms=1)
    store.cancel("nope", tenant_id=None, now=T0)
    for report in (store.complete, store.release):
        with pytest.raises(LostLeaseError):  # the script ran: all this is for
            report(forged, now=T0)
    with pytest.raises(LostLeaseError):
        store.fail(forged, now=T0, error_code="X", error_type="E", retry_at=None)
    store.purge_finished(before=T0, limit=1)


def found(stores: Stores, job_id: str) -> tuple[JobStatus, int]:
    job = stores.direct.find(job_id, tenant_id=None)
    assert job is not None
    return job.status, job.attempts


def test_a_claim_whose_reply_is_late_holds_its_lease_and_counts_one_attempt(
    stores: Stores,
) -> None:
    stores.direct.add(new_job("j1"), dispatched=True)
    warm(stores)
    stores.make_late()

    claimed = stores.late.claim_job("j1", now=T0, lease_ms=LEASE_MS, worker="celery@w1")

    stores.assert_sent_twice()
    assert claimed is not None
    assert (claimed.lease.attempt, claimed.job.attempts) == (1, 1)
    assert [(a.number, a.worker) for a in claimed.job.history] == [(1, "celery@w1")]
    assert found(stores, "j1") == (JobStatus.RUNNING, 1)
    stores.direct.complete(claimed.lease, now=at(10))
    assert found(stores, "j1") == (JobStatus.SUCCEEDED, 1)
    job = stores.direct.find("j1", tenant_id=None)
    assert job is not None
    assert [(a.number, a.outcome) for a in job.history] == [(1, AttemptState.SUCCEEDED)]


def test_a_poller_claim_whose_reply_is_late_answers_the_jobs_it_claimed_and_no_more(
    stores: Stores,
) -> None:
    for job_id in ("j1", "j2", "j3"):
        stores.direct.add(new_job(job_id), dispatched=True)
    warm(stores)
    stores.make_late()

    claimed = stores.late.claim_due(["billing"], now=T0, lease_ms=LEASE_MS, limit=2)

    stores.assert_sent_twice()
    assert [(c.job.id, c.lease.attempt) for c in claimed] == [("j1", 1), ("j2", 1)]
    assert [found(stores, job_id) for job_id in ("j1", "j2", "j3")] == [
        (JobStatus.RUNNING, 1),
        (JobStatus.RUNNING, 1),
        (JobStatus.QUEUED, 0),
    ]
    for claim in claimed:
        stores.direct.complete(claim.lease, now=at(10))


@pytest.mark.parametrize("report", ["complete", "retry", "die", "release"])
def test_a_report_whose_reply_is_late_is_taken_once(stores: Stores, report: str) -> None:
    stores.direct.add(new_job("j1", max_attempts=2), dispatched=True)
    claimed = stores.direct.claim_job("j1", now=T0, lease_ms=LEASE_MS)
    assert claimed is not None
    warm(stores)
    stores.make_late()

    lease, now = claimed.lease, at(100)
    if report == "complete":
        stores.late.complete(lease, now=now)
    elif report == "retry":
        stores.late.fail(lease, now=now, error_code="X", error_type="E", retry_at=at(5_000))
    elif report == "die":
        stores.late.fail(lease, now=now, error_code="X", error_type="E", retry_at=None)
    else:
        stores.late.release(lease, now=now)

    stores.assert_sent_twice()
    expected = {
        "complete": (JobStatus.SUCCEEDED, 1),
        "retry": (JobStatus.FAILED, 1),
        "die": (JobStatus.DEAD, 1),
        "release": (JobStatus.QUEUED, 0),
    }
    assert found(stores, "j1") == expected[report]


def test_a_cancel_whose_reply_is_late_answers_true(stores: Stores) -> None:
    stores.direct.add(new_job("j1"), dispatched=True)
    warm(stores)
    stores.make_late()

    cancelled = stores.late.cancel("j1", tenant_id=None, now=at(5))

    stores.assert_sent_twice()
    assert cancelled is True
    assert found(stores, "j1") == (JobStatus.CANCELLED, 0)


def test_a_relay_query_whose_reply_is_late_loses_no_wake_up(stores: Stores) -> None:
    stores.direct.add(new_job("j1", run_at=at(1_000)), dispatched=False)
    stores.direct.add(new_job("j2", run_at=at(2_000)), dispatched=False)
    warm(stores)
    stores.make_late()

    due = stores.late.take_due(now=at(5_000), limit=10, redispatch_after_ms=30_000)

    stores.assert_sent_twice()
    assert [d.job_id for d in due] == ["j1", "j2"]
    again = stores.direct.take_due(now=at(5_001), limit=10, redispatch_after_ms=30_000)
    assert again == []  # marked dispatched once: the next pass leaves them to their messages


def test_an_add_whose_reply_is_late_keeps_one_job(stores: Stores) -> None:
    warm(stores)
    stores.late.add(new_job("warm-add"), dispatched=True)
    stores.make_late()

    kept = stores.late.add(new_job("j1"), dispatched=True)

    stores.assert_sent_twice()
    assert kept == "j1"
    assert sorted(job.id for job in stores.direct.list_jobs()) == ["j1", "warm-add"]


def test_a_purge_batch_whose_reply_is_late_deletes_its_batch_once(stores: Stores) -> None:
    for job_id in ("j1", "j2", "j3"):
        stores.direct.add(new_job(job_id), dispatched=False)
    for n, job_id in enumerate(("j1", "j2", "j3")):
        stores.direct.cancel(job_id, tenant_id=None, now=at(n))
    warm(stores)
    stores.make_late()

    purged = stores.late.purge_finished(before=at(10), limit=2)

    stores.assert_sent_twice()
    assert purged == 2
    assert [job.id for job in stores.direct.list_jobs()] == ["j3"]
