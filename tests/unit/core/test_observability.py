"""RunRecorder and report_failed_runs: every outcome logged, counted and observed."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ddd_celery.kernel import DomainError, InMemoryErrorReporter, InMemoryMetrics, Labels
from ddd_celery.scheduling.errors import JobLockUnavailableError, JobTimeoutError
from ddd_celery.scheduling.last_runs import InMemoryJobLastRuns
from ddd_celery.scheduling.observability import (
    COULD_NOT_FOLLOW,
    DEFAULT_LOGGER,
    DURATION_HISTOGRAM,
    FLUSH_AT,
    RUNS_COUNTER,
    RunDetail,
    RunRecorder,
    report_failed_runs,
)
from ddd_celery.scheduling.outcomes import JobRun, Outcome

JOB = "billing.send-payment-reminders"
SIX = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
SECRET = "invoice inv-42 of ada@example.test"


def a_run(outcome: Outcome, **fields: Any) -> JobRun:
    """A record as a driver writes it: the fields of a run only when the job ran."""
    ran: dict[str, Any] = (
        {"started_at": SIX + timedelta(seconds=2), "duration_ms": 1_250.0, "correlation_id": "id-1"}
        if outcome in (Outcome.SUCCEEDED, Outcome.FAILED)
        else {}
    )
    run = JobRun(job=JOB, context="billing", scheduled_at=SIX, outcome=outcome, **ran)
    return replace(run, **fields)


@pytest.fixture
def logger() -> logging.Logger:
    return logging.getLogger(DEFAULT_LOGGER)


@pytest.mark.parametrize(
    ("outcome", "message", "level"),
    [
        (Outcome.SUCCEEDED, "Scheduled job succeeded", logging.INFO),
        (Outcome.FAILED, "Scheduled job failed", logging.ERROR),
        (
            Outcome.SKIPPED_OVERLAP,
            "Scheduled job skipped: the previous run is still in progress",
            logging.WARNING,
        ),
        (
            Outcome.SKIPPED_LOCKED,
            "Scheduled job skipped: another instance runs this occurrence",
            logging.DEBUG,
        ),
        (Outcome.MISSED, "Scheduled job missed", logging.WARNING),
    ],
)
def test_each_outcome_is_one_log_entry_with_the_seeds_message_and_level(
    caplog: pytest.LogCaptureFixture, outcome: Outcome, message: str, level: int
) -> None:
    with caplog.at_level(logging.DEBUG, logger=DEFAULT_LOGGER):
        RunRecorder().record(a_run(outcome))

    assert [(r.name, r.getMessage(), r.levelno) for r in caplog.records] == [
        (DEFAULT_LOGGER, message, level)
    ]


def test_a_run_is_logged_with_its_structured_fields(caplog: pytest.LogCaptureFixture) -> None:
    run = a_run(Outcome.SUCCEEDED, tenant_id="acme")

    with caplog.at_level(logging.INFO, logger=DEFAULT_LOGGER):
        RunRecorder().record(run)

    [record] = caplog.records
    fields = record.__dict__
    assert fields["job"] == JOB
    assert fields["context"] == "billing"
    assert fields["outcome"] == "succeeded"
    assert fields["scheduled_at"] == "2026-03-02T06:00:00.000Z"
    assert fields["duration_ms"] == 1_250.0
    assert fields["correlation_id"] == "id-1"
    assert fields["tenant_id"] == "acme"
    assert "error_code" not in fields
    assert "error_type" not in fields


def test_an_occurrence_that_did_not_run_is_logged_without_run_fields(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG, logger=DEFAULT_LOGGER):
        RunRecorder().record(a_run(Outcome.MISSED))

    fields = caplog.records[0].__dict__
    assert fields["outcome"] == "missed"
    assert fields["scheduled_at"] == "2026-03-02T06:00:00.000Z"
    assert not {"duration_ms", "correlation_id", "error_code", "tenant_id"} & set(fields)


def test_a_failure_is_logged_with_its_code_and_type_but_never_its_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    error = ValueError(SECRET)
    run = a_run(Outcome.FAILED, error_code="UNEXPECTED_ERROR", error_type="ValueError")

    with caplog.at_level(logging.DEBUG):
        RunRecorder(on_run=lambda *_: None).record(run, error)

    [record] = caplog.records
    assert record.__dict__["error_code"] == "UNEXPECTED_ERROR"
    assert record.__dict__["error_type"] == "ValueError"
    assert record.exc_info is None
    assert SECRET not in caplog.text
    assert all(SECRET not in str(value) for value in record.__dict__.values())


def test_each_outcome_is_counted_with_job_context_status_and_error_code() -> None:
    metrics = InMemoryMetrics()
    recorder = RunRecorder(metrics=metrics)

    recorder.record(a_run(Outcome.SUCCEEDED))
    recorder.record(a_run(Outcome.FAILED, error_code="JOB_TIMEOUT", error_type="JobTimeoutError"))
    recorder.record(a_run(Outcome.SKIPPED_LOCKED))

    assert sorted(metrics.series(RUNS_COUNTER), key=lambda labels: labels["status"]) == [
        {"job": JOB, "context": "billing", "status": "failed", "error_code": "JOB_TIMEOUT"},
        {"job": JOB, "context": "billing", "status": "skipped-locked", "error_code": ""},
        {"job": JOB, "context": "billing", "status": "succeeded", "error_code": ""},
    ]
    assert metrics.counter(RUNS_COUNTER, job=JOB) == 3


def test_only_a_run_observes_its_duration_in_milliseconds() -> None:
    metrics = InMemoryMetrics()
    recorder = RunRecorder(metrics=metrics)

    recorder.record(a_run(Outcome.SUCCEEDED))
    recorder.record(a_run(Outcome.MISSED))
    recorder.record(a_run(Outcome.SKIPPED_OVERLAP))

    assert metrics.observations(DURATION_HISTOGRAM) == [1_250.0]
    assert metrics.observations(DURATION_HISTOGRAM, status="succeeded", error_code="") == [1_250.0]


def test_on_run_gets_the_record_the_error_and_the_correlation_id() -> None:
    seen: list[tuple[JobRun, BaseException | None, RunDetail]] = []
    error = JobTimeoutError("too long", job=JOB)
    run = a_run(Outcome.FAILED, error_code="JOB_TIMEOUT", error_type="JobTimeoutError")

    RunRecorder(on_run=lambda *args: seen.append(args)).record(run, error)

    assert seen == [(run, error, RunDetail("id-1"))]


def test_an_observer_that_raises_is_logged_and_does_not_stop_the_recording(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = InMemoryMetrics()

    def broken(run: JobRun, error: BaseException | None, detail: RunDetail) -> None:
        raise RuntimeError("observer down")

    with caplog.at_level(logging.DEBUG, logger=DEFAULT_LOGGER):
        RunRecorder(metrics=metrics, on_run=broken).record(a_run(Outcome.SUCCEEDED))

    assert [(r.getMessage(), r.levelno) for r in caplog.records] == [
        ("Scheduled job succeeded", logging.INFO),
        (COULD_NOT_FOLLOW, logging.ERROR),
    ]
    assert caplog.records[1].__dict__["job"] == JOB
    assert metrics.counter(RUNS_COUNTER) == 1


def test_metrics_that_raise_do_not_stop_the_observer() -> None:
    class BrokenMetrics(InMemoryMetrics):
        def increment(self, name: str, labels: Labels, value: float = 1.0) -> None:
            raise ConnectionError("statsd down")

    seen: list[JobRun] = []

    RunRecorder(metrics=BrokenMetrics(), on_run=lambda run, *_: seen.append(run)).record(
        a_run(Outcome.SUCCEEDED)
    )

    assert [run.outcome for run in seen] == [Outcome.SUCCEEDED]


@pytest.mark.parametrize(
    "outcome",
    [Outcome.SUCCEEDED, Outcome.FAILED, Outcome.SKIPPED_OVERLAP, Outcome.MISSED],
)
def test_the_last_runs_keep_every_record_of_an_occurrence_this_instance_handled(
    outcome: Outcome,
) -> None:
    last_runs = InMemoryJobLastRuns()
    run = a_run(outcome)

    RunRecorder(last_runs=last_runs).record(run)

    assert last_runs.read(JOB) == run


def test_the_last_runs_never_keep_a_skip_for_an_occurrence_another_instance_runs() -> None:
    last_runs = InMemoryJobLastRuns()
    ran = a_run(Outcome.SUCCEEDED)
    recorder = RunRecorder(last_runs=last_runs)

    recorder.record(a_run(Outcome.SKIPPED_LOCKED))
    assert last_runs.read(JOB) is None
    recorder.record(ran)
    recorder.record(a_run(Outcome.SKIPPED_LOCKED))
    assert last_runs.read(JOB) == ran


def test_on_run_finds_the_record_already_in_the_last_runs() -> None:
    last_runs = InMemoryJobLastRuns()
    seen: list[JobRun | None] = []

    RunRecorder(
        last_runs=last_runs, on_run=lambda run, *_: seen.append(last_runs.read(JOB))
    ).record(a_run(Outcome.SUCCEEDED))

    assert seen == [a_run(Outcome.SUCCEEDED)]


def test_last_runs_that_cannot_be_asked_are_logged_and_stop_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class DownLastRuns(InMemoryJobLastRuns):
        def write(self, run: JobRun) -> None:
            raise ConnectionError(SECRET)

    metrics = InMemoryMetrics()
    seen: list[JobRun] = []
    recorder = RunRecorder(
        metrics=metrics, on_run=lambda run, *_: seen.append(run), last_runs=DownLastRuns()
    )

    with caplog.at_level(logging.DEBUG, logger=DEFAULT_LOGGER):
        recorder.record(a_run(Outcome.SUCCEEDED))

    assert [(r.getMessage(), r.levelno) for r in caplog.records] == [
        ("Scheduled job succeeded", logging.INFO),
        (COULD_NOT_FOLLOW, logging.ERROR),
    ]
    assert caplog.records[1].__dict__["operation"] == "write the last run"
    assert caplog.records[1].__dict__["error_type"] == "ConnectionError"
    assert SECRET not in caplog.text
    assert metrics.counter(RUNS_COUNTER) == 1
    assert seen == [a_run(Outcome.SUCCEEDED)]


def test_what_goes_wrong_around_the_runs_is_logged_at_error_without_its_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG, logger=DEFAULT_LOGGER):
        RunRecorder().could_not_follow(JOB, ConnectionError(SECRET), what="write checkpoint")

    [record] = caplog.records
    assert (record.getMessage(), record.levelno) == (
        "Scheduled job could not be followed",
        logging.ERROR,
    )
    assert record.__dict__["job"] == JOB
    assert record.__dict__["context"] == "billing"
    assert record.__dict__["error_type"] == "ConnectionError"
    assert SECRET not in caplog.text


def test_report_failed_runs_reports_an_unexpected_failure_with_its_context() -> None:
    reporter = InMemoryErrorReporter()
    error = RuntimeError("boom")
    run = a_run(Outcome.FAILED, error_code="UNEXPECTED_ERROR", error_type="RuntimeError")

    report_failed_runs(reporter)(run, error, RunDetail("id-1"))

    assert reporter.reported == [
        (
            error,
            {
                "job": JOB,
                "scheduled_at": "2026-03-02T06:00:00.000Z",
                "correlation_id": "id-1",
                "error_code": "UNEXPECTED_ERROR",
            },
        )
    ]


def test_report_failed_runs_reports_a_timeout_and_a_lock_store_down() -> None:
    reporter = InMemoryErrorReporter()
    observe = report_failed_runs(reporter)
    timeout, down = JobTimeoutError("t", job=JOB), JobLockUnavailableError("d", job=JOB)

    observe(a_run(Outcome.FAILED, error_code="JOB_TIMEOUT"), timeout, RunDetail("id-1"))
    observe(a_run(Outcome.FAILED, error_code="JOB_LOCK_UNAVAILABLE"), down, RunDetail(None))

    assert [error for error, _ in reporter.reported] == [timeout, down]


def test_report_failed_runs_does_not_report_a_domain_error() -> None:
    reporter = InMemoryErrorReporter()
    error = DomainError("INVOICE_PAID", "paid")

    report_failed_runs(reporter)(
        a_run(Outcome.FAILED, error_code="INVOICE_PAID"), error, RunDetail("id-1")
    )

    assert reporter.reported == []


@pytest.mark.parametrize(
    "outcome",
    [Outcome.SUCCEEDED, Outcome.SKIPPED_OVERLAP, Outcome.SKIPPED_LOCKED, Outcome.MISSED],
)
def test_report_failed_runs_does_not_report_what_did_not_fail(outcome: Outcome) -> None:
    reporter = InMemoryErrorReporter()

    report_failed_runs(reporter)(a_run(outcome), RuntimeError("x"), RunDetail(None))

    assert reporter.reported == []


def test_report_failed_runs_through_the_recorder_reports_once() -> None:
    reporter = InMemoryErrorReporter()
    error = RuntimeError("boom")

    RunRecorder(on_run=report_failed_runs(reporter)).record(
        a_run(Outcome.FAILED, error_code="UNEXPECTED_ERROR"), error
    )

    assert [reported for reported, _ in reporter.reported] == [error]


class CountingLastRuns(InMemoryJobLastRuns):
    """Last runs that note each call: a write of one record, or of a batch of how many."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []

    def write(self, run: JobRun) -> None:
        self.calls.append(1)
        super().write_many([run])

    def write_many(self, runs: Sequence[JobRun]) -> None:
        self.calls.append(len(runs))
        super().write_many(runs)


