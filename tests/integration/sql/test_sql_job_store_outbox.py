"""SqlJobStore as the outbox, on the real PostgreSQL: the job row is written in the use case's
transaction, published after its commit, and published by the relay when that publish never
came; claims and the relay skip the rows other transactions hold.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import BaseModel
from sqlalchemy import Engine, Table, select

from ddd_celery import BackgroundJobExecution, background
from ddd_celery.background import StoredJobQueue
from ddd_celery.background.publisher import JobPublisher
from ddd_celery.background.store import Dispatch, EnqueuedBy, JobStatus, NewJob
from ddd_celery.kernel import EnqueueRequest, FixedClock, FixedExecutionScope
from ddd_celery.kernel.ids import SequentialIdGenerator
from ddd_celery.sql import (
    DEFAULT_OUTBOX_GRACE_MS,
    SqlAlchemyUnitOfWork,
    SqlJobStore,
    create_tables,
    drop_tables,
)

from .conftest import add_note, visible

pytestmark = pytest.mark.postgres

NOW = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)
GRACE = timedelta(milliseconds=DEFAULT_OUTBOX_GRACE_MS)
LONG_MS = 300_000


class StatementPayload(BaseModel):
    month: str


@background("sqloutbox.compile-statement", max_attempts=3)
class CompileStatementJob:
    def run(self, payload: StatementPayload, execution: BackgroundJobExecution) -> None:
        raise AssertionError("these specs only enqueue")


class RecordingPublisher(JobPublisher):
    """Records each wake-up with the notes another connection sees when it is sent."""

    def __init__(self, engine: Engine, notes: Table) -> None:
        self._engine = engine
        self._notes = notes
        self.published: list[tuple[str, list[str]]] = []

    def publish(self, dispatch: Dispatch) -> None:
        self.published.append((dispatch.job_id, visible(self._engine, self._notes)))


@pytest.fixture(scope="module")
def prefix(engine: Engine) -> Iterator[str]:
    prefix = f"test_{uuid.uuid4().hex[:12]}_"
    create_tables(engine, prefix)
    yield prefix
    drop_tables(engine, prefix)


@dataclass(frozen=True, slots=True)
class Application:
    unit_of_work: SqlAlchemyUnitOfWork
    store: SqlJobStore
    relay: SqlJobStore
    """The store as beat's relay holds it: its own engine, no unit of work."""
    jobs: StoredJobQueue
    publisher: RecordingPublisher


@pytest.fixture
def app(
    unit_of_work: SqlAlchemyUnitOfWork, engine: Engine, notes: Table, prefix: str
) -> Iterator[Application]:
    store = SqlJobStore(engine, unit_of_work=unit_of_work, prefix=prefix)
    publisher = RecordingPublisher(engine, notes)
    jobs = StoredJobQueue(
        store=store,
        clock=FixedClock(NOW),
        ids=SequentialIdGenerator("job-"),
        scope=FixedExecutionScope(),
        unit_of_work=unit_of_work,
        publisher=publisher,
        declarations=[CompileStatementJob],
    )
    yield Application(unit_of_work, store, SqlJobStore(engine, prefix=prefix), jobs, publisher)
    with engine.begin() as connection:
        connection.execute(create_tables(engine, prefix).jobs.delete())


def new_job(job_id: str) -> NewJob:
    return NewJob(
        id=job_id,
        name="sqloutbox.compile-statement",
        queue="sqloutbox",
        payload={"month": "2026-10"},
        enqueued_at=NOW,
        run_at=NOW,
        max_attempts=3,
        enqueued_by=EnqueuedBy(),
    )


def taken(store: SqlJobStore, at: datetime) -> list[str]:
    return [d.job_id for d in store.take_due(now=at, limit=10, redispatch_after_ms=LONG_MS)]


def test_the_job_row_is_written_in_the_use_cases_transaction_and_published_after_its_commit(
    app: Application, notes: Table
) -> None:
    assert app.store.transactional

    with app.unit_of_work.begin():
        add_note(app.unit_of_work, notes, "closed 2026-10")
        job_id = app.jobs.enqueue(CompileStatementJob, {"month": "2026-10"})
        inside = app.store.find(job_id, tenant_id=None)
        outside = app.relay.find(job_id, tenant_id=None)
        assert app.publisher.published == []

    assert inside is not None
    assert inside.status is JobStatus.QUEUED
    assert outside is None, "another connection saw the row before the commit"
    assert app.relay.find(job_id, tenant_id=None) is not None
    assert app.publisher.published == [(job_id, ["closed 2026-10"])]


def test_a_use_case_that_raises_leaves_neither_its_data_nor_its_job(
    app: Application, engine: Engine, notes: Table
) -> None:
    enqueued: list[str] = []

    def refused_use_case() -> None:
        with app.unit_of_work.begin():
            add_note(app.unit_of_work, notes, "closed 2026-10")
            enqueued.append(app.jobs.enqueue(CompileStatementJob, {"month": "2026-10"}))
            raise RuntimeError("refused")

    with pytest.raises(RuntimeError, match="refused"):
        refused_use_case()
    [job_id] = enqueued

    assert visible(engine, notes) == []
    assert app.relay.find(job_id, tenant_id=None) is None
    assert app.publisher.published == []
    assert taken(app.relay, NOW + timedelta(hours=1)) == []


