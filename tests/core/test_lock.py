"""InMemoryLock: exclusion on a key for a time to live, read on the given clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ddd_celery.kernel import FixedClock, InMemoryLock, Lease

START = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
KEY = "job:billing.send-payment-reminders:2026-03-02T06:00:00.000Z"


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(START)


@pytest.fixture
def lock(clock: FixedClock) -> InMemoryLock:
    return InMemoryLock(clock)


def test_the_first_owner_gets_a_lease_until_its_time_to_live(lock: InMemoryLock) -> None:
    lease = lock.acquire(KEY, 1_000)

    assert lease is not None
    assert lease.key == KEY
    assert lease.expires_at == START + timedelta(seconds=1)


def test_a_held_key_is_refused_to_another_owner_without_blocking(lock: InMemoryLock) -> None:
    lock.acquire(KEY, 1_000)

    assert lock.acquire(KEY, 1_000) is None


def test_other_keys_are_independent(lock: InMemoryLock) -> None:
    lock.acquire(KEY, 1_000)

    assert lock.acquire(KEY.replace("06:00", "06:15"), 1_000) is not None


def test_a_key_is_free_again_once_its_time_to_live_passed_on_the_clock(
    clock: FixedClock, lock: InMemoryLock
) -> None:
    lock.acquire(KEY, 1_000)

    clock.advance(999)
    assert lock.acquire(KEY, 1_000) is None
    clock.advance(1)
    assert lock.acquire(KEY, 1_000) is not None


def test_the_owner_releases_its_key_and_another_may_take_it(lock: InMemoryLock) -> None:
    lease = lock.acquire(KEY, 1_000)
    assert lease is not None

    assert lock.release(lease) is True
    assert lock.acquire(KEY, 1_000) is not None


def test_a_lease_that_is_not_the_owner_releases_nothing(lock: InMemoryLock) -> None:
    lease = lock.acquire(KEY, 1_000)
    assert lease is not None
    forged = Lease(KEY, "someone-else", lease.expires_at)

    assert lock.release(forged) is False
    assert lock.acquire(KEY, 1_000) is None


def test_an_expired_lease_cannot_release_the_next_owners_key(
    clock: FixedClock, lock: InMemoryLock
) -> None:
    first = lock.acquire(KEY, 1_000)
    assert first is not None
    clock.advance(1_000)
    second = lock.acquire(KEY, 1_000)
    assert second is not None

    assert lock.release(first) is False
    assert lock.acquire(KEY, 1_000) is None


def test_releasing_a_lease_that_expired_unreleased_says_it_no_longer_held(
    clock: FixedClock, lock: InMemoryLock
) -> None:
    lease = lock.acquire(KEY, 1_000)
    assert lease is not None
    clock.advance(5_000)

    assert lock.release(lease) is False


def test_each_lease_has_its_own_token(clock: FixedClock, lock: InMemoryLock) -> None:
    first = lock.acquire(KEY, 1_000)
    clock.advance(1_000)
    second = lock.acquire(KEY, 1_000)

    assert first is not None
    assert second is not None
    assert first.token != second.token


@pytest.mark.parametrize("ttl_ms", [0, -1])
def test_a_time_to_live_that_is_not_positive_is_refused(lock: InMemoryLock, ttl_ms: int) -> None:
    with pytest.raises(ValueError, match="positive"):
        lock.acquire(KEY, ttl_ms)


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