def test_a_batch_logs_and_counts_each_record_at_once_and_keeps_them_in_one_write(
    caplog: pytest.LogCaptureFixture,
) -> None:
    last_runs, metrics = CountingLastRuns(), InMemoryMetrics()
    seen: list[JobRun | None] = []
    recorder = RunRecorder(
        metrics=metrics,
        last_runs=last_runs,
        on_run=lambda run, *_: seen.append(last_runs.read(run.job)),
    )
    runs = [a_run(Outcome.SKIPPED_OVERLAP, job=f"{JOB}:{index}") for index in range(3)]

    with caplog.at_level(logging.DEBUG, logger=DEFAULT_LOGGER), recorder.batch():
        for run in runs:
            assert recorder.record(run) is None
        recorder.record(a_run(Outcome.SKIPPED_LOCKED))
        assert last_runs.calls == []
        assert seen == []
        assert len(caplog.records) == 4
        assert metrics.counter(RUNS_COUNTER) == 4

    assert last_runs.calls == [3]
    assert seen == [*runs, None]  # each observer finds its record already kept
    assert last_runs.read(JOB) is None  # skipped-locked is another instance's


def test_a_batch_writes_a_thousand_records_at_a_time() -> None:
    last_runs = CountingLastRuns()
    recorder = RunRecorder(last_runs=last_runs)

    with recorder.batch():
        for index in range(FLUSH_AT + 5):
            recorder.record(a_run(Outcome.MISSED, job=f"{JOB}:{index}"))

    assert last_runs.calls == [FLUSH_AT, 5]


