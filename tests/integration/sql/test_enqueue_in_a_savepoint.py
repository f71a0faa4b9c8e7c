"""Issue 18.10: a savepoint rolled back inside a committed SQL unit of work, around enqueues.

The real PostgreSQL holds the business rows (SqlAlchemyUnitOfWork); the jobs are on the real
Redis (RedisJobStore, added after the commit) or in PostgreSQL (SqlJobStore, the outbox written
in the transaction). Either way the jobs enqueued outside the savepoint are kept and published,
and the one enqueued inside it is neither: the work that asked for it was rolled back.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from pydantic import BaseModel
from services import REDIS_URL
from sqlalchemy import Engine, Table

from ddd_celery import BackgroundJobExecution, background
from ddd_celery.background import StoredJobQueue
from ddd_celery.background.publisher import JobPublisher
from ddd_celery.background.store import Dispatch, JobStatus, JobStore
from ddd_celery.kernel import FixedClock, FixedExecutionScope
from ddd_celery.kernel.ids import SequentialIdGenerator
from ddd_celery.redis import RedisJobStore, connect
from ddd_celery.sql import SqlAlchemyUnitOfWork, SqlJobStore, create_tables, drop_tables

from .conftest import add_note, visible

pytestmark = pytest.mark.postgres

NOW = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)


class NotePayload(BaseModel):
    note: str


@background("sqlsavepoint.announce-note", max_attempts=3)
class AnnounceNoteJob:
    def run(self, payload: NotePayload, execution: BackgroundJobExecution) -> None:
        raise AssertionError("these specs only enqueue")


class RecordingPublisher(JobPublisher):
    def __init__(self) -> None:
        self.published: list[str] = []

    def publish(self, dispatch: Dispatch) -> None:
        self.published.append(dispatch.job_id)


@dataclass(frozen=True, slots=True)
class Application:
    unit_of_work: SqlAlchemyUnitOfWork
    store: JobStore
    jobs: StoredJobQueue
    publisher: RecordingPublisher


@pytest.fixture(scope="module")
def sql_prefix(engine: Engine) -> Iterator[str]:
    prefix = f"test_{uuid.uuid4().hex[:12]}_"
    create_tables(engine, prefix)
    yield prefix
    drop_tables(engine, prefix)


@pytest.fixture(params=[pytest.param("redis", marks=pytest.mark.redis), "sql"])
def app(
    request: pytest.FixtureRequest, unit_of_work: SqlAlchemyUnitOfWork, engine: Engine
) -> Iterator[Application]:
    store: JobStore
    if request.param == "redis":
        client = connect(REDIS_URL)
        prefix = f"test:savepoint:{uuid.uuid4().hex}:"
        store = RedisJobStore(client, prefix=prefix)
    else:
        prefix = request.getfixturevalue("sql_prefix")
        store = SqlJobStore(engine, unit_of_work=unit_of_work, prefix=prefix)
    publisher = RecordingPublisher()
    jobs = StoredJobQueue(
        store=store,
        clock=FixedClock(NOW),
        ids=SequentialIdGenerator("job-"),
        scope=FixedExecutionScope(),
        unit_of_work=unit_of_work,
        publisher=publisher,
        declarations=[AnnounceNoteJob],
    )
    yield Application(unit_of_work, store, jobs, publisher)
    if request.param == "redis":
        for key in client.scan_iter(match=f"{prefix}*"):
            client.delete(key)
        client.close()
    else:
        with engine.begin() as connection:
            connection.execute(create_tables(engine, prefix).jobs.delete())


def write_and_announce(app: Application, notes: Table, note: str) -> str:
    add_note(app.unit_of_work, notes, note)
    return app.jobs.enqueue(AnnounceNoteJob, {"note": note})


def test_a_savepoint_rolled_back_drops_its_job_and_keeps_those_enqueued_around_it(
    app: Application, engine: Engine, notes: Table
) -> None:
    with app.unit_of_work.begin():
        before = write_and_announce(app, notes, "before")
        savepoint = app.unit_of_work.session().begin_nested()
        inside = write_and_announce(app, notes, "inside")
        savepoint.rollback()
        after = write_and_announce(app, notes, "after")

    assert visible(engine, notes) == ["before", "after"]
    assert app.publisher.published == [before, after]
    kept = [app.store.find(job_id, tenant_id=None) for job_id in (before, inside, after)]
    assert [None if job is None else job.status for job in kept] == [
        JobStatus.QUEUED,
        None,
        JobStatus.QUEUED,
    ]


def test_a_savepoint_released_keeps_its_job_for_the_outermost_commit(
    app: Application, engine: Engine, notes: Table
) -> None:
    with app.unit_of_work.begin():
        with app.unit_of_work.session().begin_nested():
            inside = write_and_announce(app, notes, "released")
        assert app.publisher.published == []

    assert visible(engine, notes) == ["released"]
    assert app.publisher.published == [inside]
    assert app.store.find(inside, tenant_id=None) is not None
