"""The embedded SQLite adapters pass the contracts of the in-memory and Redis ones.

Each subject's peer is a second adapter on the same file, as a beat and a worker of one
machine hold it; time passes on the FixedClock both read.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ddd_celery.kernel import FixedClock
from ddd_celery.sqlite import (
    SqliteJobCheckpoints,
    SqliteJobLastRuns,
    SqliteJobRunState,
    SqliteLock,
)
from ddd_celery.testing.contracts.checkpoints import JobCheckpointsContract, JobCheckpointsSubject
from ddd_celery.testing.contracts.last_runs import JobLastRunsContract, JobLastRunsSubject
from ddd_celery.testing.contracts.lock import LockContract, LockSubject
from ddd_celery.testing.contracts.run_state import JobRunStateContract, JobRunStateSubject


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(datetime(2026, 3, 2, 5, 58, tzinfo=UTC))


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "ddd_celery.sqlite3"


class TestSqliteLock(LockContract):
    @pytest.fixture
    def lock_subject(self, path: Path, clock: FixedClock) -> Iterator[LockSubject]:
        lock, peer = SqliteLock(path, clock), SqliteLock(path, clock)
        yield LockSubject(lock=lock, peer=peer, clock=clock, elapse=clock.advance)
        lock.close()
        peer.close()


class TestSqliteJobCheckpoints(JobCheckpointsContract):
    @pytest.fixture
    def checkpoints_subject(self, path: Path) -> Iterator[JobCheckpointsSubject]:
        checkpoints, peer = SqliteJobCheckpoints(path), SqliteJobCheckpoints(path)
        yield JobCheckpointsSubject(checkpoints=checkpoints, peer=peer)
        checkpoints.close()
        peer.close()


class TestSqliteJobRunState(JobRunStateContract):
    @pytest.fixture
    def run_state_subject(self, path: Path, clock: FixedClock) -> Iterator[JobRunStateSubject]:
        state, peer = SqliteJobRunState(path, clock), SqliteJobRunState(path, clock)
        yield JobRunStateSubject(state=state, peer=peer, elapse=clock.advance)
        state.close()
        peer.close()


class TestSqliteJobLastRuns(JobLastRunsContract):
    @pytest.fixture
    def last_runs_subject(self, path: Path) -> Iterator[JobLastRunsSubject]:
        last_runs, peer = SqliteJobLastRuns(path), SqliteJobLastRuns(path)
        yield JobLastRunsSubject(last_runs=last_runs, peer=peer)
        last_runs.close()
        peer.close()
