"""Entries of ``app.conf.beat_schedule`` translated into jobs of the ``beat`` context.

A translated crontab is checked against Celery's own reading of it: the same minutes, hours and
months, and a day accepted exactly when Celery accepts it. Its instants then follow our DST
rules in the app's timezone, which is what changes for a team that switches.
"""

from __future__ import annotations

import itertools
import types
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery.schedules import crontab, schedule, solar
from cron_days import fits_day
from hypothesis import given
from hypothesis import strategies as st

from ddd_celery.celery.beat_entries import (
    BeatScheduleEntryError,
    job_name_of,
    translate_beat_schedule,
)
from ddd_celery.celery.registry import CeleryJob
from ddd_celery.declarations.cron import parse_cron
from ddd_celery.declarations.cron_evaluator import next_occurrence
from ddd_celery.declarations.errors import DeclarationError
from ddd_celery.declarations.schedule import CronRule


def translated(value: Any, *, timezone: str = "UTC", **entry: Any) -> CeleryJob:
    (job,) = translate_beat_schedule(
        {"entry": {"task": "app.task", "schedule": value, **entry}}, timezone=timezone
    )
    return job


def instants(job: CeleryJob, after: datetime, count: int) -> list[datetime]:
    found = []
    for _ in range(count):
        after = next_occurrence(job.schedule, after)
        found.append(after)
    return found


def cron_of(job: CeleryJob) -> str:
    rule = job.schedule.rule
    assert isinstance(rule, CronRule)
    return rule.expression


# --- what an entry keeps ---------------------------------------------------------------------


def test_an_entry_keeps_its_task_arguments_and_options_as_a_job_of_the_beat_context() -> None:
    (job,) = translate_beat_schedule(
        {
            "Send Report (daily)!": {
                "task": "reports.send",
                "schedule": crontab(minute=0, hour=7),
                "args": [1, 2],
                "kwargs": {"to": "ops"},
                "options": {"queue": "reports", "expires": 600},
            }
        },
        timezone="UTC",
    )

    assert job.name == "beat.send-report-daily"
    assert (job.task_name, job.args, dict(job.kwargs)) == ("reports.send", (1, 2), {"to": "ops"})
    assert (job.queue, dict(job.options)) == ("reports", {"queue": "reports", "expires": 600})
    assert not job.declared
    assert job.schedule.options.single_instance


def test_every_entry_becomes_a_job_in_the_order_written() -> None:
    jobs = translate_beat_schedule(
        {"b": {"task": "t.b", "schedule": 60}, "a": {"task": "t.a", "schedule": 30}},
        timezone="UTC",
    )

    assert [job.name for job in jobs] == ["beat.b", "beat.a"]


@pytest.mark.parametrize(
    ("entry_name", "job_name"),
    [
        ("flush", "beat.flush"),
        ("Flush Cache", "beat.flush-cache"),
        ("reports:daily/send", "beat.reports-daily-send"),
        ("__nightly_sync__", "beat.__nightly_sync__"),
        ("  éclair ", "beat.clair"),
    ],
)
def test_an_entry_name_becomes_a_lower_case_slug(entry_name: str, job_name: str) -> None:
    assert job_name_of(entry_name) == job_name


def test_two_entries_whose_names_become_the_same_job_are_refused_naming_both() -> None:
    with pytest.raises(BeatScheduleEntryError, match=r"'Flush cache'.*'flush-cache'"):
        translate_beat_schedule(
            {
                "flush-cache": {"task": "t", "schedule": 60},
                "Flush cache": {"task": "t", "schedule": 60},
            },
            timezone="UTC",
        )


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"task": "t", "schedule": 60, "every": 5}, "unknown key"),
        ({"schedule": 60}, "'task' must name the task"),
        ({"task": "", "schedule": 60}, "'task' must name the task"),
    ],
)
def test_an_entry_that_cannot_be_read_is_refused_naming_it(
    entry: dict[str, Any], problem: str
) -> None:
    with pytest.raises(BeatScheduleEntryError, match=f"entry 'nightly': {problem}") as raised:
        translate_beat_schedule({"nightly": entry}, timezone="UTC")

    assert raised.value.entry == "nightly"
    assert isinstance(raised.value, DeclarationError)


def test_an_entry_name_with_nothing_to_name_a_job_is_refused() -> None:
    with pytest.raises(BeatScheduleEntryError, match="entry '!!!'"):
        translate_beat_schedule({"!!!": {"task": "t", "schedule": 60}}, timezone="UTC")


# --- intervals -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "description"),
    [
        (timedelta(minutes=15), "every 15m"),
        (30, "every 30s"),
        (0.5, "every 500ms"),
        (schedule(timedelta(hours=1)), "every 1h"),
        (schedule(timedelta(seconds=10), relative=True), "every 10s"),
    ],
)
def test_an_interval_becomes_an_every_of_whole_milliseconds(value: Any, description: str) -> None:
    assert translated(value).schedule.description == description