def test_a_commit_whose_publish_never_came_is_published_by_the_relay_once_after_the_grace(
    app: Application,
) -> None:
    with app.unit_of_work.begin():  # the process dies after this commit: nothing is published
        app.store.add(new_job("job-lost"), dispatched=True)

    assert taken(app.relay, NOW + GRACE - timedelta(microseconds=1)) == []
    assert taken(app.relay, NOW + GRACE) == ["job-lost"]
    assert taken(app.relay, NOW + GRACE + timedelta(seconds=1)) == []
    again = NOW + GRACE + timedelta(milliseconds=LONG_MS + 1)
    assert taken(app.relay, again) == ["job-lost"], "then the relay's usual window applies"


def test_a_job_claimed_within_the_grace_is_not_published_again(app: Application) -> None:
    with app.unit_of_work.begin():
        app.store.add(new_job("job-claimed"), dispatched=True)
    claimed = app.relay.claim_job("job-claimed", now=NOW, lease_ms=30_000)
    assert claimed is not None
    app.relay.release(claimed.lease, now=NOW)

    assert taken(app.relay, NOW + GRACE) == ["job-claimed"], "released: the relay publishes it"
    assert taken(app.relay, NOW + GRACE * 3) == []


def test_outside_a_unit_of_work_a_dispatched_job_waits_for_the_relays_window_only(
    app: Application,
) -> None:
    app.store.add(new_job("job-direct"), dispatched=True)

    assert taken(app.relay, NOW + GRACE * 10) == []
    assert taken(app.relay, NOW + timedelta(milliseconds=LONG_MS + 1)) == ["job-direct"]


def test_claims_and_the_relay_skip_the_rows_another_transaction_holds(
    app: Application, engine: Engine, prefix: str
) -> None:
    for job_id in ("held", "free-1", "free-2"):
        app.relay.add(new_job(job_id), dispatched=False)
    jobs = create_tables(engine, prefix).jobs

    with engine.begin() as other:
        other.execute(select(jobs.c.id).where(jobs.c.id == "held").with_for_update())
        relayed = taken(app.relay, NOW)
        claimed = app.relay.claim_due(["sqloutbox"], now=NOW, lease_ms=30_000, limit=10)

    assert sorted(relayed) == ["free-1", "free-2"]
    assert sorted(c.job.id for c in claimed) == ["free-1", "free-2"]
    assert taken(app.relay, NOW) == ["held"]


def test_an_add_that_fails_in_a_use_case_rolls_the_use_case_back(
    app: Application, engine: Engine, notes: Table
) -> None:
    bad = NewJob(**{**_fields(new_job("job-bad")), "payload": {"not json": {1, 2}}})

    def use_case() -> None:
        with app.unit_of_work.begin():
            add_note(app.unit_of_work, notes, "closed 2026-10")
            app.store.add(bad, dispatched=True)

    with pytest.raises(TypeError):
        use_case()

    assert visible(engine, notes) == []
    assert app.relay.find("job-bad", tenant_id=None) is None


def _fields(job: NewJob) -> dict[str, object]:
    return {name: getattr(job, name) for name in NewJob.__dataclass_fields__}


def test_a_batch_is_written_in_the_use_cases_transaction_and_woken_after_its_commit(
    app: Application, notes: Table
) -> None:
    requests = [EnqueueRequest(CompileStatementJob, {"month": f"2026-{m:02}"}) for m in (1, 2, 3)]

    with app.unit_of_work.begin():
        add_note(app.unit_of_work, notes, "closed 2026-Q1")
        ids = app.jobs.enqueue_many(requests)
        assert [app.relay.find(job_id, tenant_id=None) for job_id in ids] == [None] * 3
        assert app.publisher.published == []

    assert [app.relay.find(job_id, tenant_id=None) is not None for job_id in ids] == [True] * 3
    assert app.publisher.published == [(job_id, ["closed 2026-Q1"]) for job_id in ids]


def test_a_batch_of_a_use_case_that_raises_is_neither_kept_nor_woken(
    app: Application, engine: Engine, notes: Table
) -> None:
    def refused_use_case() -> None:
        with app.unit_of_work.begin():
            add_note(app.unit_of_work, notes, "closed 2026-Q1")
            app.jobs.enqueue_many([EnqueueRequest(CompileStatementJob, {"month": "2026-01"})] * 3)
            raise RuntimeError("refused")

    with pytest.raises(RuntimeError, match="refused"):
        refused_use_case()

    assert visible(engine, notes) == []
    assert app.relay.list_jobs() == []
    assert app.publisher.published == []


def test_a_committed_batch_whose_publish_never_came_is_published_by_the_relay(
    app: Application,
) -> None:
    with app.unit_of_work.begin():  # the process dies after this commit: nothing is published
        app.store.add_many([new_job("lost-1"), new_job("lost-2")], dispatched=True)

    assert taken(app.relay, NOW + GRACE - timedelta(microseconds=1)) == []
    assert sorted(taken(app.relay, NOW + GRACE)) == ["lost-1", "lost-2"]
