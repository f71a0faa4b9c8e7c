"""SqliteJobCheckpoints and SqliteJobRunState: one file shared by processes, errors as a store's."""

from __future__ import annotations

import multiprocessing
import sqlite3
from collections import Counter
from datetime import UTC, datetime, timedelta
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path

import pytest

from ddd_celery.kernel import FixedClock
from ddd_celery.scheduling.outcomes import JobRun, Outcome
from ddd_celery.scheduling.run_state import Claim
from ddd_celery.sqlite import (
    SqliteJobCheckpoints,
    SqliteJobLastRuns,
    SqliteJobRunState,
    SqliteLock,
    StoreUnavailableError,
)

JOB = "notification.send-due-reminders"
T0 = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)


def test_checkpoints_keep_the_microseconds_of_an_instant(path: Path) -> None:
    handled = T0 + timedelta(microseconds=123_456)
    SqliteJobCheckpoints(path).write(JOB, handled)

    assert SqliteJobCheckpoints(path).read(JOB) == handled


def test_a_checkpoint_crosses_a_restart_on_the_same_file(path: Path) -> None:
    before_restart = SqliteJobCheckpoints(path)
    before_restart.write(JOB, T0)
    before_restart.close()

    assert SqliteJobCheckpoints(path).read(JOB) == T0


def test_the_lock_checkpoints_run_state_and_last_runs_share_one_file(
    path: Path, clock: FixedClock
) -> None:
    lock, checkpoints = SqliteLock(path, clock), SqliteJobCheckpoints(path)
    state, last_runs = SqliteJobRunState(path, clock), SqliteJobLastRuns(path)

    assert lock.acquire(f"job:{JOB}:2026-03-02T06:00:00.000Z", 1_000) is not None
    checkpoints.write(JOB, T0)
    assert state.claim(JOB, T0, queue=False, ttl_ms=1_000) is Claim.STARTED
    last_runs.write(JobRun(job=JOB, scheduled_at=T0, outcome=Outcome.MISSED, context="n"))

    with sqlite3.connect(path) as connection:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
    assert {"ddd_locks", "ddd_job_checkpoints", "ddd_job_runs", "ddd_job_last_runs"} <= tables


def test_the_file_is_in_write_ahead_logging_mode(path: Path) -> None:
    SqliteJobCheckpoints(path).write(JOB, T0)

    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_building_the_stores_does_not_touch_the_file(path: Path, clock: FixedClock) -> None:
    SqliteJobCheckpoints(path)
    SqliteJobRunState(path, clock)
    SqliteJobLastRuns(path)

    assert not path.exists()


def test_a_file_that_is_not_a_database_makes_the_stores_unavailable(
    path: Path, clock: FixedClock
) -> None:
    path.write_bytes(b"not a database, " * 256)

    with pytest.raises(StoreUnavailableError, match="read the checkpoint") as raised:
        SqliteJobCheckpoints(path).read(JOB)
    assert isinstance(raised.value.__cause__, sqlite3.DatabaseError)
    with pytest.raises(StoreUnavailableError, match="claim"):
        SqliteJobRunState(path, clock).claim(JOB, T0, queue=False, ttl_ms=1_000)
    with pytest.raises(StoreUnavailableError, match="read the last run"):
        SqliteJobLastRuns(path).read(JOB)


def test_a_run_state_locked_past_the_busy_timeout_is_unavailable_then_recovers(
    path: Path, clock: FixedClock
) -> None:
    state = SqliteJobRunState(path, clock, busy_timeout_ms=1)
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
        SqliteJobCheckpoints(path, busy_timeout_ms=0)


def _claim(path: Path, clock: FixedClock, minutes: int, start: Barrier, claims: Queue[str]) -> None:
    """One process of the race: claim its own occurrence once every process is ready."""
    state = SqliteJobRunState(path, clock, busy_timeout_ms=5_000)
    start.wait()
    claims.put(state.claim(JOB, T0 + timedelta(minutes=minutes), queue=True, ttl_ms=60_000))
    state.close()


@pytest.mark.processes
def test_processes_claiming_at_once_start_one_occurrence_and_queue_one(
    path: Path, clock: FixedClock
) -> None:
    context = multiprocessing.get_context("spawn")
    start, claims = context.Barrier(4), context.Queue()
    claimants = [
        context.Process(target=_claim, args=(path, clock, minutes, start, claims))
        for minutes in range(4)
    ]
    for claimant in claimants:
        claimant.start()
    for claimant in claimants:
        claimant.join(timeout=60)

    assert [claimant.exitcode for claimant in claimants] == [0] * 4
    answers = Counter(Claim(claims.get(timeout=5)) for _ in claimants)
    assert answers == {Claim.STARTED: 1, Claim.QUEUED: 1, Claim.BUSY: 2}
