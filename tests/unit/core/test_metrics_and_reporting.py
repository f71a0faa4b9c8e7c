"""InMemoryMetrics, the error reporters and DomainError."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest

from ddd_celery.kernel import (
    DomainError,
    InMemoryErrorReporter,
    InMemoryMetrics,
    LoggingErrorReporter,
)
from ddd_celery.scheduling.observability import RunRecorder
from ddd_celery.scheduling.outcomes import JobRun, Outcome


def test_a_counter_adds_per_label_set_and_sums_over_a_label_subset() -> None:
    metrics = InMemoryMetrics()

    metrics.increment("runs_total", {"job": "a.b", "status": "succeeded"})
    metrics.increment("runs_total", {"job": "a.b", "status": "succeeded"})
    metrics.increment("runs_total", {"job": "a.b", "status": "failed"}, 3)

    assert metrics.counter("runs_total", job="a.b", status="succeeded") == 2
    assert metrics.counter("runs_total", job="a.b") == 5
    assert metrics.counter("runs_total", job="c.d") == 0
    assert metrics.counter("unknown") == 0


def test_label_order_does_not_make_another_series() -> None:
    metrics = InMemoryMetrics()

    metrics.increment("runs_total", {"job": "a.b", "status": "ok"})
    metrics.increment("runs_total", {"status": "ok", "job": "a.b"})

    assert metrics.series("runs_total") == [{"job": "a.b", "status": "ok"}]


def test_a_histogram_keeps_every_observation_of_the_matching_series() -> None:
    metrics = InMemoryMetrics()

    metrics.observe("duration_ms", 12.5, {"job": "a.b"})
    metrics.observe("duration_ms", 30.0, {"job": "a.b"})
    metrics.observe("duration_ms", 99.0, {"job": "c.d"})

    assert metrics.observations("duration_ms", job="a.b") == [12.5, 30.0]
    assert sorted(metrics.observations("duration_ms")) == [12.5, 30.0, 99.0]


def test_a_recorder_without_metrics_measures_nothing_and_still_logs_and_observes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[str] = []
    recorder = RunRecorder(on_run=lambda run, error, detail: seen.append(run.outcome.value))

    with caplog.at_level(logging.INFO, logger="ddd_celery.scheduling"):
        recorder.record(
            JobRun("a.b", datetime(2026, 3, 2, tzinfo=UTC), Outcome.SUCCEEDED, context="a")
        )

    assert seen == ["succeeded"]
    assert [r.getMessage() for r in caplog.records] == ["Scheduled job succeeded"]


def test_a_domain_error_keeps_its_code_message_and_a_copy_of_its_details() -> None:
    details = {"invoice": "inv-1"}
    error = DomainError("INVOICE_PAID", "Invoice inv-1 is paid.", details)
    details["invoice"] = "changed"

    assert error.code == "INVOICE_PAID"
    assert str(error) == "Invoice inv-1 is paid."
    assert error.details == {"invoice": "inv-1"}
    assert DomainError("X", "y").details == {}
    assert repr(error) == "DomainError(code='INVOICE_PAID', message='Invoice inv-1 is paid.')"


def test_the_in_memory_reporter_keeps_each_error_with_its_context() -> None:
    reporter = InMemoryErrorReporter()
    error = RuntimeError("boom")

    reporter.report(error, {"job": "a.b"})

    assert reporter.reported == [(error, {"job": "a.b"})]


def test_the_logging_reporter_logs_the_error_with_its_traceback_and_context(
    caplog: pytest.LogCaptureFixture,
) -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError as raised:
        error = raised

    with caplog.at_level(logging.ERROR, logger="ddd_celery.errors"):
        LoggingErrorReporter().report(error, {"job": "a.b"})

    [record] = caplog.records
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None
    assert record.exc_info[1] is error
    assert record.__dict__["job"] == "a.b"
