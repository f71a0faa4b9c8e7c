"""SqliteLock: the kernel Lock's guarantees, between processes sharing one file."""

from __future__ import annotations

import multiprocessing
import sqlite3
from collections.abc import Iterator
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path

import pytest

from ddd_celery.kernel import FixedClock, LockUnavailableError
from ddd_celery.sqlite import SqliteLock

KEY = "job:billing.send-payment-reminders:2026-03-02T06:00:00.000Z"


@pytest.fixture
def lock(path: Path, clock: FixedClock) -> Iterator[SqliteLock]:
    lock = SqliteLock(path, clock)
    yield lock
    lock.close()


def test_two_locks_on_the_same_file_exclude_each_other(path: Path, clock: FixedClock) -> None:
    beat, other_beat = SqliteLock(path, clock), SqliteLock(path, clock)

    assert beat.acquire(KEY, 1_000) is not None
    assert other_beat.acquire(KEY, 1_000) is None


def test_expired_keys_are_deleted_so_the_file_holds_live_keys_only(
    path: Path, clock: FixedClock, lock: SqliteLock
) -> None:
    for minute in range(10):
        lock.acquire(f"job:a.b:{minute}", 1_000)
    clock.advance(1_000)
    lock.acquire(KEY, 1_000)

    with sqlite3.connect(path) as connection:
        keys = connection.execute("SELECT key FROM ddd_locks").fetchall()
    assert keys == [(KEY,)]


def test_building_a_lock_does_not_touch_the_file(path: Path, clock: FixedClock) -> None:
    SqliteLock(path, clock)

    assert not path.exists()


def test_a_file_locked_past_the_busy_timeout_is_unavailable_then_recovers(
    path: Path, clock: FixedClock
) -> None:
    lock = SqliteLock(path, clock, busy_timeout_ms=1)
    lock.acquire("job:a.b:warm-up", 1_000)
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN EXCLUSIVE")

    with pytest.raises(LockUnavailableError) as raised:
        lock.acquire(KEY, 1_000)
    assert isinstance(raised.value.__cause__, sqlite3.OperationalError)

    writer.execute("COMMIT")
    writer.close()
    assert lock.acquire(KEY, 1_000) is not None


def test_a_file_that_is_not_a_database_is_unavailable(path: Path, clock: FixedClock) -> None:
    path.write_bytes(b"not a database, " * 256)

    with pytest.raises(LockUnavailableError, match="acquire the lock") as raised:
        SqliteLock(path, clock).acquire(KEY, 1_000)
    assert isinstance(raised.value.__cause__, sqlite3.DatabaseError)


def test_a_file_that_cannot_be_opened_is_unavailable(tmp_path: Path, clock: FixedClock) -> None:
    with pytest.raises(LockUnavailableError):
        SqliteLock(tmp_path / "missing" / "lock.sqlite3", clock).acquire(KEY, 1_000)


def _contend(
    path: Path, clock: FixedClock, keys: list[str], start: Barrier, won: Queue[str]
) -> None:
    """One process of the race: take every key it can, report the ones it got."""
    lock = SqliteLock(path, clock, busy_timeout_ms=5_000)
    start.wait()
    for key in keys:
        if lock.acquire(key, 60_000) is not None:
            won.put(key)
    lock.close()


@pytest.mark.processes
def test_two_processes_contending_for_the_same_keys_win_each_key_exactly_once(
    path: Path, clock: FixedClock
) -> None:
    context = multiprocessing.get_context("spawn")
    keys = [f"job:notification.send-due-reminders:{n}" for n in range(200)]
    start, won = context.Barrier(2), context.Queue()
    racers = [
        context.Process(target=_contend, args=(path, clock, keys, start, won)) for _ in range(2)
    ]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(timeout=60)

    assert [racer.exitcode for racer in racers] == [0, 0]
    winners = [won.get(timeout=5) for _ in range(len(keys))]
    assert sorted(winners) == sorted(keys)
    assert won.empty()
