"""Settings per job name: switched off, rescheduled or tuned by configuration, never by code."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ddd_celery.declarations.errors import DeclarationError
from ddd_celery.declarations.options import MissedPolicy, OverlapPolicy, Tenancy
from ddd_celery.declarations.schedule import (
    CronRule,
    IntervalRule,
    ParsedJobSchedule,
    parse_job_schedule,
)
from ddd_celery.declarations.scheduled import ScheduledJobDeclaration
from ddd_celery.scheduling.errors import InvalidJobSettingsError, UnknownJobError
from ddd_celery.scheduling.settings import (
    JobSettings,
    apply_job_settings,
    enabled_variable,
    job_settings_from_env,
    run_jobs_from_env,
)

REMINDERS = "billing.send-payment-reminders"
LEDGER = "billing.export-ledger"


@pytest.fixture
def declared() -> dict[str, ParsedJobSchedule]:
    return {
        REMINDERS: parse_job_schedule(
            {"cron": "0 7 * * 1-5", "time_zone": "Europe/Paris", "overlap": "queue"}
        ),
        LEDGER: parse_job_schedule({"every": "15m", "jitter_ms": 5_000, "timeout_ms": 60_000}),
    }


def test_a_job_without_settings_runs_as_declared(declared: dict[str, ParsedJobSchedule]) -> None:
    assert apply_job_settings(declared, {}) == declared
    assert apply_job_settings(declared) == declared


def test_enabled_false_switches_a_job_off_and_keeps_the_rest_of_it(
    declared: dict[str, ParsedJobSchedule],
) -> None:
    effective = apply_job_settings(declared, {REMINDERS: {"enabled": False}})

    reminders = effective[REMINDERS]
    assert reminders.options.enabled is False
    assert reminders.options.overlap is OverlapPolicy.QUEUE
    assert reminders.rule == CronRule("0 7 * * 1-5", "Europe/Paris")
    assert effective[LEDGER] == declared[LEDGER]


def test_a_schedule_given_replaces_the_declared_one_and_keeps_its_options(
    declared: dict[str, ParsedJobSchedule],
) -> None:
    effective = apply_job_settings(
        declared, {LEDGER: {"schedule": {"cron": "30 2 * * *", "time_zone": "Europe/Paris"}}}
    )

    ledger = effective[LEDGER]
    assert ledger.rule == CronRule("30 2 * * *", "Europe/Paris")
    assert ledger.description == "cron 30 2 * * * (Europe/Paris)"
    assert (ledger.options.jitter_ms, ledger.options.timeout_ms) == (5_000, 60_000)


def test_a_cron_given_without_a_time_zone_is_in_utc(
    declared: dict[str, ParsedJobSchedule],
) -> None:
    effective = apply_job_settings(declared, {REMINDERS: {"schedule": {"cron": "0 6 * * *"}}})

    assert effective[REMINDERS].rule == CronRule("0 6 * * *", "UTC")


def test_an_interval_may_replace_a_cron(declared: dict[str, ParsedJobSchedule]) -> None:
    effective = apply_job_settings(declared, {REMINDERS: {"schedule": {"every": "2h"}}})

    assert effective[REMINDERS].rule == IntervalRule(2 * 3_600_000)
    assert effective[REMINDERS].description == "every 2h"


def test_options_given_are_merged_over_the_declared_ones(
    declared: dict[str, ParsedJobSchedule],
) -> None:
    effective = apply_job_settings(
        declared,
        {
            LEDGER: {
                "timeout_ms": 120_000,
                "missed": "run-once",
                "single_instance": False,
                "tenancy": "per-tenant",
            }
        },
    )

    options = effective[LEDGER].options
    assert options.timeout_ms == 120_000
    assert options.missed is MissedPolicy.RUN_ONCE
    assert options.single_instance is False
    assert options.tenancy is Tenancy.PER_TENANT
    assert options.jitter_ms == 5_000
    assert effective[LEDGER].rule == IntervalRule(15 * 60_000)


def test_settings_may_be_given_as_job_settings(declared: dict[str, ParsedJobSchedule]) -> None:
    effective = apply_job_settings(declared, {LEDGER: JobSettings(overlap=OverlapPolicy.QUEUE)})

    assert effective[LEDGER].options.overlap is OverlapPolicy.QUEUE


def test_the_declarations_themselves_may_be_given(
    declared: dict[str, ParsedJobSchedule],
) -> None:
    class Job:
        def run(self, execution: object) -> None: ...

    declarations = [
        ScheduledJobDeclaration(name, "billing", schedule, Job)
        for name, schedule in declared.items()
    ]

    effective = apply_job_settings(declarations, {LEDGER: {"enabled": False}})

    assert set(effective) == {REMINDERS, LEDGER}
    assert effective[LEDGER].options.enabled is False


def test_later_settings_apply_over_earlier_ones_field_by_field(
    declared: dict[str, ParsedJobSchedule],
) -> None:
    config = {LEDGER: {"enabled": True, "timeout_ms": 90_000}}
    environment = {LEDGER: {"enabled": False}}

    ledger = apply_job_settings(declared, config, environment)[LEDGER]

    assert ledger.options.enabled is False
    assert ledger.options.timeout_ms == 90_000


def test_settings_for_a_job_no_one_declares_are_refused_by_name(
    declared: dict[str, ParsedJobSchedule],
) -> None:
    with pytest.raises(UnknownJobError) as refused:
        apply_job_settings(declared, {"billing.send-reminders": {"enabled": True}})

    assert refused.value.code == "UNKNOWN_JOB"
    assert refused.value.job == "billing.send-reminders"
    assert "'billing.send-reminders'" in str(refused.value)
    assert isinstance(refused.value, LookupError)


def test_a_stale_key_in_a_later_layer_is_refused_too(
    declared: dict[str, ParsedJobSchedule],
) -> None:
    with pytest.raises(UnknownJobError, match=r"'notifications\.old-name'"):
        apply_job_settings(declared, {LEDGER: {}}, {"notifications.old-name": {"enabled": True}})


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"timeoutMs": 60_000}, "timeoutMs"),
        ({"enabled": "maybe"}, "enabled"),
        ({"overlap": "sometimes"}, "overlap"),
        ({"missed": "all"}, "missed"),
        ({"tenancy": "each"}, "tenancy"),
        ({"timeout_ms": 0}, "timeout_ms"),
        ({"timeout_ms": "60000"}, "timeout_ms"),
        ({"jitter_ms": -1}, "jitter_ms"),
        ({"jitter_ms": True}, "jitter_ms"),
        ({"schedule": {"cron": "0 7 * * *", "timeZone": "UTC"}}, "schedule.timeZone"),
        ({"schedule": "0 7 * * *"}, "schedule"),
    ],
)
def test_settings_that_cannot_be_read_are_refused_naming_the_job_and_the_field(
    declared: dict[str, ParsedJobSchedule], settings: dict[str, object], field: str
) -> None:
    with pytest.raises(InvalidJobSettingsError) as refused:
        apply_job_settings(declared, {LEDGER: settings})

    assert refused.value.code == "INVALID_JOB_SETTINGS"
    assert refused.value.job == LEDGER
    assert f"job '{LEDGER}'" in str(refused.value)
    assert f"{field}:" in str(refused.value)
    assert isinstance(refused.value.__cause__, ValidationError)


def test_settings_that_are_not_a_mapping_are_refused(
    declared: dict[str, ParsedJobSchedule],
) -> None:
    with pytest.raises(InvalidJobSettingsError, match="settings: "):
        apply_job_settings(declared, {LEDGER: False})  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("schedule", "problem"),
    [
        ({"cron": "0 25 * * *"}, "hour"),
        ({"cron": "0 7 31 2 *"}, "never"),
        ({"cron": "0 7 * * *", "time_zone": "Europe/Pariss"}, "Europe/Pariss"),
        ({"every": "0m"}, "positive"),
        ({"every": "15 minutes"}, "cannot be read"),
        ({"every": 1.5}, "'every' must be an int"),
        ({"every": True}, "'every' must be an int"),
        ({"every": "15m", "cron": "0 7 * * *"}, "not both"),
        ({}, "needs 'every'"),
        ({"every": "15m", "time_zone": "Europe/Paris"}, "goes with 'cron' only"),
    ],
)
def test_a_schedule_parse_job_schedule_refuses_is_refused_naming_the_schedule(
    declared: dict[str, ParsedJobSchedule], schedule: dict[str, object], problem: str
) -> None:
    with pytest.raises(InvalidJobSettingsError) as refused:
        apply_job_settings(declared, {REMINDERS: {"schedule": schedule}})

    message = str(refused.value)
    assert message.startswith(f"job '{REMINDERS}': settings field schedule")
    assert problem in message
    assert refused.value.code == "INVALID_JOB_SETTINGS"
    assert isinstance(refused.value.__cause__, DeclarationError)


def test_invalid_settings_are_a_declaration_error_a_value_error() -> None:
    assert issubclass(InvalidJobSettingsError, DeclarationError)
    assert issubclass(InvalidJobSettingsError, ValueError)


@pytest.mark.parametrize(
    ("job", "variable"),
    [
        ("notifications.send-reminders", "JOB_NOTIFICATIONS_SEND_REMINDERS_ENABLED"),
        ("billing.export-ledger", "JOB_BILLING_EXPORT_LEDGER_ENABLED"),
        ("archive.archive_old", "JOB_ARCHIVE_ARCHIVE_OLD_ENABLED"),
    ],
)
def test_the_switch_of_a_job_is_named_after_it(job: str, variable: str) -> None:
    assert enabled_variable(job) == variable


@pytest.mark.parametrize(
    ("value", "enabled"),
    [
        ("false", False),
        ("FALSE", False),
        ("0", False),
        ("true", True),
        (" True ", True),
        ("1", True),
    ],
)
def test_an_environment_switch_reads_true_false_one_and_zero(value: str, enabled: bool) -> None:
    environ = {"JOB_BILLING_EXPORT_LEDGER_ENABLED": value}

    assert job_settings_from_env(environ, [LEDGER, REMINDERS]) == {
        LEDGER: JobSettings(enabled=enabled)
    }


def test_jobs_without_a_switch_in_the_environment_get_no_settings() -> None:
    assert job_settings_from_env({"PATH": "/usr/bin"}, [LEDGER, REMINDERS]) == {}


@pytest.mark.parametrize("value", ["no", "off", "", "2", "fasle"])
def test_an_unreadable_switch_is_refused_naming_the_variable_and_the_job(value: str) -> None:
    with pytest.raises(InvalidJobSettingsError) as refused:
        job_settings_from_env({"JOB_BILLING_EXPORT_LEDGER_ENABLED": value}, [LEDGER])

    assert refused.value.code == "INVALID_JOB_SETTINGS"
    assert refused.value.job == LEDGER
    assert "JOB_BILLING_EXPORT_LEDGER_ENABLED" in str(refused.value)


def test_two_jobs_that_would_share_a_switch_are_refused() -> None:
    with pytest.raises(InvalidJobSettingsError, match="would switch both"):
        job_settings_from_env({}, ["billing.export-ledger", "billing.export_ledger"])


def test_the_environment_switches_a_job_off_over_the_configuration(
    declared: dict[str, ParsedJobSchedule],
) -> None:
    environ = {"JOB_BILLING_SEND_PAYMENT_REMINDERS_ENABLED": "false"}
    config = {REMINDERS: {"enabled": True, "timeout_ms": 30_000}}

    effective = apply_job_settings(declared, config, job_settings_from_env(environ, declared))

    assert effective[REMINDERS].options.enabled is False
    assert effective[REMINDERS].options.timeout_ms == 30_000
    assert effective[LEDGER].options.enabled is True


@pytest.mark.parametrize(
    ("environ", "default", "run"),
    [
        ({}, True, True),
        ({}, False, False),
        ({"RUN_JOBS": "false"}, True, False),
        ({"RUN_JOBS": "0"}, True, False),
        ({"RUN_JOBS": "true"}, False, True),
        ({"RUN_JOBS": "1"}, False, True),
    ],
)
def test_run_jobs_says_whether_this_process_starts_jobs_by_time(
    environ: dict[str, str], default: bool, run: bool
) -> None:
    assert run_jobs_from_env(environ, default=default) is run


def test_an_unreadable_run_jobs_is_refused() -> None:
    with pytest.raises(InvalidJobSettingsError, match="RUN_JOBS='yes'") as refused:
        run_jobs_from_env({"RUN_JOBS": "yes"})

    assert refused.value.code == "INVALID_JOB_SETTINGS"
