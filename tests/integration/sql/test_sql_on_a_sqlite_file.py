"""The SQL family on a SQLite file, the embedded default: one file shared by the processes of a
machine, no setup step, and errors as a store's when the file cannot be asked.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
from collections import Counter
from datetime import UTC, datetime, timedelta
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path

import pytest

from ddd_celery.kernel import FixedClock, LockUnavailableError
from ddd_celery.scheduling.outcomes import JobRun, Outcome
from ddd_celery.scheduling.run_state import Claim
from ddd_celery.sql import (
    MissingTablesError,
    SqlJobCheckpoints,
    SqlJobLastRuns,
    SqlJobRunState,
    SqlJobStore,
    SqlLock,
    StoreUnavailableError,
    sqlite_engine,
)

JOB = "notification.send-due-reminders"
T0 = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
KEY = f"job:{JOB}:2026-03-02T06:00:00.000Z"


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(T0)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "jobs.sqlite3"


def test_checkpoints_keep_the_microseconds_of_an_instant(path: Path) -> None:
    handled = T0 + timedelta(microseconds=123_456)
    SqlJobCheckpoints(sqlite_engine(path)).write(JOB, handled)

    assert SqlJobCheckpoints(sqlite_engine(path)).read(JOB) == handled


def test_a_checkpoint_crosses_a_restart_on_the_same_file(path: Path) -> None:
    before_restart = sqlite_engine(path)
    SqlJobCheckpoints(before_restart).write(JOB, T0)
    before_restart.dispose()

    assert SqlJobCheckpoints(sqlite_engine(path)).read(JOB) == T0


def test_every_adapter_shares_one_file_whose_tables_are_made_on_first_use(
    path: Path, clock: FixedClock
) -> None:
    engine = sqlite_engine(path)
    assert SqlLock(engine, clock).acquire(KEY, 1_000) is not None
    SqlJobCheckpoints(engine).write(JOB, T0)
    assert SqlJobRunState(engine, clock).claim(JOB, T0, queue=False, ttl_ms=1_000) is Claim.STARTED
    missed = JobRun(job=JOB, scheduled_at=T0, outcome=Outcome.MISSED, context="n")
    SqlJobLastRuns(engine).write(missed)
    assert SqlJobStore(engine).stats().counts == {}

    with sqlite3.connect(path) as connection:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
        mode = connection.execute("PRAGMA journal_mode").fetchone()
    assert {
        "ddd_locks",
        "ddd_job_checkpoints",
        "ddd_job_runs",
        "ddd_job_last_runs",
        "ddd_jobs",
    } <= tables
    assert mode == ("wal",)


def test_a_file_left_to_migrations_gets_no_table(path: Path) -> None:
    engine = sqlite_engine(path, prefix=None)

    with pytest.raises(MissingTablesError, match="create_tables"):
        SqlJobCheckpoints(engine).read(JOB)


def test_building_the_adapters_does_not_touch_the_file(path: Path, clock: FixedClock) -> None:
    engine = sqlite_engine(path)
    SqlLock(engine, clock)
    SqlJobCheckpoints(engine)
    SqlJobRunState(engine, clock)
    SqlJobLastRuns(engine)
    SqlJobStore(engine)

    assert not path.exists()


def test_a_file_that_is_not_a_database_makes_the_adapters_unavailable(
    path: Path, clock: FixedClock
) -> None:
    path.write_bytes(b"not a database, " * 256)
    engine = sqlite_engine(path)

    with pytest.raises(StoreUnavailableError, match="read the checkpoint") as raised:
        SqlJobCheckpoints(engine).read(JOB)
    assert isinstance(raised.value.__cause__.__cause__, sqlite3.DatabaseError)  # type: ignore[union-attr]
    with pytest.raises(StoreUnavailableError, match="claim"):
        SqlJobRunState(engine, clock).claim(JOB, T0, queue=False, ttl_ms=1_000)
    with pytest.raises(LockUnavailableError, match="acquire the lock"):
        SqlLock(engine, clock).acquire(KEY, 1_000)
    with pytest.raises(StoreUnavailableError, match="find the job"):
        SqlJobStore(engine).find("job-1", tenant_id=None)


def test_a_file_that_cannot_be_opened_is_unavailable(tmp_path: Path, clock: FixedClock) -> None:
    with pytest.raises(LockUnavailableError):
        SqlLock(sqlite_engine(tmp_path / "missing" / "jobs.sqlite3"), clock).acquire(KEY, 1_000)


def test_a_file_locked_past_the_busy_timeout_is_unavailable_then_recovers(
    path: Path, clock: FixedClock
) -> None:
    state = SqlJobRunState(sqlite_engine(path, busy_timeout_ms=1), clock)
    assert state.running(JOB) is None
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN EXCLUSIVE")

    with pytest.raises(StoreUnavailableError, match="finish"):
        state.finish(JOB, T0, ttl_ms=1_000)

    writer.execute("COMMIT")
    writer.close()
    assert state.claim(JOB, T0, queue=False, ttl_ms=1_000) is Claim.STARTED


def test_a_non_positive_busy_timeout_is_refused(path: Path) -> None:
    with pytest.raises(ValueError, match="busy timeout"):
        sqlite_engine(path, busy_timeout_ms=0)


def _contend(path: Path, keys: list[str], start: Barrier, won: Queue[str]) -> None:
    """One process of the race: take every key it can, report the ones it got."""
    lock = SqlLock(sqlite_engine(path), FixedClock(T0))
    start.wait()
    for key in keys:
        if lock.acquire(key, 60_000) is not None:
            won.put(key)


def _claim(path: Path, minutes: int, start: Barrier, claims: Queue[str]) -> None:
    """One process of the race: claim its own occurrence once every process is ready."""
    state = SqlJobRunState(sqlite_engine(path), FixedClock(T0))
    start.wait()
    claims.put(state.claim(JOB, T0 + timedelta(minutes=minutes), queue=True, ttl_ms=60_000))


@pytest.mark.processes
def test_two_processes_contending_for_the_same_keys_win_each_key_exactly_once(
    path: Path,
) -> None:
    context = multiprocessing.get_context("spawn")
    keys = [f"job:{JOB}:{n}" for n in range(200)]
    start, won = context.Barrier(2), context.Queue()
    racers = [context.Process(target=_contend, args=(path, keys, start, won)) for _ in range(2)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(timeout=60)

    assert [racer.exitcode for racer in racers] == [0, 0]
    winners = [won.get(timeout=5) for _ in range(len(keys))]
    assert sorted(winners) == sorted(keys)
    assert won.empty()


@pytest.mark.processes
def test_processes_claiming_at_once_start_one_occurrence_and_queue_one(path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    start, claims = context.Barrier(4), context.Queue()
    claimants = [
        context.Process(target=_claim, args=(path, minutes, start, claims)) for minutes in range(4)
    ]
    for claimant in claimants:
        claimant.start()
    for claimant in claimants:
        claimant.join(timeout=60)

    assert [claimant.exitcode for claimant in claimants] == [0] * 4
    answers = Counter(Claim(claims.get(timeout=5)) for _ in claimants)
    assert answers == {Claim.STARTED: 1, Claim.QUEUED: 1, Claim.BUSY: 2}
