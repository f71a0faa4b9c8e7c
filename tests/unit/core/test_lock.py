"""InMemoryLock beyond the lock contract (tests/contracts): its sweep of expired keys."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ddd_celery.kernel import FixedClock, InMemoryLock

START = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
KEY = "job:billing.send-payment-reminders:2026-03-02T06:00:00.000Z"


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(START)


@pytest.fixture
def lock(clock: FixedClock) -> InMemoryLock:
    return InMemoryLock(clock)


def test_expired_keys_are_swept_so_one_key_per_occurrence_does_not_grow_for_ever(
    clock: FixedClock, lock: InMemoryLock
) -> None:
    for minute in range(5_000):
        assert lock.acquire(f"job:a.b:{minute}", 60_000) is not None
        clock.advance(60_000)

    assert len(lock._held) < 1_100


def test_the_sweep_keeps_the_keys_still_held(clock: FixedClock, lock: InMemoryLock) -> None:
    for index in range(2_000):
        lock.acquire(f"job:a.b:{index}", 3_600_000)

    assert all(lock.acquire(f"job:a.b:{index}", 1_000) is None for index in range(2_000))
