"""Issue 7's acceptance: a job enqueued in a SQL unit of work is published iff it commits.

The real PostgreSQL holds the business row (SqlAlchemyUnitOfWork), the real Redis the job
(RedisJobStore on a prefix of this test's own); the publisher records what it is asked to send
and, at that moment, which rows another connection sees.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from pydantic import BaseModel
from redis import Redis
from sqlalchemy import Engine, Table
from sqlalchemy.exc import IntegrityError

from ddd_celery import BackgroundJobExecution, background
from ddd_celery.background import StoredJobQueue
from ddd_celery.background.publisher import JobPublisher
from ddd_celery.background.store import Dispatch, JobStatus
from ddd_celery.kernel import Actor, ExecutionContext, FixedClock, FixedExecutionScope
from ddd_celery.kernel.ids import SequentialIdGenerator
from ddd_celery.redis import RedisJobStore
from ddd_celery.sql import SqlAlchemyUnitOfWork

from .conftest import add_note, visible

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

NOW = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)


class StatementPayload(BaseModel):
    month: str


@background("sqlspecs.compile-statement", max_attempts=3)
class CompileStatementJob:
    def run(self, payload: StatementPayload, execution: BackgroundJobExecution) -> None:
        raise AssertionError("these specs only enqueue")


class Abandoned(Exception):
    pass


@dataclass(frozen=True, slots=True)
class Published:
    dispatch: Dispatch
    rows_visible: list[str]


class RecordingPublisher(JobPublisher):
    """Records each wake-up, with the rows another connection sees when it is sent."""

    def __init__(self, engine: Engine, notes: Table) -> None:
        self._engine = engine
        self._notes = notes
        self.published: list[Published] = []

    def publish(self, dispatch: Dispatch) -> None:
        self.published.append(Published(dispatch, visible(self._engine, self._notes)))


@dataclass(frozen=True, slots=True)
class Application:
    unit_of_work: SqlAlchemyUnitOfWork
    jobs: StoredJobQueue
    store: RedisJobStore
    publisher: RecordingPublisher
    scope: FixedExecutionScope


@pytest.fixture
def app(
    unit_of_work: SqlAlchemyUnitOfWork, engine: Engine, notes: Table, redis_client: Redis
) -> Iterator[Application]:
    prefix = f"test:sql:{uuid.uuid4().hex}:"
    store = RedisJobStore(redis_client, prefix=prefix)
    publisher = RecordingPublisher(engine, notes)
    scope = FixedExecutionScope()
    jobs = StoredJobQueue(
        store=store,
        clock=FixedClock(NOW),
        ids=SequentialIdGenerator("job-"),
        scope=scope,
        unit_of_work=unit_of_work,
        publisher=publisher,
        declarations=[CompileStatementJob],
    )
    yield Application(unit_of_work, jobs, store, publisher, scope)
    for key in redis_client.scan_iter(match=f"{prefix}*"):
        redis_client.delete(key)


def close_the_month(app: Application, notes: Table, month: str, *, then: str = "commit") -> str:
    """The use case: record the month closed and have its statement compiled in background."""
    context = ExecutionContext("command", Actor("user", "u-1"), "corr-1", tenant_id="clinic-7")
    with app.scope.open(context), app.unit_of_work.begin():
        add_note(app.unit_of_work, notes, f"closed {month}")
        job_id = app.jobs.enqueue(CompileStatementJob, {"month": month})
        assert app.store.find(job_id, tenant_id=None) is None, "added before the commit"
        if then == "roll back":
            app.unit_of_work.session().rollback()
        elif then == "raise":
            raise Abandoned
        return job_id


def test_a_committed_use_case_adds_and_publishes_its_job_once_after_the_row_is_visible(
    app: Application, engine: Engine, notes: Table
) -> None:
    job_id = close_the_month(app, notes, "2026-10")

    assert visible(engine, notes) == ["closed 2026-10"]
    assert app.publisher.published == [
        Published(Dispatch(job_id, "sqlspecs.compile-statement", "sqlspecs"), ["closed 2026-10"])
    ]
    job = app.store.find(job_id, tenant_id="clinic-7")
    assert job is not None
    assert (job.status, job.payload, job.enqueued_by.correlation_id) == (
        JobStatus.QUEUED,
        {"month": "2026-10"},
        "corr-1",
    )


def test_a_use_case_that_rolls_back_neither_adds_nor_publishes_its_job(
    app: Application, engine: Engine, notes: Table
) -> None:
    job_id = close_the_month(app, notes, "2026-10", then="roll back")

    assert visible(engine, notes) == []
    assert app.publisher.published == []
    assert app.store.find(job_id, tenant_id=None) is None
    assert app.store.stats().counts == {}


def test_a_use_case_that_raises_neither_adds_nor_publishes_its_job(
    app: Application, engine: Engine, notes: Table
) -> None:
    with pytest.raises(Abandoned):
        close_the_month(app, notes, "2026-10", then="raise")

    assert visible(engine, notes) == []
    assert app.publisher.published == []
    assert app.store.stats().counts == {}
    assert app.store.list_jobs() == []


def test_a_commit_the_database_refuses_neither_adds_nor_publishes_its_job(
    app: Application, engine: Engine, notes: Table
) -> None:
    close_the_month(app, notes, "2026-10")

    with pytest.raises(IntegrityError):
        close_the_month(app, notes, "2026-10")  # the deferred constraint refuses the COMMIT

    assert visible(engine, notes) == ["closed 2026-10"]
    assert len(app.publisher.published) == 1
    assert app.store.stats().total(JobStatus.QUEUED) == 1
