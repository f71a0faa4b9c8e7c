"""Outcomes equal the seeds' strings; each error carries the code a failed run records."""

from __future__ import annotations

import pytest

from ddd_celery.declarations.errors import DeclarationError
from ddd_celery.kernel import DomainError
from ddd_celery.scheduling.errors import (
    InvalidJobScheduleError,
    InvalidJobSettingsError,
    JobAbortedError,
    JobLockUnavailableError,
    JobTimeoutError,
    SchedulingError,
    UnknownJobError,
)
from ddd_celery.scheduling.occurrence import Step
from ddd_celery.scheduling.outcomes import Outcome, context_of, error_code_of


def test_the_outcomes_are_the_seeds_five_strings_then_an_operators_pause() -> None:
    assert [outcome.value for outcome in Outcome] == [
        "succeeded",
        "failed",
        "skipped-overlap",
        "skipped-locked",
        "missed",
        "skipped-paused",
    ]
    assert Outcome("skipped-locked") is Outcome.SKIPPED_LOCKED
    assert f"{Outcome.SKIPPED_LOCKED}" == "skipped-locked"


def test_each_outcome_is_a_terminal_step_of_the_same_name() -> None:
    assert all(Step(outcome.value).outcome is outcome for outcome in Outcome)
    assert Step.RUNNING.outcome is None


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (JobTimeoutError("t", job="a.b"), "JOB_TIMEOUT"),
        (JobAbortedError("a", job="a.b"), "JOB_ABORTED"),
        (JobLockUnavailableError("l", job="a.b"), "JOB_LOCK_UNAVAILABLE"),
        (UnknownJobError("u", job="a.b"), "UNKNOWN_JOB"),
        (DomainError("INVOICE_PAID", "paid"), "INVOICE_PAID"),
        (RuntimeError("boom"), "UNEXPECTED_ERROR"),
        (SchedulingError("s"), "UNEXPECTED_ERROR"),
    ],
)
def test_a_failed_run_records_the_code_of_what_was_raised(error: Exception, code: str) -> None:
    assert error_code_of(error) == code


def test_the_code_never_quotes_the_message() -> None:
    assert error_code_of(ValueError("ada@example.test")) == "UNEXPECTED_ERROR"


def test_scheduling_errors_subclass_the_standard_meaning() -> None:
    assert issubclass(JobTimeoutError, TimeoutError)
    assert issubclass(JobLockUnavailableError, ConnectionError)
    assert issubclass(UnknownJobError, LookupError)
    assert issubclass(InvalidJobScheduleError, DeclarationError)
    assert issubclass(InvalidJobSettingsError, ValueError)
    assert InvalidJobSettingsError.code == "INVALID_JOB_SETTINGS"


def test_a_scheduling_error_keeps_the_job_it_is_about() -> None:
    error = JobTimeoutError("the run outlived its timeout", job="billing.export-ledger")

    assert error.job == "billing.export-ledger"
    assert str(error) == "the run outlived its timeout"


def test_a_declaration_error_names_the_job_in_its_message() -> None:
    error = InvalidJobScheduleError("needs a tenant directory", job="billing.close-month")

    assert str(error) == "job 'billing.close-month': needs a tenant directory"
    assert error.problem == "needs a tenant directory"


@pytest.mark.parametrize(
    ("job", "context"),
    [("billing.send-payment-reminders", "billing"), ("a.b.c", "a"), ("beat", "beat")],
)
def test_the_context_of_a_job_is_the_part_before_the_first_dot(job: str, context: str) -> None:
    assert context_of(job) == context