def test_an_interval_counts_from_the_epoch_not_from_the_start_of_beat() -> None:
    job = translated(timedelta(minutes=15))

    assert instants(job, datetime(2026, 3, 2, 10, 7, 12, tzinfo=UTC), 2) == [
        datetime(2026, 3, 2, 10, 15, tzinfo=UTC),
        datetime(2026, 3, 2, 10, 30, tzinfo=UTC),
    ]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (0, "'every' must be positive"),
        (-5, "'every' must be positive"),
        (timedelta(microseconds=1500), "whole milliseconds"),
        (float("nan"), "not a number of seconds"),
    ],
)
def test_an_interval_that_is_no_whole_positive_milliseconds_is_refused_naming_the_entry(
    value: Any, problem: str
) -> None:
    with pytest.raises(BeatScheduleEntryError, match=rf"entry 'entry': .*{problem}"):
        translated(value)


# --- crontabs --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expression"),
    [
        (crontab(), "* * * * *"),
        (crontab(minute=0, hour=7), "0 7 * * *"),
        (crontab(minute="*/15"), "*/15 * * * *"),
        (crontab(minute=0, hour="*/2"), "0 */2 * * *"),
        (crontab(minute=0, hour="8-18/2"), "0 8,10,12,14,16,18 * * *"),
        (crontab(minute=0, hour=7, day_of_week="mon-fri"), "0 7 * * 1-5"),
        (crontab(minute=0, hour=7, day_of_week="fri-mon"), "0 7 * * 0,1,5,6"),
        (crontab(minute=0, hour=0, day_of_month=1, month_of_year="*/3"), "0 0 1 */3 *"),
        (crontab(minute=[0, 30], hour=[9, 10, 11, 17]), "*/30 9-11,17 * * *"),
        (crontab(minute=[5, 35], hour=[9, 10]), "5,35 9,10 * * *"),
        # what crontab.from_string("5 4 * * sun") builds (celery 5.5 on); the floor, 5.4, lacks it
        (
            crontab(minute="5", hour="4", day_of_month="*", month_of_year="*", day_of_week="sun"),
            "5 4 * * 0",
        ),
    ],
)
def test_a_crontab_becomes_the_cron_expression_of_the_same_fields(
    value: Any, expression: str
) -> None:
    assert cron_of(translated(value)) == expression


def test_a_crontab_is_read_in_the_app_timezone() -> None:
    job = translated(crontab(minute=0, hour=7, day_of_week="mon-fri"), timezone="Europe/Paris")

    assert job.schedule.description == "cron 0 7 * * 1-5 (Europe/Paris)"
    assert instants(job, datetime(2026, 3, 6, 8, tzinfo=UTC), 1) == [
        datetime(2026, 3, 9, 6, tzinfo=UTC)
    ]


def test_a_crontab_pinned_to_a_time_that_does_not_exist_that_day_has_no_run() -> None:
    job = translated(crontab(minute=30, hour=2), timezone="Europe/Paris")

    # 02:30 does not exist in Paris on 29 March 2026: that day is skipped, nothing moves to 03:30
    assert instants(job, datetime(2026, 3, 28, 12, tzinfo=UTC), 1) == [
        datetime(2026, 3, 30, 0, 30, tzinfo=UTC)
    ]


def test_an_hourly_crontab_runs_through_the_repeated_hour_twice_when_clocks_go_back() -> None:
    job = translated(crontab(minute=0), timezone="Europe/Paris")

    # 02:00 in Paris happens twice on 25 October 2026: 00:00 and 01:00 UTC
    assert instants(job, datetime(2026, 10, 24, 23, 30, tzinfo=UTC), 3) == [
        datetime(2026, 10, 25, 0, tzinfo=UTC),
        datetime(2026, 10, 25, 1, tzinfo=UTC),
        datetime(2026, 10, 25, 2, tzinfo=UTC),
    ]


def test_a_crontab_pinned_to_the_repeated_hour_runs_once_the_first_time() -> None:
    job = translated(crontab(minute=0, hour=2), timezone="Europe/Paris")

    assert instants(job, datetime(2026, 10, 24, 12, tzinfo=UTC), 2) == [
        datetime(2026, 10, 25, 0, tzinfo=UTC),
        datetime(2026, 10, 26, 1, tzinfo=UTC),
    ]


