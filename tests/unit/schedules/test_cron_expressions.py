"""What a cron expression is read as, and every form that is refused."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import pytest
from cron_days import fitting_days

from ddd_celery import next_occurrence
from ddd_celery.declarations import CronRule, DeclarationError, parse_job_schedule

ALL_MINUTES = tuple(range(60))
ALL_HOURS = tuple(range(24))
ALL_DAYS = tuple(range(1, 32))
ALL_MONTHS = tuple(range(1, 13))
ALL_WEEKDAYS = tuple(range(7))

READ_AS = [
    # expression, minutes, hours, days of month, months, days of week
    ("* * * * *", (ALL_MINUTES, ALL_HOURS, ALL_DAYS, ALL_MONTHS, ALL_WEEKDAYS)),
    ("0 7 * * 1-5", ((0,), (7,), ALL_DAYS, ALL_MONTHS, (1, 2, 3, 4, 5))),
    ("*/15 * * * *", ((0, 15, 30, 45), ALL_HOURS, ALL_DAYS, ALL_MONTHS, ALL_WEEKDAYS)),
    ("0,30 8-18/2 * * *", ((0, 30), (8, 10, 12, 14, 16, 18), ALL_DAYS, ALL_MONTHS, ALL_WEEKDAYS)),
    ("5,0-10/5,58 * * * *", ((0, 5, 10, 58), ALL_HOURS, ALL_DAYS, ALL_MONTHS, ALL_WEEKDAYS)),
    ("0 0 1,15 jan-mar/2,DEC *", ((0,), (0,), (1, 15), (1, 3, 12), ALL_WEEKDAYS)),
    ("0 0 * * mon-fri", ((0,), (0,), ALL_DAYS, ALL_MONTHS, (1, 2, 3, 4, 5))),
    ("0 0 * * MON,Wed,fRi", ((0,), (0,), ALL_DAYS, ALL_MONTHS, (1, 3, 5))),
    ("0 0 * * 0", ((0,), (0,), ALL_DAYS, ALL_MONTHS, (0,))),
    ("0 0 * * 7", ((0,), (0,), ALL_DAYS, ALL_MONTHS, (0,))),
    ("0 0 * * 5-7", ((0,), (0,), ALL_DAYS, ALL_MONTHS, (0, 5, 6))),
    ("0 0 * * sat-sun", ((0,), (0,), ALL_DAYS, ALL_MONTHS, (0, 6))),
    ("0 0 * * 6-0", ((0,), (0,), ALL_DAYS, ALL_MONTHS, (0, 6))),
    ("0 0 * * */2", ((0,), (0,), ALL_DAYS, ALL_MONTHS, (0, 2, 4, 6))),
    ("59 23 31 12 *", ((59,), (23,), (31,), (12,), ALL_WEEKDAYS)),
]


@pytest.mark.parametrize(("expression", "expected"), READ_AS)
def test_each_field_reads_stars_values_ranges_steps_lists_and_names(
    expression: str, expected: tuple[tuple[int, ...], ...]
) -> None:
    fields = CronRule(expression).fields
    minutes, hours, days, months, weekdays = expected

    assert (fields.minutes, fields.hours, fields.months) == (minutes, hours, months)
    assert fitting_days(fields) == set(itertools.product(days, weekdays))


@pytest.mark.parametrize(
    ("expression", "either_day"),
    [
        ("0 0 13 * fri", True),
        ("0 0 1-7 * 1", True),
        ("0 0 13 * *", False),
        ("0 0 * * fri", False),
        ("0 0 */2 * fri", False),  # '*/2' starts with '*': it does not restrict
        ("0 0 13 * */2", False),
    ],
)
def test_a_day_fitting_either_day_field_fits_only_when_neither_starts_with_a_star(
    expression: str, either_day: bool
) -> None:
    assert CronRule(expression).fields.either_day is either_day


def fires_from(expression: str, after: datetime, count: int) -> list[datetime]:
    schedule = parse_job_schedule({"cron": expression})
    fired = []
    for _ in range(count):
        after = next_occurrence(schedule, after)
        fired.append(after)
    return fired


def test_the_13th_and_every_friday_both_fit_0_0_13_star_fri() -> None:
    fired = fires_from("0 0 13 * fri", datetime(2026, 1, 1, tzinfo=UTC), 4)

    # Friday the 2nd and the 9th, Tuesday the 13th, Friday the 16th
    assert [t.day for t in fired] == [2, 9, 13, 16]


def test_a_star_step_on_the_days_of_the_month_narrows_the_weekdays_instead() -> None:
    fired = fires_from("0 0 */2 * fri", datetime(2026, 1, 1, tzinfo=UTC), 3)

    # the Fridays of odd days (*/2 is 1, 3, ... 31): not the 2nd, the 16th or the 30th
    assert [(t.month, t.day) for t in fired] == [(1, 9), (1, 23), (2, 13)]


@pytest.mark.parametrize(
    ("expression", "pinned"),
    [
        ("30 2 * * *", True),
        ("0 0-23 * * *", True),
        ("*/20 1,2 * * *", True),
        ("0 * * * *", False),
        ("*/20 * * * *", False),
        ("0 */2 * * *", False),
    ],
)
def test_a_job_is_pinned_to_the_wall_clock_unless_its_hour_field_starts_with_a_star(
    expression: str, pinned: bool
) -> None:
    assert CronRule(expression).pinned is pinned


def test_the_expression_is_kept_as_written_with_its_whitespace_normalised() -> None:
    rule = CronRule("  0   7 * *\t1-5 ", "Europe/Paris")

    assert rule.expression == "0 7 * * 1-5"
    assert rule == CronRule("0 7 * * 1-5", "Europe/Paris")


REFUSED = [
    ("@daily", "nicknames such as @daily are not supported"),
    ("@every 5m", "nicknames such as @daily are not supported"),
    ("0 0 ? * *", "'?' is not supported"),
    ("0 0 L * *", "'L' (the last day) is not supported"),
    ("0 0 * * 5L", "'L' (the last day) is not supported"),
    ("0 0 15W * *", "'W' (the nearest weekday) is not supported"),
    ("0 0 LW * *", "'L' (the last day) is not supported"),
    ("0 0 * * fri#2", "'#' (the nth weekday of the month) is not supported"),
    ("5/15 * * * *", "a step applies to '*' or a range, not to a single value; write '5-59/15'"),
    ("0 0 * * fri-mon", "the range wraps around; write it as two ranges, 'fri-sat,sun-mon'"),
    ("0 0 * nov-feb *", "the range wraps around; write it as two ranges, 'nov-dec,jan-feb'"),
    ("50-10 * * * *", "the range wraps around; write it as two ranges, '50-59,0-10'"),
    ("0 0 0 * * *", "has 6 field(s); it takes five"),
    ("0 0 0 * * * 2026", "has 7 field(s); it takes five"),
    ("0 0 * *", "has 4 field(s); it takes five"),
    ("", "has 0 field(s); it takes five"),
    ("60 * * * *", "'60' in the minute field of cron '60 * * * *': 60 is out of range 0-59"),
    ("0 24 * * *", "24 is out of range 0-23"),
    ("0 0 0 * *", "0 is out of range 1-31"),
    ("0 0 32 * *", "32 is out of range 1-31"),
    ("0 0 * 13 *", "13 is out of range 1-12"),
    ("0 0 * 0 *", "0 is out of range 1-12"),
    ("0 0 * * 8", "8 is out of range 0-7"),
    ("*/0 * * * *", "the step is zero"),
    ("0-30/0 * * * *", "the step is zero"),
    ("*/x * * * *", "the step must be a number"),
    ("*/ * * * *", "the step must be a number"),
    ("1,,2 * * * *", "a value is missing"),
    ("1, * * * *", "a value is missing"),
    ("-5 * * * *", "'-5' is not a number"),
    ("jan * * * *", "'jan' is not a number"),
    ("0 0 * foo *", "'foo' is neither a number nor one of jan, feb"),
    ("0 0 * * monday", "'monday' is neither a number nor one of sun, mon"),
    ("٣ * * * *", "'٣' is not a number"),
    ("0 0 30 2 *", "cron '0 0 30 2 *' never fires: no month it names has day 30"),
    ("0 0 31 4,6,9,11 *", "never fires: no month it names has day 31"),
    ("0 0 30,31 feb *", "never fires"),
]


@pytest.mark.parametrize(("expression", "problem"), REFUSED)
def test_a_cron_that_cannot_be_read_or_never_fires_is_refused_naming_the_job(
    expression: str, problem: str
) -> None:
    with pytest.raises(DeclarationError) as refused:
        parse_job_schedule({"cron": expression}, job="billing.close-month")

    assert str(refused.value).startswith("job 'billing.close-month': ")
    assert problem in str(refused.value)
    assert refused.value.job == "billing.close-month"


@pytest.mark.parametrize(
    "expression",
    [
        "0 0 29 2 *",  # February has 29 days in a leap year
        "0 0 30 2 fri",  # the day of week fits on its own
        "0 0 31 4,6,9,11,12 *",
        "0 0 */30 2 *",  # a star step: the 1st is among its days
    ],
)
def test_a_cron_that_fires_on_some_day_is_accepted(expression: str) -> None:
    assert parse_job_schedule({"cron": expression}).rule == CronRule(expression)
