"""next_occurrence and latest_occurrence: the seed's examples, intervals, far and edge instants."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from ddd_celery.declarations import ParsedJobSchedule, parse_job_schedule
from ddd_celery.declarations.cron_evaluator import latest_occurrence, next_occurrence

EVERY_15 = parse_job_schedule({"every": "15m"})
WEEKDAY_MORNINGS = parse_job_schedule({"cron": "0 7 * * 1-5", "time_zone": "Europe/Paris"})
LEAP_DAY = parse_job_schedule({"cron": "0 0 29 2 *"})


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text)


def test_the_seed_examples_give_the_seed_instants() -> None:
    assert next_occurrence(EVERY_15, utc("2026-03-02T10:07:00Z")) == utc("2026-03-02T10:15:00Z")
    assert next_occurrence(WEEKDAY_MORNINGS, utc("2026-03-06T08:00:00Z")) == utc(
        "2026-03-09T06:00:00Z"
    )
    assert latest_occurrence(
        WEEKDAY_MORNINGS, after=utc("2026-03-02T00:00:00Z"), not_after=utc("2026-03-04T12:00:00Z")
    ) == utc("2026-03-04T06:00:00Z")
    assert next_occurrence(
        parse_job_schedule({"cron": "30 2 * * *", "time_zone": "Europe/Paris"}),
        utc("2026-03-28T12:00:00Z"),
    ) == utc("2026-03-30T00:30:00Z")


@pytest.mark.parametrize(
    ("every", "after", "expected"),
    [
        ("15m", "2026-03-02T10:07:00Z", "2026-03-02T10:15:00Z"),
        ("15m", "2026-03-02T10:15:00Z", "2026-03-02T10:30:00Z"),  # strictly after
        ("15m", "2026-03-02T10:14:59.999999Z", "2026-03-02T10:15:00Z"),
        ("1d", "2026-03-02T10:07:00Z", "2026-03-03T00:00:00Z"),  # midnight UTC
        ("7h", "1970-01-01T00:00:00Z", "1970-01-01T07:00:00Z"),
        ("7h", "2026-03-02T00:00:00Z", "2026-03-02T02:00:00Z"),  # drifts against the clock
        ("500ms", "2026-03-02T10:07:00.200Z", "2026-03-02T10:07:00.500Z"),
        ("1h", "1969-12-31T22:30:00Z", "1969-12-31T23:00:00Z"),  # before the epoch too
    ],
)
def test_an_interval_falls_on_the_multiples_of_it_since_the_unix_epoch(
    every: str, after: str, expected: str
) -> None:
    assert next_occurrence(parse_job_schedule({"every": every}), utc(after)) == utc(expected)


@pytest.mark.parametrize(
    ("every", "after", "not_after", "expected"),
    [
        ("15m", "2026-03-02T10:00:00Z", "2026-03-02T10:44:59Z", "2026-03-02T10:30:00Z"),
        ("15m", "2026-03-02T10:00:00Z", "2026-03-02T10:45:00Z", "2026-03-02T10:45:00Z"),
        ("15m", "2026-03-02T10:00:00Z", "2026-03-02T10:14:59Z", None),  # `after` is excluded
        ("15m", "2026-03-02T10:00:00Z", "2026-03-02T10:00:00Z", None),
        ("15m", "2026-03-02T11:00:00Z", "2026-03-02T10:00:00Z", None),
        ("1d", "1900-01-01T00:00:00Z", "2026-03-02T10:00:00Z", "2026-03-02T00:00:00Z"),
    ],
)
def test_the_latest_interval_occurrence_lies_after_after_and_not_after_not_after(
    every: str, after: str, not_after: str, expected: str | None
) -> None:
    parsed = parse_job_schedule({"every": every})

    found = latest_occurrence(parsed, after=utc(after), not_after=utc(not_after))

    assert found == (None if expected is None else utc(expected))


def test_results_are_aware_utc_whatever_zone_the_argument_is_in() -> None:
    paris = datetime(2026, 3, 6, 9, 0, tzinfo=ZoneInfo("Europe/Paris"))
    plus_two = datetime(2026, 3, 6, 10, 0, tzinfo=timezone(timedelta(hours=2)))

    for after in (paris, plus_two):
        found = next_occurrence(WEEKDAY_MORNINGS, after)
        assert found == utc("2026-03-09T06:00:00Z")
        assert found.tzinfo is UTC
        assert next_occurrence(EVERY_15, after).tzinfo is UTC


def test_the_second_pass_of_an_aware_argument_is_read_as_such() -> None:
    hourly = parse_job_schedule({"cron": "30 * * * *", "time_zone": "Europe/Paris"})
    second_pass = datetime(2026, 10, 25, 2, 10, fold=1, tzinfo=ZoneInfo("Europe/Paris"))

    assert next_occurrence(hourly, second_pass) == utc("2026-10-25T01:30:00Z")


@pytest.mark.parametrize("parsed", [EVERY_15, WEEKDAY_MORNINGS], ids=["every", "cron"])
def test_a_naive_datetime_is_refused(parsed: ParsedJobSchedule) -> None:
    naive, aware = datetime(2026, 3, 2, 10, 7), utc("2026-03-02T10:07:00Z")

    with pytest.raises(ValueError, match="after must be an aware datetime"):
        next_occurrence(parsed, naive)
    with pytest.raises(ValueError, match="after must be an aware datetime"):
        latest_occurrence(parsed, after=naive, not_after=aware)
    with pytest.raises(ValueError, match="not_after must be an aware datetime"):
        latest_occurrence(parsed, after=aware, not_after=naive)


def test_a_cron_runs_at_the_first_minute_strictly_after_its_argument() -> None:
    every_minute = parse_job_schedule({"cron": "* * * * *"})

    assert next_occurrence(every_minute, utc("2026-03-02T10:07:00Z")) == utc("2026-03-02T10:08:00Z")
    assert next_occurrence(every_minute, utc("2026-03-02T10:07:59.999999Z")) == utc(
        "2026-03-02T10:08:00Z"
    )
    assert next_occurrence(every_minute, utc("2026-03-02T10:07:00.000001Z")) == utc(
        "2026-03-02T10:08:00Z"
    )


def test_the_13th_and_every_friday_are_both_occurrences_of_0_0_13_star_fri() -> None:
    parsed = parse_job_schedule({"cron": "0 0 13 * fri"})
    found, instant = [], utc("2026-03-01T00:00:00Z")
    for _ in range(5):
        instant = next_occurrence(parsed, instant)
        found.append(instant.date().isoformat())

    assert found == ["2026-03-06", "2026-03-13", "2026-03-20", "2026-03-27", "2026-04-03"]


def test_day_fields_are_read_on_the_zones_clock() -> None:
    # Monday 07:00 in Tokyo is still Sunday in UTC
    mondays = parse_job_schedule({"cron": "0 7 * * mon", "time_zone": "Asia/Tokyo"})
    first_of_month = parse_job_schedule({"cron": "0 0 1 * *", "time_zone": "America/Los_Angeles"})

    assert next_occurrence(mondays, utc("2026-03-01T00:00:00Z")) == utc("2026-03-01T22:00:00Z")
    assert next_occurrence(first_of_month, utc("2026-03-01T00:00:00Z")) == utc(
        "2026-03-01T08:00:00Z"
    )


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        ("1896-02-29T00:00:00Z", "1904-02-29T00:00:00Z"),  # 1900 is no leap year
        ("2096-03-01T00:00:00Z", "2104-02-29T00:00:00Z"),  # nor is 2100
        ("2024-02-29T00:00:00Z", "2028-02-29T00:00:00Z"),
        ("1999-12-31T23:59:00Z", "2000-02-29T00:00:00Z"),  # 2000 is
    ],
)
def test_the_29th_of_february_is_found_eight_years_away(after: str, expected: str) -> None:
    assert next_occurrence(LEAP_DAY, utc(after)) == utc(expected)
    assert (
        latest_occurrence(
            LEAP_DAY, after=utc(after), not_after=utc(expected) - timedelta(seconds=1)
        )
        is None
    )


def test_far_occurrences_and_huge_ranges_are_found_by_skipping_not_walking() -> None:
    paris_leap_noon = parse_job_schedule({"cron": "0 12 29 2 *", "time_zone": "Europe/Paris"})
    began = time.perf_counter()

    for year in range(1904, 9996, 400):
        assert next_occurrence(LEAP_DAY, utc(f"{year - 8}-03-01T00:00:00Z")).year == year
    assert latest_occurrence(
        LEAP_DAY, after=utc("0001-01-01T00:00:00Z"), not_after=utc("9999-12-31T23:59:59Z")
    ) == utc("9996-02-29T00:00:00Z")
    assert latest_occurrence(
        paris_leap_noon, after=utc("0001-01-01T00:00:00Z"), not_after=utc("2103-01-01T00:00:00Z")
    ) == utc("2096-02-29T11:00:00Z")
    assert latest_occurrence(
        WEEKDAY_MORNINGS, after=utc("0001-01-01T00:00:00Z"), not_after=utc("2026-03-09T05:59:00Z")
    ) == utc("2026-03-06T06:00:00Z")

    assert time.perf_counter() - began < 0.5


def test_no_occurrence_before_the_year_10000_is_an_overflow() -> None:
    new_year = parse_job_schedule({"cron": "0 0 1 1 *"})
    far_interval = parse_job_schedule({"every": "1d"})

    assert next_occurrence(new_year, utc("9998-06-01T00:00:00Z")) == utc("9999-01-01T00:00:00Z")
    with pytest.raises(OverflowError):
        next_occurrence(new_year, utc("9999-06-01T00:00:00Z"))
    with pytest.raises(OverflowError):
        next_occurrence(far_interval, utc("9999-12-31T12:00:00Z"))


def test_no_occurrence_after_the_year_1_is_none() -> None:
    assert (
        latest_occurrence(
            LEAP_DAY, after=utc("0001-01-01T00:00:00Z"), not_after=utc("0003-12-31T00:00:00Z")
        )
        is None
    )
    assert latest_occurrence(
        parse_job_schedule({"cron": "* * * * *"}),
        after=utc("0001-01-01T00:00:00Z"),
        not_after=utc("0001-01-01T00:01:00Z"),
    ) == utc("0001-01-01T00:01:00Z")


def test_an_empty_or_reversed_range_has_no_latest_occurrence() -> None:
    every_minute = parse_job_schedule({"cron": "* * * * *"})
    instant = utc("2026-03-02T10:07:00Z")

    assert latest_occurrence(every_minute, after=instant, not_after=instant) is None
    assert (
        latest_occurrence(every_minute, after=instant, not_after=instant - timedelta(hours=1))
        is None
    )
    assert (
        latest_occurrence(every_minute, after=instant - timedelta(seconds=1), not_after=instant)
        == instant
    )