def test_a_crontab_restricting_both_day_fields_is_refused_naming_the_entry() -> None:
    first_monday = crontab(minute=0, hour=9, day_of_week="mon", day_of_month="1-7")

    with pytest.raises(BeatScheduleEntryError, match=r"entry 'first-monday': .*both") as raised:
        translate_beat_schedule(
            {"first-monday": {"task": "t", "schedule": first_monday}}, timezone="UTC"
        )

    assert "day_of_month ('1-7')" in str(raised.value)


def test_a_crontab_whose_day_of_week_is_a_step_keeps_celery_s_both_days_rule() -> None:
    job = translated(crontab(minute=0, hour=0, day_of_week="*/2", day_of_month="1-7"))

    # days 1 to 7 that are also a Sunday, Tuesday, Thursday or Saturday, as Celery reads it
    # (1 March 2026 is a Sunday, 1 April a Wednesday)
    days = [at.day for at in instants(job, datetime(2026, 3, 1, 0, 30, tzinfo=UTC), 4)]
    assert days == [3, 5, 7, 2]


def test_an_unknown_timezone_is_refused_naming_the_entry() -> None:
    with pytest.raises(BeatScheduleEntryError, match="entry 'entry': unknown time zone"):
        translated(crontab(minute=0), timezone="Mars/Olympus_Mons")


_FIELD_FORMS = {
    "minute": (0, 59),
    "hour": (0, 23),
    "day_of_week": (0, 6),
    "day_of_month": (1, 31),
    "month_of_year": (1, 12),
}


@st.composite
def cronspecs(draw: st.DrawFn, field: str) -> str:
    """A field as Celery accepts it: ``*``, ``*/n``, a value, a range, a stepped range, lists."""
    low, high = _FIELD_FORMS[field]
    values = st.integers(low, high)

    def part(kind: str) -> str:
        if kind == "star":
            return "*"
        if kind == "star-step":
            return f"*/{draw(st.integers(1, high - low + 1))}"
        start = draw(values)
        if kind == "value":
            return str(start)
        end = draw(st.integers(start, high))
        if kind == "range":
            return f"{start}-{end}"
        return f"{start}-{end}/{draw(st.integers(1, high - low + 1))}"

    kinds = st.sampled_from(["star", "star-step", "value", "range", "range-step"])
    return ",".join(part(kind) for kind in draw(st.lists(kinds, min_size=1, max_size=3)))


@given(
    minute=cronspecs("minute"),
    hour=cronspecs("hour"),
    day_of_week=cronspecs("day_of_week"),
    day_of_month=cronspecs("day_of_month"),
    month_of_year=cronspecs("month_of_year"),
)
def test_a_translated_crontab_fires_on_exactly_the_times_celery_reads_in_it(
    minute: str, hour: str, day_of_week: str, day_of_month: str, month_of_year: str
) -> None:
    try:
        value = crontab(minute, hour, day_of_week, day_of_month, month_of_year)
    except ValueError:
        return  # Celery refuses it too (a day no month has)
    try:
        job, refusal = translated(value), ""
    except BeatScheduleEntryError as refused:
        job, refusal = None, str(refused)
    if job is None:
        assert "both day_of_month" in refusal
        return

    expression = cron_of(job)
    fields = parse_cron(expression)
    assert set(fields.minutes) == value.minute
    assert set(fields.hours) == value.hour
    assert set(fields.months) == value.month_of_year
    for day, weekday in itertools.product(range(1, 32), range(7)):
        celery_fires = day in value.day_of_month and weekday in value.day_of_week
        assert fits_day(fields, day, weekday) == celery_fires, (expression, day, weekday)


# --- what cannot be translated ---------------------------------------------------------------


def test_a_solar_schedule_is_refused_naming_the_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_ephem = types.SimpleNamespace(Observer=types.SimpleNamespace)
    monkeypatch.setitem(__import__("sys").modules, "ephem", fake_ephem)
    sunrise = solar("sunrise", 48.85, 2.35)

    with pytest.raises(BeatScheduleEntryError, match="entry 'open shutters': a solar schedule"):
        translate_beat_schedule(
            {"open shutters": {"task": "home.open", "schedule": sunrise}}, timezone="UTC"
        )


def test_a_schedule_class_of_ones_own_is_refused_naming_the_entry_and_the_class() -> None:
    class EveryOtherHour(schedule):  # type: ignore[misc]
        """A subclass may decide anything in is_due: it is not what its interval says."""

    with pytest.raises(BeatScheduleEntryError, match=r"entry 'sync': .*class EveryOtherHour"):
        translate_beat_schedule(
            {"sync": {"task": "t", "schedule": EveryOtherHour(timedelta(hours=2))}},
            timezone="UTC",
        )


def test_a_schedule_that_is_no_schedule_at_all_is_refused_naming_the_entry() -> None:
    with pytest.raises(BeatScheduleEntryError, match=r"entry 'entry': .*class str"):
        translated("every 5 minutes")
