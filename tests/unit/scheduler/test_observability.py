"""Seed 004, "Observability": describe(), and each outcome logged, counted and observed."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import pytest

from ddd_celery.declarations.execution import JobExecution
from ddd_celery.kernel import (
    DomainError,
    FixedClock,
    InMemoryErrorReporter,
    InMemoryLock,
    InMemoryMetrics,
)
from ddd_celery.scheduling.observability import (
    DURATION_HISTOGRAM,
    RUNS_COUNTER,
    RunDetail,
    report_failed_runs,
)
from ddd_celery.scheduling.outcomes import JobRun, Outcome
from ddd_celery.testing import ManualJobScheduler

from .conftest import JOB, MINUTE, SECOND, DownLock, Gate, Recorder, at

SECRET = "invoice inv-42 of ada@example.test"
Observed = list[tuple[JobRun, BaseException | None, RunDetail]]
Scenario = Callable[[Callable[..., ManualJobScheduler], FixedClock], Awaitable[None]]


# -- describe ---------------------------------------------------------------------------------


async def test_describe_answers_name_schedule_enabled_running_next_run_and_last_run(
    scheduler: ManualJobScheduler,
) -> None:
    job = Gate()
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=job)
    scheduler.register(
        name="billing.export-ledger",
        schedule={"cron": "0 7 * * 1-5", "time_zone": "Europe/Paris"},
        run=Recorder(),
    )
    await scheduler.start()
    await scheduler.advance(2 * MINUTE)

    reminders, ledger = scheduler.describe()

    assert (reminders.name, reminders.schedule, reminders.enabled, reminders.running) == (
        JOB,
        "every 15m",
        True,
        True,
    )
    assert (reminders.next_run_at, reminders.last_run) == (at(10, 15), None)
    assert (ledger.name, ledger.schedule, ledger.running, ledger.last_run) == (
        "billing.export-ledger",
        "cron 0 7 * * 1-5 (Europe/Paris)",
        False,
        None,
    )
    assert ledger.next_run_at == datetime.fromisoformat("2026-03-03T06:00:00+00:00")

    job.open()
    await scheduler.advance(0)
    [reminders, _] = scheduler.describe()
    assert not reminders.running
    assert reminders.last_run == scheduler.runs[0]


async def test_describe_before_start_lists_the_jobs_with_no_next_run(
    scheduler: ManualJobScheduler,
) -> None:
    scheduler.register(name=JOB, schedule={"every": "15m", "enabled": False}, run=Recorder())

    [description] = scheduler.describe()

    assert (description.enabled, description.next_run_at, description.last_run) == (
        False,
        None,
        None,
    )


# -- every outcome, three times -----------------------------------------------------------------


async def _succeeded(build: Callable[..., ManualJobScheduler], clock: FixedClock) -> None:
    scheduler = build()
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=Recorder())
    await scheduler.start()
    await scheduler.advance(2 * MINUTE)


async def _failed(build: Callable[..., ManualJobScheduler], clock: FixedClock) -> None:
    async def run(execution: JobExecution) -> None:
        raise DomainError("REMINDER_NOT_DUE", SECRET)

    scheduler = build()
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=run)
    await scheduler.start()
    await scheduler.advance(2 * MINUTE)


async def _skipped_overlap(build: Callable[..., ManualJobScheduler], clock: FixedClock) -> None:
    scheduler = build()
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=Gate())
    await scheduler.start()
    await scheduler.advance(17 * MINUTE)


async def _skipped_locked(build: Callable[..., ManualJobScheduler], clock: FixedClock) -> None:
    lock = InMemoryLock(clock)
    lock.acquire(f"job:{JOB}:2026-03-02T10:00:00.000Z", 10 * MINUTE)  # another instance took it
    scheduler = build(lock=lock)
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=Recorder())
    await scheduler.start()
    await scheduler.advance(2 * MINUTE)


async def _missed(build: Callable[..., ManualJobScheduler], clock: FixedClock) -> None:
    scheduler = build()
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=Recorder())
    await scheduler.start()
    clock.set(at(10, 5))
    await scheduler.advance(0)


SCENARIOS: dict[Outcome, tuple[Scenario, str, int, dict[str, Any]]] = {
    Outcome.SUCCEEDED: (
        _succeeded,
        "Scheduled job succeeded",
        logging.INFO,
        {"duration_ms": 0.0, "correlation_id": "id-1"},
    ),
    Outcome.FAILED: (
        _failed,
        "Scheduled job failed",
        logging.ERROR,
        {
            "duration_ms": 0.0,
            "correlation_id": "id-1",
            "error_code": "REMINDER_NOT_DUE",
            "error_type": "DomainError",
        },
    ),
    Outcome.SKIPPED_OVERLAP: (
        _skipped_overlap,
        "Scheduled job skipped: the previous run is still in progress",
        logging.WARNING,
        {},
    ),
    Outcome.SKIPPED_LOCKED: (
        _skipped_locked,
        "Scheduled job skipped: another instance runs this occurrence",
        logging.DEBUG,
        {},
    ),
    Outcome.MISSED: (_missed, "Scheduled job missed", logging.WARNING, {}),
}
SCHEDULED_AT = {
    Outcome.SUCCEEDED: "2026-03-02T10:00:00.000Z",
    Outcome.FAILED: "2026-03-02T10:00:00.000Z",
    Outcome.SKIPPED_OVERLAP: "2026-03-02T10:15:00.000Z",
    Outcome.SKIPPED_LOCKED: "2026-03-02T10:00:00.000Z",
    Outcome.MISSED: "2026-03-02T10:00:00.000Z",
}


@pytest.fixture
def observed() -> Observed:
    return []


@pytest.fixture
def observing(
    build: Callable[..., ManualJobScheduler], observed: Observed
) -> Callable[..., ManualJobScheduler]:
    def make(**options: Any) -> ManualJobScheduler:
        return build(on_run=lambda *args: observed.append(args), **options)

    return make


@pytest.mark.parametrize("outcome", list(SCENARIOS))
async def test_each_outcome_is_logged_once_with_its_message_level_and_fields(
    outcome: Outcome,
    observing: Callable[..., ManualJobScheduler],
    fixed_clock: FixedClock,
    logs: pytest.LogCaptureFixture,
) -> None:
    scenario, message, level, run_fields = SCENARIOS[outcome]

    await scenario(observing, fixed_clock)

    [record] = [r for r in logs.records if r.getMessage() == message]
    assert record.levelno == level
    fields = {
        key: record.__dict__.get(key)
        for key in (
            "job",
            "context",
            "outcome",
            "scheduled_at",
            "duration_ms",
            "correlation_id",
            "error_code",
            "error_type",
        )
    }
    assert (
        fields
        == {
            "job": JOB,
            "context": "billing",
            "outcome": outcome.value,
            "scheduled_at": SCHEDULED_AT[outcome],
            "duration_ms": None,
            "correlation_id": None,
            "error_code": None,
            "error_type": None,
        }
        | run_fields
    )


@pytest.mark.parametrize("outcome", list(SCENARIOS))
async def test_each_outcome_is_counted_and_each_run_measured(
    outcome: Outcome,
    observing: Callable[..., ManualJobScheduler],
    fixed_clock: FixedClock,
    metrics: InMemoryMetrics,
) -> None:
    scenario, _, _, run_fields = SCENARIOS[outcome]

    await scenario(observing, fixed_clock)

    labels = {
        "job": JOB,
        "context": "billing",
        "status": outcome.value,
        "error_code": run_fields.get("error_code", ""),
    }
    assert labels in metrics.series(RUNS_COUNTER)
    assert metrics.counter(RUNS_COUNTER, **labels) == 1
    ran = "duration_ms" in run_fields
    assert metrics.observations(DURATION_HISTOGRAM, **labels) == ([0.0] if ran else [])


@pytest.mark.parametrize("outcome", list(SCENARIOS))
async def test_each_outcome_is_passed_to_on_run_with_the_error_and_the_correlation_id(
    outcome: Outcome,
    observing: Callable[..., ManualJobScheduler],
    fixed_clock: FixedClock,
    observed: Observed,
) -> None:
    scenario, _, _, run_fields = SCENARIOS[outcome]

    await scenario(observing, fixed_clock)

    [(run, error, detail)] = [o for o in observed if o[0].outcome is outcome]
    assert run.job == JOB
    assert detail.correlation_id == run_fields.get("correlation_id")
    if outcome is Outcome.FAILED:
        assert isinstance(error, DomainError)
        assert error.code == "REMINDER_NOT_DUE"
    else:
        assert error is None


async def test_the_message_of_an_error_is_never_recorded(
    observing: Callable[..., ManualJobScheduler],
    fixed_clock: FixedClock,
    logs: pytest.LogCaptureFixture,
    observed: Observed,
) -> None:
    await _failed(observing, fixed_clock)

    for record in logs.records:
        assert SECRET not in record.getMessage()
        assert all(SECRET not in str(value) for value in record.__dict__.values())
    [(run, _, _)] = observed
    assert SECRET not in repr(run)


@pytest.mark.parametrize(
    ("raised", "code"),
    [
        (DomainError("REMINDER_NOT_DUE", SECRET), "REMINDER_NOT_DUE"),
        (RuntimeError(SECRET), "UNEXPECTED_ERROR"),
        (KeyError(SECRET), "UNEXPECTED_ERROR"),
    ],
)
async def test_the_error_code_is_the_code_of_what_was_raised_or_unexpected_error(
    scheduler: ManualJobScheduler, raised: Exception, code: str
) -> None:
    async def run(execution: JobExecution) -> None:
        raise raised

    scheduler.register(name=JOB, schedule={"every": "15m"}, run=run)
    await scheduler.start()

    await scheduler.advance(2 * MINUTE)

    assert [(r.error_code, r.error_type) for r in scheduler.runs] == [(code, type(raised).__name__)]
    assert scheduler.failures == [raised]


async def test_timeout_abort_and_lock_failures_have_their_own_codes(
    build: Callable[..., ManualJobScheduler], fixed_clock: FixedClock
) -> None:
    timed = build()
    timed.register(name=JOB, schedule={"every": "15m", "timeout_ms": SECOND}, run=Gate())
    aborted = build(lock=InMemoryLock(fixed_clock))
    aborted.register(name=JOB, schedule={"every": "15m"}, run=Gate())
    locked_out = build(lock=DownLock())
    locked_out.register(name=JOB, schedule={"every": "15m"}, run=Recorder())
    for scheduler in (timed, aborted, locked_out):
        await scheduler.start()
    await timed.advance(2 * MINUTE)
    await locked_out.advance(0)
    await aborted.advance(0)
    await aborted.stop()

    assert [r.error_code for r in (*timed.runs, *aborted.runs, *locked_out.runs)] == [
        "JOB_TIMEOUT",
        "JOB_ABORTED",
        "JOB_LOCK_UNAVAILABLE",
    ]


async def test_report_failed_runs_reports_every_failure_but_a_domain_error(
    build: Callable[..., ManualJobScheduler],
) -> None:
    reporter = InMemoryErrorReporter()
    scheduler = build(on_run=report_failed_runs(reporter))
    unexpected = RuntimeError("smtp timed out")

    async def run(execution: JobExecution) -> None:
        if execution.scheduled_at == at(10, 0):
            raise DomainError("REMINDER_NOT_DUE", "not due")
        raise unexpected

    scheduler.register(name=JOB, schedule={"every": "15m"}, run=run)
    await scheduler.start()

    await scheduler.advance(17 * MINUTE)

    assert reporter.reported == [
        (
            unexpected,
            {
                "job": JOB,
                "scheduled_at": "2026-03-02T10:15:00.000Z",
                "correlation_id": "id-2",
                "error_code": "UNEXPECTED_ERROR",
            },
        )
    ]


async def test_an_observer_that_raises_stops_neither_the_scheduler_nor_the_job(
    build: Callable[..., ManualJobScheduler], logs: pytest.LogCaptureFixture
) -> None:
    def observer(run: JobRun, error: BaseException | None, detail: RunDetail) -> None:
        raise RuntimeError("the dashboard is down")

    scheduler = build(on_run=observer)
    job = Recorder()
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=job)
    await scheduler.start()

    await scheduler.advance(17 * MINUTE)

    assert job.due == [at(10, 0), at(10, 15)]
    assert [r.outcome for r in scheduler.runs] == [Outcome.SUCCEEDED, Outcome.SUCCEEDED]


async def test_counting_by_status_shows_a_job_that_stopped_succeeding(
    build: Callable[..., ManualJobScheduler], metrics: InMemoryMetrics
) -> None:
    scheduler = build()
    healthy = True

    async def run(execution: JobExecution) -> None:
        if not healthy:
            raise RuntimeError("the mail server is down")

    scheduler.register(name=JOB, schedule={"every": "15m"}, run=run)
    await scheduler.start()
    await scheduler.advance(2 * MINUTE)
    healthy = False

    await scheduler.advance(30 * MINUTE)

    assert metrics.counter(RUNS_COUNTER, job=JOB, status="succeeded") == 1
    assert metrics.counter(RUNS_COUNTER, job=JOB, status="failed") == 2
