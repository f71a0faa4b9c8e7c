"""The DST contract, pinned by a reference table.

The table opens with the exact instants at which each zone changes its clocks; every test after
it is one expression shape walked across those changes. All instants are UTC. A job whose hour
field starts with ``*`` follows elapsed time (both passes of a repeated hour run); any other is
pinned (a repeated wall time runs once, the first time; a missing one is skipped that day).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from ddd_celery.declarations import parse_job_schedule
from ddd_celery.declarations.cron_evaluator import latest_occurrence, next_occurrence

# zone, UTC instant of the change, offset before, offset after (hours)
TRANSITIONS = [
    ("Europe/Paris", "2026-03-29T01:00Z", 1, 2),
    ("Europe/Paris", "2026-10-25T01:00Z", 2, 1),
    ("America/New_York", "2026-03-08T07:00Z", -5, -4),
    ("America/New_York", "2026-11-01T06:00Z", -4, -5),
    ("Australia/Lord_Howe", "2026-04-04T15:00Z", 11, 10.5),
    ("Australia/Lord_Howe", "2026-10-03T15:30Z", 10.5, 11),
    ("America/Santiago", "2026-04-05T03:00Z", -3, -4),  # at midnight, back to 23:00
    ("America/Santiago", "2026-09-06T04:00Z", -4, -3),  # midnight does not exist
    ("America/Havana", "2026-03-08T05:00Z", -5, -4),  # midnight does not exist
    ("America/Havana", "2026-11-01T05:00Z", -4, -5),  # 01:00 back to 00:00
    ("Europe/Dublin", "2026-03-29T01:00Z", 0, 1),  # IST is standard time: DST is negative
    ("Europe/Dublin", "2026-10-25T01:00Z", 1, 0),
    ("Pacific/Apia", "2011-12-30T10:00Z", -10, 14),  # 30 December 2011 never happened
    ("America/Sao_Paulo", "2019-02-17T02:00Z", -2, -3),  # its last change: DST dropped
]


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text)


def chain(expression: str, zone: str, start: str, count: int) -> str:
    """The next ``count`` occurrences after ``start``, in UTC, seconds shown when not zero."""
    parsed = parse_job_schedule({"cron": expression, "time_zone": zone})
    instants, instant = [], utc(start)
    for _ in range(count):
        instant = next_occurrence(parsed, instant)
        instants.append(
            instant.strftime("%Y-%m-%dT%H:%M:%SZ" if instant.second else "%Y-%m-%dT%H:%MZ")
        )
    return " ".join(instants)


@pytest.mark.parametrize(("zone", "instant", "before", "after"), TRANSITIONS)
def test_the_reference_transitions_are_the_instants_zoneinfo_changes_offset_at(
    zone: str, instant: str, before: float, after: float
) -> None:
    change = utc(instant)

    assert (change - timedelta(seconds=1)).astimezone(ZoneInfo(zone)).utcoffset() == timedelta(
        hours=before
    )
    assert change.astimezone(ZoneInfo(zone)).utcoffset() == timedelta(hours=after)


PINNED = [
    # the seed: 02:30 does not exist in Paris on 2026-03-29, that day has no run
    ("Europe/Paris", "30 2 * * *", "2026-03-27T12:00Z", "2026-03-28T01:30Z 2026-03-30T00:30Z"),
    ("Europe/Paris", "30 2 * * *", "2026-10-24T12:00Z", "2026-10-25T00:30Z 2026-10-26T01:30Z"),
    (
        "Europe/Paris",
        "*/20 2 * * *",
        "2026-10-24T23:50Z",
        "2026-10-25T00:00Z 2026-10-25T00:20Z 2026-10-25T00:40Z 2026-10-26T01:00Z",
    ),
    ("Europe/Paris", "0 0-23 * * *", "2026-10-24T23:30Z", "2026-10-25T00:00Z 2026-10-25T02:00Z"),
    ("America/New_York", "30 2 * * *", "2026-03-07T12:00Z", "2026-03-09T06:30Z"),
    ("America/New_York", "30 1 * * *", "2026-10-31T12:00Z", "2026-11-01T05:30Z 2026-11-02T06:30Z"),
    ("America/Santiago", "30 23 * * *", "2026-04-04T12:00Z", "2026-04-05T02:30Z 2026-04-06T03:30Z"),
    ("America/Santiago", "0 0 * * *", "2026-04-04T12:00Z", "2026-04-05T04:00Z"),
    ("America/Santiago", "0 0 * * *", "2026-09-05T12:00Z", "2026-09-07T03:00Z"),
    ("America/Havana", "30 0 * * *", "2026-03-07T12:00Z", "2026-03-09T04:30Z"),
    ("America/Havana", "30 0 * * *", "2026-10-31T12:00Z", "2026-11-01T04:30Z 2026-11-02T05:30Z"),
    ("Europe/Dublin", "30 1 * * *", "2026-03-28T12:00Z", "2026-03-30T00:30Z"),
    ("Europe/Dublin", "30 1 * * *", "2026-10-24T12:00Z", "2026-10-25T00:30Z 2026-10-26T01:30Z"),
]


@pytest.mark.parametrize(("zone", "expression", "start", "expected"), PINNED)
def test_a_pinned_job_skips_a_missing_wall_time_and_runs_a_repeated_one_once_first(
    zone: str, expression: str, start: str, expected: str
) -> None:
    assert chain(expression, zone, start, len(expected.split())) == expected


EVERY_HOUR = [
    # 01:00, then 03:00, one hour later
    (
        "Europe/Paris",
        "0 * * * *",
        "2026-03-28T23:30Z",
        "2026-03-29T00:00Z 2026-03-29T01:00Z 2026-03-29T02:00Z",
    ),
    # the repeated 02:00 is run through twice
    (
        "Europe/Paris",
        "0 * * * *",
        "2026-10-24T23:30Z",
        "2026-10-25T00:00Z 2026-10-25T01:00Z 2026-10-25T02:00Z",
    ),
    (
        "Europe/Paris",
        "0 */2 * * *",
        "2026-10-24T21:30Z",
        "2026-10-24T22:00Z 2026-10-25T00:00Z 2026-10-25T01:00Z 2026-10-25T03:00Z",
    ),
    (
        "America/New_York",
        "0 * * * *",
        "2026-03-08T05:30Z",
        "2026-03-08T06:00Z 2026-03-08T07:00Z 2026-03-08T08:00Z",
    ),
    (
        "America/New_York",
        "30 * * * *",
        "2026-11-01T04:45Z",
        "2026-11-01T05:30Z 2026-11-01T06:30Z 2026-11-01T07:30Z",
    ),
    (
        "America/Santiago",
        "30 * * * *",
        "2026-04-05T01:45Z",
        "2026-04-05T02:30Z 2026-04-05T03:30Z 2026-04-05T04:30Z",
    ),
    (
        "America/Santiago",
        "0 * * * *",
        "2026-09-06T02:30Z",
        "2026-09-06T03:00Z 2026-09-06T04:00Z 2026-09-06T05:00Z",
    ),
    (
        "America/Havana",
        "30 * * * *",
        "2026-11-01T04:00Z",
        "2026-11-01T04:30Z 2026-11-01T05:30Z 2026-11-01T06:30Z",
    ),
    (
        "Europe/Dublin",
        "30 * * * *",
        "2026-10-24T23:45Z",
        "2026-10-25T00:30Z 2026-10-25T01:30Z 2026-10-25T02:30Z",
    ),
    (
        "Pacific/Apia",
        "0 * * * *",
        "2011-12-30T08:30Z",
        "2011-12-30T09:00Z 2011-12-30T10:00Z 2011-12-30T11:00Z",
    ),
]


@pytest.mark.parametrize(("zone", "expression", "start", "expected"), EVERY_HOUR)
def test_a_job_of_every_hour_keeps_its_rhythm_through_both_changes(
    zone: str, expression: str, start: str, expected: str
) -> None:
    assert chain(expression, zone, start, len(expected.split())) == expected


EVERY_20_MINUTES = [
    ("Europe/Paris", "2026-03-29T00:30Z", "2026-03-29T00:40Z 2026-03-29T01:00Z 2026-03-29T01:20Z"),
    ("Europe/Paris", "2026-10-25T00:30Z", "2026-10-25T00:40Z 2026-10-25T01:00Z 2026-10-25T01:20Z"),
    (
        "America/Havana",
        "2026-03-08T04:30Z",
        "2026-03-08T04:40Z 2026-03-08T05:00Z 2026-03-08T05:20Z",
    ),
    ("Europe/Dublin", "2026-10-25T00:50Z", "2026-10-25T01:00Z 2026-10-25T01:20Z"),
]


@pytest.mark.parametrize(("zone", "start", "expected"), EVERY_20_MINUTES)
def test_every_20_minutes_follows_elapsed_time_across_a_change(
    zone: str, start: str, expected: str
) -> None:
    assert chain("*/20 * * * *", zone, start, len(expected.split())) == expected


LORD_HOWE = [
    # back from 02:00 (+11) to 01:30 (+10:30): 01:30-01:59 happens twice
    ("45 1 * * *", "2026-04-04T12:00Z", "2026-04-04T14:45Z 2026-04-05T15:15Z"),
    ("45 * * * *", "2026-04-04T14:00Z", "2026-04-04T14:45Z 2026-04-04T15:15Z 2026-04-04T16:15Z"),
    ("0 * * * *", "2026-04-04T13:30Z", "2026-04-04T14:00Z 2026-04-04T15:30Z"),
    ("*/20 * * * *", "2026-04-04T14:30Z", "2026-04-04T14:40Z 2026-04-04T15:10Z 2026-04-04T15:30Z"),
    # forward from 02:00 (+10:30) to 02:30 (+11): 02:00-02:29 does not happen
    ("15 2 * * *", "2026-10-03T12:00Z", "2026-10-04T15:15Z"),
    ("45 2 * * *", "2026-10-03T12:00Z", "2026-10-03T15:45Z"),
    ("0 * * * *", "2026-10-03T14:00Z", "2026-10-03T14:30Z 2026-10-03T16:00Z"),
    ("*/20 * * * *", "2026-10-03T15:00Z", "2026-10-03T15:10Z 2026-10-03T15:40Z"),
]


@pytest.mark.parametrize(("expression", "start", "expected"), LORD_HOWE)
def test_a_thirty_minute_change_in_lord_howe_follows_the_same_rules(
    expression: str, start: str, expected: str
) -> None:
    assert chain(expression, "Australia/Lord_Howe", start, len(expected.split())) == expected


def test_a_day_that_never_happened_in_apia_has_no_run() -> None:
    daily_noon = chain("0 12 * * *", "Pacific/Apia", "2011-12-29T12:00Z", 2)
    thirtieth = chain("0 0 30 12 *", "Pacific/Apia", "2011-06-01T00:00Z", 1)

    # noon of the 29th (-10), then noon of the 31st (+14): 24 hours apart, a date apart
    assert daily_noon == "2011-12-29T22:00Z 2011-12-30T22:00Z"
    assert thirtieth == "2012-12-29T10:00Z"


def test_a_zone_that_dropped_dst_runs_every_day_once_its_last_change_has_passed() -> None:
    # Sao Paulo skipped midnight on 2018-11-04 (DST); its DST ended for good in February 2019
    before, after = "2018-11-03T12:00Z", "2019-11-02T12:00Z"

    assert chain("0 0 * * *", "America/Sao_Paulo", before, 1) == "2018-11-05T02:00Z"
    assert chain("0 0 * * *", "America/Sao_Paulo", after, 2) == (
        "2019-11-03T03:00Z 2019-11-04T03:00Z"
    )


def test_a_historic_offset_of_seconds_is_read_on_the_wall_clock() -> None:
    # Liberia kept -00:44:30 until 1972-01-07, when 00:00-00:44:29 was skipped
    monrovia = "Africa/Monrovia"

    assert chain("0 12 * * *", monrovia, "1971-06-01T00:00Z", 1) == "1971-06-01T12:44:30Z"
    assert chain("30 0 * * *", monrovia, "1972-01-06T00:00Z", 2) == (
        "1972-01-06T01:14:30Z 1972-01-08T00:30Z"
    )
    assert chain("*/15 * * * *", monrovia, "1972-01-06T23:59Z", 4) == (
        "1972-01-06T23:59:30Z 1972-01-07T00:14:30Z 1972-01-07T00:29:30Z 1972-01-07T00:45Z"
    )


LATEST = [
    # the repeated 02:30: a pinned job's latest is the first pass, an hourly job's the second
    ("Europe/Paris", "30 2 * * *", "2026-10-25T00:00Z", "2026-10-25T03:00Z", "2026-10-25T00:30Z"),
    ("Europe/Paris", "30 * * * *", "2026-10-25T00:00Z", "2026-10-25T01:45Z", "2026-10-25T01:30Z"),
    ("Europe/Paris", "30 2 * * *", "2026-03-29T00:00Z", "2026-03-29T23:00Z", None),
    ("America/Santiago", "0 0 * * *", "2026-09-05T12:00Z", "2026-09-07T02:59Z", None),
    ("Australia/Lord_Howe", "45 1 * * *", "2026-04-04T14:50Z", "2026-04-05T14:00Z", None),
    ("Pacific/Apia", "0 12 * * *", "2011-12-29T23:00Z", "2011-12-30T21:59Z", None),
]


@pytest.mark.parametrize(("zone", "expression", "after", "not_after", "expected"), LATEST)
def test_latest_occurrence_follows_the_same_rules_backwards(
    zone: str, expression: str, after: str, not_after: str, expected: str | None
) -> None:
    parsed = parse_job_schedule({"cron": expression, "time_zone": zone})

    found = latest_occurrence(parsed, after=utc(after), not_after=utc(not_after))

    assert found == (None if expected is None else utc(expected))
    assert found is None or found.tzinfo is UTC
