"""FixedClock: the only time a spec knows, aware and moved by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from ddd_celery.kernel import FixedClock, SystemClock

START = datetime(2026, 3, 2, 9, 58, 30, tzinfo=UTC)


def test_a_fixed_clock_answers_the_instant_it_was_given_until_moved() -> None:
    clock = FixedClock(START)

    assert clock.now() == START
    assert clock.now() == START


def test_a_fixed_clock_answers_in_utc_whatever_zone_it_was_given() -> None:
    paris = timezone(timedelta(hours=1))

    now = FixedClock(datetime(2026, 3, 2, 7, 0, tzinfo=paris)).now()

    assert now == datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
    assert now.utcoffset() == timedelta(0)


def test_a_fixed_clock_refuses_a_naive_instant() -> None:
    with pytest.raises(ValueError, match="aware"):
        FixedClock(datetime(2026, 3, 2, 6, 0))


def test_setting_a_fixed_clock_refuses_a_naive_instant_and_keeps_its_time() -> None:
    clock = FixedClock(START)

    with pytest.raises(ValueError, match="aware"):
        clock.set(datetime(2026, 3, 2, 6, 0))

    assert clock.now() == START


def test_advance_takes_milliseconds_or_a_timedelta_and_returns_the_new_instant() -> None:
    clock = FixedClock(START)

    assert clock.advance(1_500) == START + timedelta(milliseconds=1_500)
    assert clock.advance(timedelta(minutes=2)) == START + timedelta(minutes=2, milliseconds=1_500)
    assert clock.now() == START + timedelta(minutes=2, milliseconds=1_500)


def test_advance_refuses_to_go_back_and_keeps_its_time() -> None:
    clock = FixedClock(START)

    with pytest.raises(ValueError, match="positive"):
        clock.advance(-1)

    assert clock.now() == START


def test_a_clock_may_be_set_back_as_ntp_sometimes_does() -> None:
    clock = FixedClock(START)

    clock.set(START - timedelta(seconds=5))

    assert clock.now() == START - timedelta(seconds=5)


def test_the_system_clock_answers_an_aware_utc_instant() -> None:
    now = SystemClock().now()

    assert now.utcoffset() == timedelta(0)