def test_a_batch_inside_a_batch_joins_it_and_a_stop_still_writes_the_records() -> None:
    last_runs = CountingLastRuns()
    recorder = RunRecorder(last_runs=last_runs)

    def stopped_in_a_batch() -> None:
        with recorder.batch():
            recorder.record(a_run(Outcome.MISSED))
            with recorder.batch():
                recorder.record(a_run(Outcome.MISSED, job=f"{JOB}:eu"))
            raise SystemExit(0)

    with pytest.raises(SystemExit):
        stopped_in_a_batch()

    assert last_runs.calls == [2]


def test_a_batch_the_last_runs_cannot_keep_logs_each_record_and_observes_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class DownLastRuns(InMemoryJobLastRuns):
        def write_many(self, runs: Sequence[JobRun]) -> None:
            raise ConnectionError(SECRET)

    seen: list[JobRun] = []
    recorder = RunRecorder(on_run=lambda run, *_: seen.append(run), last_runs=DownLastRuns())
    runs = [a_run(Outcome.MISSED, job=f"{JOB}:{index}") for index in range(2)]

    with caplog.at_level(logging.ERROR, logger=DEFAULT_LOGGER), recorder.batch():
        for run in runs:
            recorder.record(run)

    assert [(r.getMessage(), r.__dict__["job"]) for r in caplog.records] == [
        (COULD_NOT_FOLLOW, runs[0].job),
        (COULD_NOT_FOLLOW, runs[1].job),
    ]
    assert SECRET not in caplog.text
    assert seen == runs


