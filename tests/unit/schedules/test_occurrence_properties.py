"""next_occurrence and latest_occurrence against a brute-force reference, minute by minute.

The reference knows nothing of the evaluator: hypothesis draws each cron field as a structure,
from which both the text and the set of values it means are built; the reference then walks UTC
minutes, reads each on the zone's clock with ``astimezone`` and keeps those whose wall clock
matches (for a pinned job, only the first pass of a repeated hour: ``fold == 0``). Years start at
1980, from which every zone's offset is a whole number of minutes. Before it, offsets such as
-00:44:30 put occurrences between UTC minutes, and a second reference goes the other way: from
each matching wall time to the instants ``zoneinfo`` gives it, kept when they round-trip.
"""

from __future__ import annotations

import functools
import re
import zoneinfo
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from cronsim import CronSim
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddd_celery.declarations import DeclarationError, ParsedJobSchedule, parse_job_schedule
from ddd_celery.declarations.cron_evaluator import latest_occurrence, next_occurrence

ZONES = sorted(zoneinfo.available_timezones())
MINUTE = timedelta(minutes=1)
WINDOW = timedelta(days=2)
LONGEST_MONTH = {
    1: 31,
    2: 29,
    3: 31,
    4: 30,
    5: 31,
    6: 30,
    7: 31,
    8: 31,
    9: 30,
    10: 31,
    11: 30,
    12: 31,
}
MONTH_NAMES = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
DAY_NAMES = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]


@dataclass(frozen=True)
class Reference:
    """What an expression means, built independently of the parser."""

    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 is Sunday
    either_day: bool
    pinned: bool

    def matches(self, local: datetime) -> bool:
        if self.pinned and local.fold:
            return False
        if local.minute not in self.minutes or local.hour not in self.hours:
            return False
        if local.month not in self.months:
            return False
        day, weekday = local.day in self.days, local.isoweekday() % 7 in self.weekdays
        return (day or weekday) if self.either_day else (day and weekday)

    def occurrences(self, zone: ZoneInfo, after: datetime, until: datetime) -> list[datetime]:
        """Every occurrence t with after < t < until, walking UTC minutes."""
        instant = after.replace(second=0, microsecond=0) + MINUTE
        found = []
        while instant < until:
            if self.matches(instant.astimezone(zone)):
                found.append(instant)
            instant += MINUTE
        return found


