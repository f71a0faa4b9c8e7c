"""StoreClock: the local clock corrected by the store's, measured NTP-style, on a fake store."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from ddd_celery.background.store_clock import StoreClock
from ddd_celery.kernel import FixedClock

LOCAL = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


class FakeStore:
    """A store whose clock is ``ahead`` of the local one; each read takes ``trip`` (the store
    reads its clock halfway through), or raises while ``down``."""

    def __init__(self, local: FixedClock, ahead: timedelta) -> None:
        self.local = local
        self.ahead = ahead
        self.trip = timedelta(milliseconds=4)
        self.down = False
        self.reads = 0
        self.clock_of_its_own = True

    def store_time(self) -> datetime | None:
        self.reads += 1
        if self.down:
            raise ConnectionError("the store cannot be asked")
        self.local.advance(self.trip / 2)
        at = self.local.now() + self.ahead
        self.local.advance(self.trip / 2)
        return at if self.clock_of_its_own else None


def monotonic_of(local: FixedClock) -> Callable[[], float]:
    """Seconds on the local clock: the fake store's time passes only there."""

    def monotonic() -> float:
        return (local.now() - LOCAL).total_seconds()

    return monotonic


def clock_on(store: FakeStore, **options: int) -> StoreClock:
    return StoreClock(
        store.store_time, local=store.local, monotonic=monotonic_of(store.local), **options
    )


@pytest.mark.parametrize("ahead_ms", [-2_000, -5, 0, 5, 2_000])
def test_now_is_the_stores_instant_measured_at_the_midpoint_of_the_round_trip(
    ahead_ms: int,
) -> None:
    local = FixedClock(LOCAL)
    store = FakeStore(local, timedelta(milliseconds=ahead_ms))
    clock = clock_on(store)

    first = clock.now()

    assert clock.offset == timedelta(milliseconds=ahead_ms)
    assert first == local.now() + timedelta(milliseconds=ahead_ms)
    assert store.reads == 2  # two round trips, the shorter kept


def test_the_offset_is_measured_at_first_use_and_again_after_every_ms_only() -> None:
    local = FixedClock(LOCAL)
    store = FakeStore(local, timedelta(milliseconds=30))
    clock = clock_on(store, every_ms=60_000)
    clock.now()
    store.ahead = timedelta(milliseconds=-10)  # the store's clock was stepped back

    local.advance(59_000)
    before = clock.now() - local.now()
    local.advance(2_000)
    after = clock.now() - local.now()

    assert store.reads == 4
    assert before == timedelta(milliseconds=30)
    assert after == timedelta(milliseconds=-10)


def test_a_failed_measure_keeps_the_last_offset_logs_once_and_is_retried_after_retry_ms(
    caplog: pytest.LogCaptureFixture,
) -> None:
    local = FixedClock(LOCAL)
    store = FakeStore(local, timedelta(milliseconds=700))
    store.trip = timedelta(0)  # instants to the microsecond: a retry is due exactly 5 s later
    clock = clock_on(store, every_ms=60_000, retry_ms=5_000)
    clock.now()
    store.down = True

    with caplog.at_level(logging.WARNING, logger="ddd_celery.background"):
        local.advance(60_000)
        during = [clock.now() - local.now() for _ in range(3)]
        local.advance(5_000)
        clock.now()
    store.down = False
    store.ahead = timedelta(milliseconds=800)
    local.advance(5_000)
    recovered = clock.now() - local.now()

    assert during == [timedelta(milliseconds=700)] * 3
    assert store.reads == 6  # the first (2), the failed one, its retry 5 s later, the recovery (2)
    assert recovered == timedelta(milliseconds=800)
    warnings = [r for r in caplog.records if "Store clock could not be read" in r.getMessage()]
    assert len(warnings) == 1
    assert "ConnectionError" in warnings[0].getMessage()


def test_a_store_that_cannot_be_asked_at_first_use_leaves_the_local_clock_until_it_can() -> None:
    local = FixedClock(LOCAL)
    store = FakeStore(local, timedelta(milliseconds=250))
    store.down = True
    clock = clock_on(store, retry_ms=1_000)

    assert clock.now() == local.now()
    store.down = False
    local.advance(1_000)
    assert clock.now() == local.now() + timedelta(milliseconds=250)