def test_a_record_refused_in_a_batch_costs_only_itself(caplog: pytest.LogCaptureFixture) -> None:
    last_runs = InMemoryJobLastRuns()
    recorder = RunRecorder(last_runs=last_runs)
    naive = a_run(Outcome.MISSED, job=f"{JOB}:naive", scheduled_at=SIX.replace(tzinfo=None))

    with caplog.at_level(logging.ERROR, logger=DEFAULT_LOGGER), recorder.batch():
        recorder.record(a_run(Outcome.MISSED))
        recorder.record(naive)

    assert last_runs.read(JOB) == a_run(Outcome.MISSED)
    assert [r.__dict__["job"] for r in caplog.records] == [naive.job]


def test_records_of_another_thread_are_kept_at_once_during_a_batch() -> None:
    """Beat's system jobs record on threads of their own while a burst is sent."""
    last_runs = CountingLastRuns()
    recorder = RunRecorder(last_runs=last_runs)

    with recorder.batch():
        thread = threading.Thread(target=recorder.record, args=(a_run(Outcome.SUCCEEDED),))
        thread.start()
        thread.join()
        assert last_runs.calls == [1]


@pytest.fixture
def info_logger(logger: logging.Logger) -> Iterator[logging.Logger]:
    """The recorder's logger at INFO, as beat runs under ``-l INFO``; set back afterwards
    (``setLevel``, which empties logging's cache of levels)."""
    before = logger.level
    logger.setLevel(logging.INFO)
    yield logger
    logger.setLevel(before)


def test_a_record_nobody_hears_is_said_so_and_each_listener_hears_it(
    info_logger: logging.Logger,
) -> None:
    """Without a logger enabled for its level, metrics, ``on_run`` or last runs that keep it,
    a record reaches nobody (beat then builds none: a burst's ``skipped-locked``)."""
    logger = info_logger
    alone = RunRecorder(logger=logger)
    assert alone.heard(Outcome.SKIPPED_LOCKED) is False
    assert alone.heard(Outcome.SKIPPED_OVERLAP) is True, "a WARNING is logged"
    assert RunRecorder(logger=logger, metrics=InMemoryMetrics()).heard(Outcome.SKIPPED_LOCKED)
    assert RunRecorder(logger=logger, on_run=lambda *_: None).heard(Outcome.SKIPPED_LOCKED)
    kept = RunRecorder(logger=logger, last_runs=InMemoryJobLastRuns())
    assert kept.heard(Outcome.SKIPPED_LOCKED) is False, "a skip for another's is never kept"
    assert kept.heard(Outcome.MISSED) is True
    logger.setLevel(logging.DEBUG)
    assert alone.heard(Outcome.SKIPPED_LOCKED) is True
