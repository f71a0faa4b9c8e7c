"""Instants stay aware and in UTC; the in-memory command bus routes by type."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ddd_celery.kernel import InMemoryCommandBus, iso_ms, require_aware, to_utc
from ddd_celery.kernel.instants import EPOCH, epoch_ms, from_epoch_ms

PARIS_WINTER = timezone(timedelta(hours=1))


def test_require_aware_returns_an_aware_instant_unchanged() -> None:
    instant = datetime(2026, 3, 2, 7, 0, tzinfo=PARIS_WINTER)

    assert require_aware(instant) is instant


def test_require_aware_refuses_a_naive_instant_naming_it() -> None:
    with pytest.raises(ValueError, match="scheduled_at must be an aware datetime"):
        require_aware(datetime(2026, 3, 2, 7, 0), "scheduled_at")


def test_require_aware_refuses_what_is_not_a_datetime() -> None:
    with pytest.raises(TypeError, match="date"):
        require_aware(date(2026, 3, 2))  # type: ignore[arg-type]


def test_to_utc_keeps_the_instant_and_answers_in_utc() -> None:
    utc = to_utc(datetime(2026, 3, 2, 7, 0, tzinfo=PARIS_WINTER))

    assert utc == datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
    assert utc.tzinfo is UTC


def test_iso_ms_writes_utc_with_milliseconds_and_z() -> None:
    assert iso_ms(datetime(2026, 3, 2, 7, 0, tzinfo=PARIS_WINTER)) == "2026-03-02T06:00:00.000Z"
    assert iso_ms(datetime(2026, 3, 2, 6, 0, 0, 999_999, tzinfo=UTC)) == (
        "2026-03-02T06:00:00.999Z"
    )


@given(
    instant=st.datetimes(
        min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.timezones()
    )
)
def test_iso_ms_writes_what_strftime_writes_for_any_aware_instant(instant: datetime) -> None:
    utc = to_utc(instant)

    assert iso_ms(instant) == (
        utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"
    )


@given(ms=st.integers(min_value=-(10**12), max_value=10**13))
def test_epoch_milliseconds_round_trip(ms: int) -> None:
    assert epoch_ms(from_epoch_ms(ms)) == ms


def test_epoch_milliseconds_floor_before_the_epoch() -> None:
    assert epoch_ms(EPOCH - timedelta(microseconds=1)) == -1
    assert epoch_ms(EPOCH + timedelta(microseconds=999)) == 0


class SendReminders:
    pass


class ExportLedger:
    pass


def test_the_bus_runs_the_handler_of_the_commands_type_and_returns_its_result() -> None:
    bus = InMemoryCommandBus()
    bus.register(SendReminders, lambda command: f"sent by {type(command).__name__}")
    command = SendReminders()

    assert bus.execute(command) == "sent by SendReminders"
    assert bus.executed == [command]


def test_a_command_without_a_handler_is_a_lookup_error_and_is_not_kept() -> None:
    bus = InMemoryCommandBus()

    with pytest.raises(LookupError, match="ExportLedger"):
        bus.execute(ExportLedger())

    assert bus.executed == []


def test_a_command_type_takes_one_handler() -> None:
    bus = InMemoryCommandBus()
    bus.register(SendReminders, lambda command: None)

    with pytest.raises(ValueError, match="SendReminders already has a handler"):
        bus.register(SendReminders, lambda command: None)
