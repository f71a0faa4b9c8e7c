"""The SQL family passes every contract, on the real PostgreSQL and on a SQLite file.

PostgreSQL (DATABASE_URL) gets tables under a prefix of this run's own, emptied after each test
and dropped at the end, since other tests share the server; SQLite a file per test. Each
subject's peer is an adapter on a second engine (another pool of connections), as another
process holds it. Stores that compare instants on the Clock they are given let time pass by
advancing it: nothing sleeps.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, delete
from sqlalchemy.orm import sessionmaker

from ddd_celery.kernel.clock import FixedClock
from ddd_celery.sql import (
    SqlAlchemyUnitOfWork,
    SqlJobCheckpoints,
    SqlJobLastRuns,
    SqlJobRunState,
    SqlJobStore,
    SqlLock,
    create_tables,
    drop_tables,
    sqlite_engine,
)
from ddd_celery.testing.contracts.checkpoints import JobCheckpointsContract, JobCheckpointsSubject
from ddd_celery.testing.contracts.job_store import JobStoreContract, JobStoreSubject
from ddd_celery.testing.contracts.last_runs import JobLastRunsContract, JobLastRunsSubject
from ddd_celery.testing.contracts.lock import LockContract, LockSubject
from ddd_celery.testing.contracts.run_state import JobRunStateContract, JobRunStateSubject

DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
START = datetime(2026, 3, 2, 5, 59, 58, tzinfo=UTC)
DATABASES = [pytest.param("postgresql", marks=pytest.mark.postgres), "sqlite"]


@dataclass(frozen=True, slots=True)
class Database:
    """Two engines on the same database, as two processes hold it, and the tables' prefix."""

    engine: Engine
    peer: Engine
    prefix: str


@pytest.fixture(scope="session")
def postgresql() -> Iterator[Database]:
    engine = create_engine(DATABASE_URL, connect_args={"connect_timeout": 2})
    peer = create_engine(DATABASE_URL, connect_args={"connect_timeout": 2})
    prefix = f"test_{uuid.uuid4().hex[:12]}_"
    create_tables(engine, prefix)
    yield Database(engine, peer, prefix)
    drop_tables(engine, prefix)
    engine.dispose()
    peer.dispose()


@pytest.fixture(params=DATABASES)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    if request.param == "sqlite":
        path = tmp_path / "jobs.sqlite3"
        engine, peer = sqlite_engine(path), sqlite_engine(path)
        create_tables(engine)
        yield Database(engine, peer, "ddd_")
        engine.dispose()
        peer.dispose()
        return
    database: Database = request.getfixturevalue("postgresql")
    yield database
    with database.engine.begin() as connection:
        for table in create_tables(database.engine, database.prefix).metadata.sorted_tables:
            connection.execute(delete(table))


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(START)


class TestSqlLock(LockContract):
    @pytest.fixture
    def lock_subject(self, database: Database, clock: FixedClock) -> LockSubject:
        return LockSubject(
            lock=SqlLock(database.engine, clock, prefix=database.prefix, sweep_every=2),
            peer=SqlLock(database.peer, clock, prefix=database.prefix),
            clock=clock,
            elapse=clock.advance,
        )


class TestSqlJobCheckpoints(JobCheckpointsContract):
    @pytest.fixture
    def checkpoints_subject(self, database: Database) -> JobCheckpointsSubject:
        return JobCheckpointsSubject(
            checkpoints=SqlJobCheckpoints(database.engine, prefix=database.prefix),
            peer=SqlJobCheckpoints(database.peer, prefix=database.prefix),
        )


class TestSqlJobRunState(JobRunStateContract):
    @pytest.fixture
    def run_state_subject(self, database: Database, clock: FixedClock) -> JobRunStateSubject:
        return JobRunStateSubject(
            state=SqlJobRunState(database.engine, clock, prefix=database.prefix),
            peer=SqlJobRunState(database.peer, clock, prefix=database.prefix),
            elapse=clock.advance,
        )


class TestSqlJobLastRuns(JobLastRunsContract):
    @pytest.fixture
    def last_runs_subject(self, database: Database) -> JobLastRunsSubject:
        return JobLastRunsSubject(
            last_runs=SqlJobLastRuns(database.engine, prefix=database.prefix),
            peer=SqlJobLastRuns(database.peer, prefix=database.prefix),
        )


class TestSqlJobStore(JobStoreContract):
    @pytest.fixture(params=["alone", "in a unit of work"])
    def job_store_subject(
        self, request: pytest.FixtureRequest, database: Database
    ) -> JobStoreSubject:
        peer = SqlJobStore(database.peer, prefix=database.prefix)
        if request.param == "alone":
            store = SqlJobStore(database.engine, prefix=database.prefix)
            return JobStoreSubject(store=store, peer=peer, start=START)
        unit_of_work = SqlAlchemyUnitOfWork(sessionmaker(database.engine))
        store = SqlJobStore(database.engine, unit_of_work=unit_of_work, prefix=database.prefix)
        return JobStoreSubject(store=store, peer=peer, start=START, unit_of_work=unit_of_work)