def test_a_late_reply_is_used_only_until_a_quick_one_replaces_it_soon_after() -> None:
    local = FixedClock(LOCAL)
    # (ms before the store reads its clock, ms after): its clock is the local one; the first
    # reply is held 1.5 s on its way back, so its midpoint is 750 ms past the store's instant
    trips = [(2, 1_500), (2, 1_500), (2, 2), (2, 2), (2, 2), (2, 2)]

    def read() -> datetime:
        before, after = trips.pop(0)
        local.advance(before)
        at = local.now() + timedelta(milliseconds=ahead)
        local.advance(after)
        return at

    ahead = 0
    clock = StoreClock(read, local=local, monotonic=monotonic_of(local), retry_ms=2_000)
    clock.now()
    uncertain = clock.offset
    local.advance(2_000)
    clock.now()
    trusted = clock.offset
    ahead = 300
    local.advance(2_000)
    clock.now()

    assert uncertain == timedelta(milliseconds=-749)
    assert trusted == timedelta(0)
    assert clock.offset == timedelta(0), "a trusted offset is kept for every_ms"
    assert trips == [(2, 2), (2, 2)]


def test_a_later_late_reply_never_replaces_a_trusted_offset() -> None:
    local = FixedClock(LOCAL)
    store = FakeStore(local, timedelta(milliseconds=40))
    clock = clock_on(store, every_ms=10_000, retry_ms=1_000, max_round_trip_ms=250)
    clock.now()
    store.trip = timedelta(milliseconds=1_200)
    store.ahead = timedelta(milliseconds=900)

    local.advance(10_000)
    clock.now()
    local.advance(1_000)
    clock.now()

    assert clock.offset == timedelta(milliseconds=40)
    assert store.reads == 6  # the late measure was retried after retry_ms, not after every_ms


def test_a_store_whose_clock_is_the_callers_is_never_asked_again() -> None:
    local = FixedClock(LOCAL)
    store = FakeStore(local, timedelta(0))
    store.clock_of_its_own = False
    clock = clock_on(store)

    instants = [clock.now() for _ in range(3)]
    local.advance(timedelta(days=1))
    clock.now()

    assert store.reads == 1
    assert clock.offset == timedelta(0)
    assert instants[0] == LOCAL + store.trip


def test_the_shorter_of_two_round_trips_is_kept() -> None:
    local = FixedClock(LOCAL)
    trips = [(30, 2), (2, 2)]  # the first opens a connection before the store reads its clock

    def read() -> datetime:
        before, after = trips.pop(0)
        local.advance(before)
        at = local.now()
        local.advance(after)
        return at

    clock = StoreClock(read, local=local, monotonic=monotonic_of(local))
    clock.now()

    assert clock.offset == timedelta(0)
    assert trips == []


def test_threads_at_first_use_wait_for_one_measure_and_all_read_the_stores_clock() -> None:
    local = FixedClock(LOCAL)
    inside = threading.Event()
    release = threading.Event()

    def slow_read() -> datetime:
        inside.set()
        release.wait(5)
        return local.now() + timedelta(seconds=3)

    clock = StoreClock(slow_read, local=local, monotonic=monotonic_of(local))
    seen: list[datetime] = []
    threads = [threading.Thread(target=lambda: seen.append(clock.now())) for _ in range(4)]
    for thread in threads:
        thread.start()
    assert inside.wait(5)
    release.set()
    for thread in threads:
        thread.join(5)

    assert seen == [LOCAL + timedelta(seconds=3)] * 4


@pytest.mark.parametrize("option", ["every_ms", "retry_ms", "max_round_trip_ms"])
def test_periods_must_be_positive_ints_of_milliseconds(option: str) -> None:
    with pytest.raises(ValueError, match=option):
        StoreClock(lambda: None, local=FixedClock(LOCAL), **{option: 0})  # type: ignore[arg-type]