@st.composite
def fields(
    draw: st.DrawFn, low: int, high: int, names: list[str] | None = None
) -> tuple[str, set[int]]:
    """A field of one to three items, as text and as the values it means (before 7 -> 0)."""
    texts: list[str] = []
    values: set[int] = set()
    last = 6 if names is DAY_NAMES else high
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["*", "*/n", "a", "a-b", "a-b/n"]))
        start = draw(st.integers(low, high))
        end = draw(st.integers(start, high))
        step = draw(st.integers(1, max(1, (high - low) // 2)))

        def spell(value: int) -> str:
            if names is not None and value - low < len(names) and draw(st.booleans()):
                return names[value - low]
            return str(value)

        if kind == "*":
            texts.append("*")
            values.update(range(low, last + 1))
        elif kind == "*/n":
            texts.append(f"*/{step}")
            values.update(range(low, last + 1, step))
        elif kind == "a":
            texts.append(spell(start))
            values.add(start)
        else:
            texts.append(f"{spell(start)}-{spell(end)}" + (f"/{step}" if kind == "a-b/n" else ""))
            values.update(range(start, end + 1, step if kind == "a-b/n" else 1))
    return ",".join(texts), values


@st.composite
def references(draw: st.DrawFn, *, hours: bool = True) -> Reference:
    minute, minutes = draw(fields(0, 59))
    hour, hour_values = draw(fields(0, 23)) if hours else ("*", set(range(24)))
    day, days = draw(st.one_of(st.just(("*", set(range(1, 32)))), fields(1, 31)))
    month, months = draw(st.one_of(st.just(("*", set(range(1, 13)))), fields(1, 12, MONTH_NAMES)))
    weekday, weekdays = draw(st.one_of(st.just(("*", set(range(7)))), fields(0, 7, DAY_NAMES)))
    either = not day.startswith("*") and not weekday.startswith("*")
    return Reference(
        expression=f"{minute} {hour} {day} {month} {weekday}",
        minutes=frozenset(minutes),
        hours=frozenset(hour_values),
        days=frozenset(days),
        months=frozenset(months),
        weekdays=frozenset(value % 7 for value in weekdays),
        either_day=either,
        pinned=not hour.startswith("*"),
    )


def fires(reference: Reference) -> bool:
    return reference.either_day or any(
        d <= LONGEST_MONTH[m] for m in reference.months for d in reference.days
    )


@functools.cache
def transitions(zone: str, year: int) -> tuple[datetime, ...]:
    """The instants the zone changes its offset in ``year``, probed every six hours."""
    tz, found = ZoneInfo(zone), []
    instant = datetime(year, 1, 1, tzinfo=UTC)
    offset = instant.astimezone(tz).utcoffset()
    while instant.year == year:
        later = instant + timedelta(hours=6)
        if (later_offset := later.astimezone(tz).utcoffset()) != offset:
            low, high = instant, later
            while high - low > timedelta(seconds=1):
                middle = low + (high - low) / 2
                low, high = (
                    (middle, high) if middle.astimezone(tz).utcoffset() == offset else (low, middle)
                )
            found.append(high)
        instant, offset = later, later_offset
    return tuple(found)


@st.composite
def instants_near_changes(draw: st.DrawFn) -> tuple[str, datetime]:
    """A zone and an instant within a day and a half of one of its changes, when it has any."""
    zone = draw(st.sampled_from(ZONES))
    year = draw(st.integers(1980, 2037))
    changes = transitions(zone, year)
    if changes:
        base = draw(st.sampled_from(changes))
        shift = timedelta(minutes=draw(st.integers(-36 * 60, 36 * 60)))
    else:
        base, shift = datetime(year, 1, 1, tzinfo=UTC), timedelta(days=draw(st.integers(0, 360)))
    jitter = timedelta(
        seconds=draw(st.sampled_from([0, 0, 0, 30])),
        microseconds=draw(st.sampled_from([0, 0, 1, 999_999])),
    )
    return zone, base + shift + jitter


def parsed_or_refused(reference: Reference, zone: str) -> ParsedJobSchedule | None:
    """The parsed schedule, after checking it is refused exactly when it never fires."""
    schedule = {"cron": reference.expression, "time_zone": zone}
    if fires(reference):
        return parse_job_schedule(schedule)
    with pytest.raises(DeclarationError, match="never fires"):
        parse_job_schedule(schedule)
    return None


PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(reference=references(), near=instants_near_changes())
def test_next_occurrence_chains_through_exactly_the_reference_occurrences(
    reference: Reference, near: tuple[str, datetime]
) -> None:
    zone, after = near
    parsed = parsed_or_refused(reference, zone)
    if parsed is None:
        return
    expected = reference.occurrences(ZoneInfo(zone), after, after + WINDOW)

    found, instant = [], after
    while (instant := next_occurrence(parsed, instant)) < after + WINDOW:
        assert instant.tzinfo is UTC
        found.append(instant)

    assert found == expected


@PROPERTY
@given(
    reference=references(),
    near=instants_near_changes(),
    cuts=st.lists(st.integers(0, 2 * 1440 * 60), min_size=2, max_size=2),
)
def test_latest_occurrence_is_the_last_reference_occurrence_of_the_range(
    reference: Reference, near: tuple[str, datetime], cuts: list[int]
) -> None:
    zone, start = near
    parsed = parsed_or_refused(reference, zone)
    if parsed is None:
        return
    after, not_after = (start + timedelta(seconds=cut) for cut in sorted(cuts))
    expected = [
        instant
        for instant in reference.occurrences(ZoneInfo(zone), after, not_after + MINUTE)
        if instant <= not_after
    ]

    latest = latest_occurrence(parsed, after=after, not_after=not_after)

    assert latest == (expected[-1] if expected else None)
    if latest is not None:  # the round trip: the next occurrence after it is out of the range
        assert next_occurrence(parsed, latest - timedelta(microseconds=1)) == latest
        assert next_occurrence(parsed, latest) > not_after


@PROPERTY
@given(reference=references(), near=instants_near_changes())
def test_a_long_chain_increases_strictly_matches_the_fields_and_leaves_nothing_between(
    reference: Reference, near: tuple[str, datetime]
) -> None:
    zone, previous = near
    parsed = parsed_or_refused(reference, zone)
    if parsed is None:
        return

    for _ in range(40):
        instant = next_occurrence(parsed, previous)
        assert instant > previous
        assert reference.matches(instant.astimezone(ZoneInfo(zone)))
        assert latest_occurrence(parsed, after=previous, not_after=instant) == instant
        before = instant - timedelta(microseconds=1)
        assert latest_occurrence(parsed, after=previous, not_after=before) is None
        previous = instant


def windows_around_changes(year: int) -> list[tuple[str, datetime]]:
    return [(zone, change) for zone in ZONES for change in transitions(zone, year)]


def wall_clock_occurrences(
    zone: ZoneInfo, after: datetime, until: datetime, *, pinned: bool
) -> list[datetime]:
    """Every quarter-hour wall time's instants t with after < t < until, found from the wall
    clock: a wall time that does not exist round-trips from neither fold, a repeated one from
    both (fold 0 is the first pass)."""
    wall = (after.astimezone(zone) - timedelta(days=1)).replace(
        tzinfo=None, second=0, microsecond=0
    )
    wall -= timedelta(minutes=wall.minute % 15)
    found = set()
    while wall < (until.astimezone(zone) + timedelta(days=1)).replace(tzinfo=None):
        for fold in (0,) if pinned else (0, 1):
            instant = wall.replace(tzinfo=zone, fold=fold).astimezone(UTC)
            if instant.astimezone(zone).replace(tzinfo=None) == wall and after < instant < until:
                found.add(instant)
        wall += timedelta(minutes=15)
    return sorted(found)


@settings(max_examples=150, deadline=None)
@given(
    zone=st.sampled_from(ZONES),
    decade=st.integers(1850, 1970),
    pinned=st.booleans(),
    data=st.data(),
)
def test_historic_changes_and_offsets_in_seconds_follow_the_wall_clock(
    zone: str, decade: int, pinned: bool, data: st.DataObject
) -> None:
    changes = [change for year in range(decade, decade + 10) for change in transitions(zone, year)]
    if not changes:
        return
    change = data.draw(st.sampled_from(changes))
    parsed = parse_job_schedule(
        {"cron": "*/15 0-23 * * *" if pinned else "*/15 * * * *", "time_zone": zone}
    )
    after, until = change - timedelta(hours=26), change + timedelta(hours=26)

    found, instant = [], after
    while (instant := next_occurrence(parsed, instant)) < until:
        found.append(instant)

    assert found == wall_clock_occurrences(ZoneInfo(zone), after, until, pinned=pinned)


@pytest.mark.parametrize("expression", ["*/15 * * * *", "*/15 0-23 * * *"])
def test_every_zone_the_runtime_knows_follows_the_rules_at_each_change_of_2026(
    expression: str,
) -> None:
    hours = "0-23" in expression
    reference = Reference(
        expression,
        minutes=frozenset(range(0, 60, 15)),
        hours=frozenset(range(24)),
        days=frozenset(range(1, 32)),
        months=frozenset(range(1, 13)),
        weekdays=frozenset(range(7)),
        either_day=False,
        pinned=hours,
    )
    windows = windows_around_changes(2026)
    assert len(windows) > 100  # dozens of zones still change their clocks
    for zone, change in windows:
        parsed = parse_job_schedule({"cron": expression, "time_zone": zone})
        after, until = change - timedelta(hours=4), change + timedelta(hours=4)
        found, instant = [], after
        while (instant := next_occurrence(parsed, instant)) < until:
            found.append(instant)
        assert found == reference.occurrences(ZoneInfo(zone), after, until), zone


def read_alike_by_peers(reference: Reference) -> bool:
    """Leave out what croniter and cronsim read otherwise: a day field such as '*/2' (the OR
    rule is decided on the text here), a Sunday written 7, a one-value range (croniter 7 reads
    '5-5' as '*')."""
    day, weekday = reference.expression.split()[2::2]
    stars = all(text == "*" or "*" not in text for text in (day, weekday))
    ranges = re.findall(r"(\w+)-(\w+)", reference.expression)
    return stars and "7" not in weekday and all(number(a) != number(b) for a, b in ranges)


def number(token: str) -> int:
    if token in MONTH_NAMES:
        return MONTH_NAMES.index(token) + 1
    return DAY_NAMES.index(token) if token in DAY_NAMES else int(token)


@settings(max_examples=200, deadline=None)
@given(
    reference=references().filter(read_alike_by_peers),
    start=st.datetimes(datetime(1990, 1, 1), datetime(2090, 1, 1)),
)
def test_in_utc_the_occurrences_are_those_of_croniter_and_cronsim(
    reference: Reference, start: datetime
) -> None:
    if not fires(reference):
        return
    parsed = parse_job_schedule({"cron": reference.expression})
    start = start.replace(second=0, microsecond=0, tzinfo=UTC)
    by_croniter, by_cronsim = (
        croniter(reference.expression, start),
        CronSim(reference.expression, start),
    )

    instant = start
    for _ in range(12):
        instant = next_occurrence(parsed, instant)
        assert instant == by_croniter.get_next(datetime) == next(by_cronsim)
