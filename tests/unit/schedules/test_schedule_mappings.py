"""parse_job_schedule and describe_job_schedule: intervals, cron, options and every refusal."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from ddd_celery.declarations import (
    CronRule,
    DeclarationError,
    IntervalRule,
    JobOptions,
    MissedPolicy,
    OverlapPolicy,
    ParsedJobSchedule,
    Tenancy,
    describe_job_schedule,
    parse_job_schedule,
)


@pytest.mark.parametrize(
    ("every", "every_ms"),
    [
        (900_000, 900_000),
        (1, 1),
        ("500ms", 500),
        ("30s", 30_000),
        ("15m", 900_000),
        ("2h", 7_200_000),
        ("1d", 86_400_000),
        ("90s", 90_000),
        (timedelta(minutes=15), 900_000),
        (timedelta(milliseconds=1500), 1500),
    ],
)
def test_an_interval_is_whole_milliseconds_a_number_and_a_unit_or_a_timedelta(
    every: Any, every_ms: int
) -> None:
    assert parse_job_schedule({"every": every}).rule == IntervalRule(every_ms)


@pytest.mark.parametrize(
    ("schedule", "description"),
    [
        ({"every": "15m"}, "every 15m"),
        ({"every": 900_000}, "every 15m"),
        ({"every": "90s"}, "every 90s"),
        ({"every": "60m"}, "every 1h"),
        ({"every": "24h"}, "every 1d"),
        ({"every": "36h"}, "every 36h"),
        ({"every": 1500}, "every 1500ms"),
        ({"every": "1000ms"}, "every 1s"),
        ({"every": timedelta(days=2)}, "every 2d"),
        ({"cron": "0 7 * * 1-5", "time_zone": "Europe/Paris"}, "cron 0 7 * * 1-5 (Europe/Paris)"),
        ({"cron": "0  3 * * *"}, "cron 0 3 * * * (UTC)"),
        (
            {"cron": "0 0 * * MON-fri", "time_zone": "America/New_York"},
            "cron 0 0 * * MON-fri (America/New_York)",
        ),
    ],
)
def test_a_schedule_is_described_in_its_canonical_form(
    schedule: dict[str, Any], description: str
) -> None:
    assert describe_job_schedule(schedule) == description
    assert parse_job_schedule(schedule).description == description


def test_a_cron_follows_utc_unless_it_names_a_zone() -> None:
    assert parse_job_schedule({"cron": "0 7 * * *"}).rule == CronRule("0 7 * * *", "UTC")
    rule = parse_job_schedule({"cron": "0 7 * * *", "time_zone": "Europe/Paris"}).rule

    assert isinstance(rule, CronRule)
    assert rule.zone == ZoneInfo("Europe/Paris")


def test_the_options_default_to_those_of_the_seed() -> None:
    assert parse_job_schedule({"every": "15m"}).options == JobOptions(
        overlap=OverlapPolicy.SKIP,
        missed=MissedPolicy.SKIP,
        timeout_ms=None,
        jitter_ms=0,
        enabled=True,
        single_instance=True,
        tenancy=Tenancy.GLOBAL,
    )


def test_the_options_written_next_to_the_schedule_are_read_as_enums() -> None:
    parsed = parse_job_schedule(
        {
            "every": "1h",
            "overlap": "queue",
            "missed": "run-once",
            "timeout_ms": 60_000,
            "jitter_ms": 5_000,
            "enabled": False,
            "single_instance": False,
            "tenancy": "per-tenant",
        }
    )

    assert parsed == ParsedJobSchedule(
        IntervalRule(3_600_000),
        JobOptions(
            OverlapPolicy.QUEUE,
            MissedPolicy.RUN_ONCE,
            60_000,
            5_000,
            False,
            False,
            Tenancy.PER_TENANT,
        ),
    )
    assert parsed.options.overlap == "queue"


def test_options_given_as_enums_and_a_null_timeout_are_accepted() -> None:
    parsed = parse_job_schedule(
        {
            "cron": "0 2 1 * *",
            "overlap": OverlapPolicy.QUEUE,
            "tenancy": Tenancy.PER_TENANT,
            "timeout_ms": None,
        }
    )

    assert parsed.options == JobOptions(overlap=OverlapPolicy.QUEUE, tenancy=Tenancy.PER_TENANT)


def test_equal_schedules_parsed_apart_share_one_value_and_their_rule() -> None:
    paris = {"cron": "0 7 * * 1-5", "time_zone": "Europe/Paris"}

    first = parse_job_schedule({**paris, "timeout_ms": 5_000}, job="a.first")
    second = parse_job_schedule({**paris, "timeout_ms": 5_000}, job="a.second")
    longer = parse_job_schedule({**paris, "timeout_ms": 9_000}, job="a.longer")

    assert first is second
    assert longer is not first
    assert longer.rule is first.rule
    assert longer.options.timeout_ms == 9_000


def test_a_parsed_schedule_is_returned_as_it_is() -> None:
    parsed = parse_job_schedule({"every": "15m"})

    assert parse_job_schedule(parsed, job="billing.x") is parsed
    assert describe_job_schedule(parsed) == "every 15m"


REFUSED: list[tuple[Any, str]] = [
    ({}, "a schedule needs 'every' (an interval such as '15m') or 'cron'"),
    ({"overlap": "skip"}, "a schedule needs 'every'"),
    ({"every": "15m", "cron": "* * * * *"}, "a schedule takes 'every' or 'cron', not both"),
    (
        {"every": "15m", "time_zone": "Europe/Paris"},
        "'time_zone' ('Europe/Paris') goes with 'cron' only",
    ),
    ({"every": "15m", "time_zone": "UTC"}, "goes with 'cron' only"),
    ({"every": 0}, "'every' must be positive, got 0 ms"),
    ({"every": -1000}, "'every' must be positive, got -1000 ms"),
    ({"every": "0m"}, "'every' must be positive, got '0m'"),
    ({"every": timedelta(0)}, "'every' must be positive"),
    ({"every": timedelta(seconds=-5)}, "'every' must be positive"),
    ({"every": timedelta(microseconds=1500)}, "'every' must be whole milliseconds"),
    ({"every": "15"}, "'every' '15' cannot be read: write a whole number and one of the units"),
    ({"every": "15 m"}, "'every' '15 m' cannot be read"),
    ({"every": "1.5h"}, "'every' '1.5h' cannot be read"),
    ({"every": "15M"}, "'every' '15M' cannot be read"),
    ({"every": "1w"}, "'every' '1w' cannot be read"),
    ({"every": "-5m"}, "'every' '-5m' cannot be read"),
    (
        {"every": True},
        "'every' must be an int of milliseconds, a string such as '15m' or a timedelta, "
        "got bool True",
    ),
    ({"every": 1.5}, "got float 1.5"),
    ({"every": [15]}, "got list [15]"),
    ({"cron": 5}, "'cron' must be a string, got 5"),
    ({"cron": "* * * * *", "time_zone": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
    ({"cron": "* * * * *", "time_zone": "Europe"}, "unknown time zone 'Europe'"),
    ({"cron": "* * * * *", "time_zone": "europe/paris"}, "unknown time zone 'europe/paris'"),
    (
        {"cron": "* * * * *", "time_zone": ""},
        "'time_zone' must be an IANA name such as 'Europe/Paris', got ''",
    ),
    (
        {"cron": "* * * * *", "time_zone": "../../etc/passwd"},
        "must be an IANA name such as 'Europe/Paris', got '../../etc/passwd'",
    ),
    ({"cron": "* * * * *", "time_zone": "/usr/share/zoneinfo/UTC"}, "must be an IANA name"),
    ({"cron": "* * * * *", "time_zone": "Europe/./Paris"}, "must be an IANA name"),
    ({"cron": "* * * * *", "time_zone": 1}, "must be an IANA name such as 'Europe/Paris', got 1"),
    (
        {"every": "1m", "timeZone": "UTC"},
        "unknown key 'timeZone' (did you mean 'time_zone'?) in the schedule; "
        "the keys are every, cron, time_zone, overlap",
    ),
    ({"every": "1m", "timeoutMs": 5}, "unknown key 'timeoutMs' (did you mean 'timeout_ms'?)"),
    ({"every": "1m", "overlapp": "skip"}, "unknown key 'overlapp' (did you mean 'overlap'?)"),
    ({"every": "1m", "retries": 3}, "unknown key 'retries' in the schedule"),
    ({"every": "1m", "overlap": "run"}, "'overlap' must be one of 'skip', 'queue', got 'run'"),
    ({"every": "1m", "overlap": None}, "'overlap' must be one of 'skip', 'queue', got None"),
    (
        {"every": "1m", "missed": "run_once"},
        "'missed' must be one of 'skip', 'run-once', got 'run_once'",
    ),
    (
        {"every": "1m", "tenancy": "tenant"},
        "'tenancy' must be one of 'global', 'per-tenant', got 'tenant'",
    ),
    ({"every": "1m", "timeout_ms": 0}, "'timeout_ms' must be positive, got 0"),
    ({"every": "1m", "timeout_ms": -1}, "'timeout_ms' must be positive, got -1"),
    (
        {"every": "1m", "timeout_ms": True},
        "'timeout_ms' must be an int of milliseconds or None, got True",
    ),
    (
        {"every": "1m", "timeout_ms": 1.5},
        "'timeout_ms' must be an int of milliseconds or None, got 1.5",
    ),
    (
        {"every": "1m", "timeout_ms": "60s"},
        "'timeout_ms' must be an int of milliseconds or None, got '60s'",
    ),
    ({"every": "1m", "jitter_ms": -1}, "'jitter_ms' must be zero or more, got -1"),
    ({"every": "1m", "jitter_ms": None}, "'jitter_ms' must be an int of milliseconds, got None"),
    ({"every": "1m", "jitter_ms": False}, "'jitter_ms' must be an int of milliseconds, got False"),
    ({"every": "1m", "enabled": "false"}, "'enabled' must be True or False, got 'false'"),
    ({"every": "1m", "enabled": 0}, "'enabled' must be True or False, got 0"),
    ({"every": "1m", "single_instance": None}, "'single_instance' must be True or False, got None"),
    (
        "every 15m",
        "a schedule is a mapping such as {'every': '15m'} or {'cron': '0 7 * * *'}, not str",
    ),
]


@pytest.mark.parametrize(("schedule", "problem"), REFUSED)
def test_a_schedule_out_of_its_values_is_refused_saying_what_and_naming_the_job(
    schedule: Any, problem: str
) -> None:
    with pytest.raises(DeclarationError) as refused:
        parse_job_schedule(schedule, job="billing.send-payment-reminders")

    assert str(refused.value) == f"job 'billing.send-payment-reminders': {refused.value.problem}"
    assert problem in refused.value.problem
    assert isinstance(refused.value, ValueError)


def test_a_refusal_without_a_job_says_only_what_is_wrong() -> None:
    with pytest.raises(DeclarationError, match=r"^'every' must be positive, got 0 ms$"):
        describe_job_schedule({"every": 0})


@pytest.mark.parametrize(
    ("build", "problem"),
    [
        (lambda: IntervalRule(0), "'every' must be positive, got 0 ms"),
        (lambda: IntervalRule(True), "'every' must be an int of milliseconds, got True"),
        (lambda: CronRule("0 0 30 2 *"), "never fires"),
        (lambda: CronRule("* * * * *", "Mars/Olympus"), "unknown time zone 'Mars/Olympus'"),
    ],
)
def test_rules_built_directly_are_checked_the_same_way(build: Any, problem: str) -> None:
    with pytest.raises(DeclarationError, match=problem):
        build()
