"""Reading many jobs at once from the SQL stores: one statement per batch of jobs, not one per
job, on PostgreSQL and on a SQLite file; none for no jobs; a store's error when it cannot ask."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event

from ddd_celery.kernel import FixedClock
from ddd_celery.scheduling.outcomes import JobRun, Outcome
from ddd_celery.sql import (
    SqlJobCheckpoints,
    SqlJobLastRuns,
    SqlJobRunState,
    StoreUnavailableError,
    create_tables,
    drop_tables,
    sqlite_engine,
)

T0 = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
JOBS = [f"billing.job-{number}" for number in range(1_200)]
WRITTEN = JOBS[::100]
"""The jobs with a row in each store: the others read as None."""


@pytest.fixture(scope="module")
def pg_prefix(engine: Engine) -> Iterator[str]:
    prefix = f"test_{uuid.uuid4().hex[:12]}_"
    create_tables(engine, prefix)
    yield prefix
    drop_tables(engine, prefix)


@pytest.fixture(params=[pytest.param("postgresql", marks=pytest.mark.postgres), "sqlite"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Engine, str]]:
    """An engine and the tables' prefix: the run's PostgreSQL tables, or a SQLite file."""
    if request.param == "postgresql":
        engine = request.getfixturevalue("engine")
        prefix = request.getfixturevalue("pg_prefix")
        yield engine, prefix
        with engine.begin() as connection:
            for table in create_tables(engine, prefix).metadata.sorted_tables:
                connection.execute(table.delete())
        return
    engine = sqlite_engine(tmp_path / "jobs.sqlite3")
    yield engine, "ddd_"
    engine.dispose()


def batch_reads(engine: Engine, prefix: str) -> dict[str, Callable[[list[str]], dict[str, Any]]]:
    """The batch read of each store, on ``engine``, each job of ``WRITTEN`` written first."""
    clock = FixedClock(T0)
    checkpoints = SqlJobCheckpoints(engine, prefix=prefix)
    run_state = SqlJobRunState(engine, clock, prefix=prefix)
    last_runs = SqlJobLastRuns(engine, prefix=prefix)
    for minutes, job in enumerate(WRITTEN):
        at = T0 + timedelta(minutes=minutes)
        checkpoints.write(job, at)
        run_state.claim(job, at, queue=False, ttl_ms=60_000)
        last_runs.write(JobRun(job=job, scheduled_at=at, outcome=Outcome.SUCCEEDED, context="b"))
    return {
        "job_checkpoints": checkpoints.read_many,
        "job_runs": run_state.running_many,
        "job_last_runs": last_runs.read_many,
    }


def sent_by(
    engine: Engine, read_many: Callable[[list[str]], dict[str, Any]], jobs: list[str]
) -> tuple[list[str], dict[str, Any]]:
    """The statements ``read_many(jobs)`` sent on ``engine``, and its answer."""
    sent: list[str] = []
    listener = lambda *args: sent.append(args[2])  # noqa: E731
    event.listen(engine, "before_cursor_execute", listener)
    try:
        answer = read_many(jobs)
    finally:
        event.remove(engine, "before_cursor_execute", listener)
    return sent, answer


def test_a_batch_read_of_1200_jobs_is_at_most_three_statements(
    database: tuple[Engine, str],
) -> None:
    engine, prefix = database
    reads = batch_reads(engine, prefix)
    for read_many in reads.values():  # a first connection's set-up is not the read's
        read_many(JOBS[:1])

    for table, read_many in reads.items():
        sent, answer = sent_by(engine, read_many, JOBS)

        assert 1 <= len(sent) <= 3, table
        assert all(s.lstrip().startswith("SELECT") and f"{prefix}{table}" in s for s in sent)
        assert set(answer) == set(JOBS)
        assert {job for job, value in answer.items() if value is not None} == set(WRITTEN)


def test_a_batch_read_of_no_jobs_sends_nothing(database: tuple[Engine, str]) -> None:
    engine, prefix = database
    reads = batch_reads(engine, prefix)

    for read_many in reads.values():
        assert sent_by(engine, read_many, []) == ([], {})


@pytest.fixture
def down() -> Iterator[Engine]:
    """An engine on a port nothing listens on: connecting is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    engine = create_engine(f"postgresql+psycopg://postgres@127.0.0.1:{port}/test")
    yield engine
    engine.dispose()


def test_a_batch_read_on_a_database_that_cannot_be_reached_is_a_store_unavailable(
    down: Engine,
) -> None:
    with pytest.raises(StoreUnavailableError, match="read the checkpoints") as raised:
        SqlJobCheckpoints(down).read_many(JOBS)
    assert raised.value.__cause__ is not None
    with pytest.raises(StoreUnavailableError, match="read the runs in progress"):
        SqlJobRunState(down, FixedClock(T0)).running_many(JOBS)
    with pytest.raises(StoreUnavailableError, match="read the last runs"):
        SqlJobLastRuns(down).read_many(JOBS)
