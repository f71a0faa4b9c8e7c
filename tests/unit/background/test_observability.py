"""BackgroundRecorder and report_failed_background_jobs: one line, two series, one observer."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import pytest

from ddd_celery.background import (
    BACKGROUND_DURATION_HISTOGRAM,
    BACKGROUND_RUNS_COUNTER,
    AttemptsExhaustedError,
    BackgroundJobRun,
    BackgroundRecorder,
    RunStatus,
    report_failed_background_jobs,
)
from ddd_celery.background.observability import COULD_NOT_FOLLOW, BackgroundRunDetail
from ddd_celery.kernel import DomainError, InMemoryErrorReporter, InMemoryMetrics
from tests.unit.background.conftest import START, plus

RUN = BackgroundJobRun(
    job="ledger.compile-statements",
    job_id="job-1",
    context="ledger",
    queue="ledger",
    attempt=2,
    status=RunStatus.SUCCEEDED,
    scheduled_at=START,
    started_at=plus(5),
    duration_ms=12.5,
    correlation_id="corr-1",
    tenant_id="t-1",
)
DETAIL = BackgroundRunDetail(correlation_id="corr-1", tenant_id="t-1")


@pytest.mark.parametrize(
    ("status", "message", "level"),
    [
        (RunStatus.SUCCEEDED, "Background job succeeded", logging.INFO),
        (RunStatus.RETRIED, "Background job failed, retrying", logging.WARNING),
        (RunStatus.DEAD, "Background job dead", logging.ERROR),
        (RunStatus.RELEASED, "Background job released", logging.INFO),
        (RunStatus.INTERRUPTED, "Background job interrupted", logging.WARNING),
    ],
)
def test_each_status_is_logged_once_with_its_message_and_level(
    caplog: pytest.LogCaptureFixture, status: RunStatus, message: str, level: int
) -> None:
    with caplog.at_level(logging.DEBUG, logger="ddd_celery.background"):
        BackgroundRecorder().record(replace(RUN, status=status))

    [record] = caplog.records
    assert (record.name, record.getMessage(), record.levelno) == (
        "ddd_celery.background",
        message,
        level,
    )
    assert record.status == status.value  # type: ignore[attr-defined]


def test_a_log_entry_carries_the_fields_of_the_run(caplog: pytest.LogCaptureFixture) -> None:
    run = replace(
        RUN,
        status=RunStatus.RETRIED,
        error_code="UNEXPECTED_ERROR",
        error_type="KeyError",
        retry_at=plus(1_000),
    )
    with caplog.at_level(logging.DEBUG, logger="ddd_celery.background"):
        BackgroundRecorder().record(run, KeyError("patient 12 of Ana"))

    [record] = caplog.records
    fields = [
        "job",
        "job_id",
        "context",
        "queue",
        "attempt",
        "status",
        "scheduled_at",
        "duration_ms",
        "error_code",
        "error_type",
        "correlation_id",
        "tenant_id",
        "retry_at",
    ]
    assert {field: getattr(record, field) for field in fields} == {
        "job": "ledger.compile-statements",
        "job_id": "job-1",
        "context": "ledger",
        "queue": "ledger",
        "attempt": 2,
        "status": "retried",
        "scheduled_at": "2026-10-01T08:00:00.000Z",
        "duration_ms": 12.5,
        "error_code": "UNEXPECTED_ERROR",
        "error_type": "KeyError",
        "correlation_id": "corr-1",
        "tenant_id": "t-1",
        "retry_at": "2026-10-01T08:00:01.000Z",
    }
    assert "Ana" not in caplog.text
    assert record.exc_info is None


def test_each_run_is_counted_and_timed_with_its_labels() -> None:
    metrics = InMemoryMetrics()
    recorder = BackgroundRecorder(metrics=metrics)

    recorder.record(RUN)
    recorder.record(replace(RUN, status=RunStatus.DEAD, error_code="JOB_TIMEOUT", duration_ms=3.0))

    assert metrics.series(BACKGROUND_RUNS_COUNTER) == [
        {"job": RUN.job, "context": "ledger", "status": "succeeded", "error_code": ""},
        {"job": RUN.job, "context": "ledger", "status": "dead", "error_code": "JOB_TIMEOUT"},
    ]
    assert metrics.observations(BACKGROUND_DURATION_HISTOGRAM, status="dead") == [3.0]
    assert metrics.observations(BACKGROUND_DURATION_HISTOGRAM, status="succeeded") == [12.5]


def test_on_run_gets_the_run_its_error_and_the_detail() -> None:
    seen: list[Any] = []
    error = RuntimeError("x")

    BackgroundRecorder(on_run=lambda *args: seen.append(args)).record(RUN, error)

    assert seen == [(RUN, error, DETAIL)]


def test_an_observer_that_raises_is_logged_and_never_stops_the_worker(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(*args: Any) -> None:
        raise ValueError("observer bug")

    with caplog.at_level(logging.ERROR, logger="ddd_celery.background"):
        BackgroundRecorder(on_run=broken).record(RUN)

    [record] = caplog.records
    assert record.getMessage() == COULD_NOT_FOLLOW
    assert (record.job_id, record.error_type) == ("job-1", "ValueError")  # type: ignore[attr-defined]


@pytest.mark.parametrize("status", [RunStatus.RETRIED, RunStatus.DEAD])
def test_an_unexpected_failure_is_reported_with_its_context(status: RunStatus) -> None:
    reporter = InMemoryErrorReporter()
    error = RuntimeError("x")
    run = replace(RUN, status=status, error_code="UNEXPECTED_ERROR")

    report_failed_background_jobs(reporter)(run, error, DETAIL)

    assert reporter.reported == [
        (
            error,
            {
                "job": RUN.job,
                "job_id": "job-1",
                "attempt": 2,
                "status": status.value,
                "correlation_id": "corr-1",
                "tenant_id": "t-1",
                "error_code": "UNEXPECTED_ERROR",
            },
        )
    ]


def test_a_domain_error_is_not_reported_even_when_it_exhausted_the_attempts() -> None:
    reporter = InMemoryErrorReporter()
    refusal = DomainError("ALREADY_SENT", "sent")
    exhausted = AttemptsExhaustedError("dead", job=RUN.job)
    exhausted.__cause__ = refusal
    observe = report_failed_background_jobs(reporter)

    observe(replace(RUN, status=RunStatus.RETRIED), refusal, DETAIL)
    observe(replace(RUN, status=RunStatus.DEAD), exhausted, DETAIL)

    assert reporter.reported == []


@pytest.mark.parametrize("status", [RunStatus.SUCCEEDED, RunStatus.RELEASED, RunStatus.INTERRUPTED])
def test_what_is_not_a_failure_is_not_reported(status: RunStatus) -> None:
    reporter = InMemoryErrorReporter()

    report_failed_background_jobs(reporter)(replace(RUN, status=status), RuntimeError(), DETAIL)

    assert reporter.reported == []
