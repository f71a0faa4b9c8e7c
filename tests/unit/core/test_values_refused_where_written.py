"""A declaration, a setting or an argument out of its bounds or of the wrong type is refused
where it is written, with an error naming the job or saying what was expected
(``DeclarationError``, ``InvalidJobSettingsError``, ``TypeError``): not later, as an
``OverflowError`` in ``jobs list``, a store refusing a time to live, a bare ``ValueError`` or an
``AttributeError``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ddd_celery import DeclarationError, latest_occurrence, next_occurrence, parse_job_schedule
from ddd_celery.declarations.schedule import MAX_EVERY_MS, MAX_JITTER_MS, MAX_TIMEOUT_MS
from ddd_celery.scheduling.errors import InvalidJobSettingsError
from ddd_celery.scheduling.settings import apply_job_settings

JOB = "billing.send-payment-reminders"
NOW = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize("every", ["3000000d", 10**15, timedelta(days=400), "9" * 5000 + "ms"])
def test_an_interval_no_occurrence_of_which_can_be_computed_is_refused_naming_the_job(
    every: object,
) -> None:
    with pytest.raises(DeclarationError, match=rf"job '{JOB}'.*366 days"):
        parse_job_schedule({"every": every}, job=JOB)


def test_the_longest_interval_still_has_a_next_occurrence() -> None:
    parsed = parse_job_schedule({"every": MAX_EVERY_MS}, job=JOB)

    assert next_occurrence(parsed, datetime(9000, 1, 1, tzinfo=UTC)).year == 9000


@pytest.mark.parametrize(
    ("option", "high"), [("timeout_ms", MAX_TIMEOUT_MS), ("jitter_ms", MAX_JITTER_MS)]
)
def test_a_timeout_or_jitter_past_its_bound_is_refused_naming_the_job(
    option: str, high: int
) -> None:
    assert parse_job_schedule({"every": "1h", option: high}, job=JOB)
    with pytest.raises(DeclarationError, match=rf"job '{JOB}'.*{option}.*at most {high}"):
        parse_job_schedule({"every": "1h", option: 10**30}, job=JOB)


@pytest.mark.parametrize(
    "cron", ["5" * 5000 + " * * * *", "*/" + "7" * 5000 + " * * * *", "0 00000009 * * *"]
)
def test_a_cron_number_of_thousands_of_digits_is_refused_naming_the_job(cron: str) -> None:
    with pytest.raises(DeclarationError, match=rf"job '{JOB}'.*out of range") as refused:
        parse_job_schedule({"cron": cron}, job=JOB)

    assert len(str(refused.value)) < 300  # the value is not quoted whole


@pytest.mark.parametrize("flag", ["no", "off", "f", 0, 1, "n", "yes"])
@pytest.mark.parametrize("key", ["enabled", "single_instance"])
def test_settings_take_true_or_false_only_for_a_switch(key: str, flag: object) -> None:
    declared = {JOB: parse_job_schedule({"every": "15m"})}

    with pytest.raises(InvalidJobSettingsError, match=rf"job '{JOB}'.*{key}"):
        apply_job_settings(declared, {JOB: {key: flag}})


def test_settings_switch_a_job_off_with_false() -> None:
    declared = {JOB: parse_job_schedule({"every": "15m"})}

    assert apply_job_settings(declared, {JOB: {"enabled": False}})[JOB].options.enabled is False


def test_settings_given_as_a_list_say_what_was_expected() -> None:
    declared = {JOB: parse_job_schedule({"every": "15m"})}

    with pytest.raises(TypeError, match=r"a mapping \{job name: settings\}.*not a list"):
        apply_job_settings(declared, [{JOB: {"enabled": False}}])  # type: ignore[arg-type]


def test_next_and_latest_occurrence_of_an_unparsed_schedule_say_what_they_take() -> None:
    with pytest.raises(TypeError, match=r"next_occurrence takes a parsed schedule.*not a dict"):
        next_occurrence({"every": "15m"}, NOW)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"latest_occurrence takes a parsed schedule"):
        latest_occurrence({"every": "15m"}, after=NOW, not_after=NOW)  # type: ignore[arg-type]
