"""Seed 004, "Lifecycle": start, stop with a grace period, and sleeping at most an hour."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from ddd_celery.kernel import FixedClock, FixedExecutionScope, InMemoryLock, SequentialIdGenerator
from ddd_celery.scheduling.checkpoints import InMemoryJobCheckpoints
from ddd_celery.scheduling.errors import JobAbortedError
from ddd_celery.scheduling.in_process import InProcessJobScheduler
from ddd_celery.testing import ManualJobScheduler, ManualJobTimers

from .conftest import JOB, MINUTE, SECOND, Gate, Recorder, at, plus

HOUR = 60 * MINUTE


def outcomes(scheduler: ManualJobScheduler) -> list[tuple[datetime, str, str | None]]:
    return [(r.scheduled_at, r.outcome.value, r.error_code) for r in scheduler.runs]


async def test_stop_starts_no_new_run(scheduler: ManualJobScheduler) -> None:
    job = Recorder()
    scheduler.register(name=JOB, schedule={"every": "1m"}, run=job)
    await scheduler.start()
    await scheduler.advance(90 * SECOND)

    await scheduler.stop()
    await scheduler.advance(HOUR)

    assert job.due == [at(9, 59), at(10, 0)]
    assert scheduler.describe()[0].next_run_at is None


async def test_stop_waits_for_a_run_in_progress_that_ends_within_the_grace(
    scheduler: ManualJobScheduler, fixed_clock: FixedClock
) -> None:
    job = Gate()
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=job)
    await scheduler.start()
    await scheduler.advance(2 * MINUTE)

    stopping = asyncio.ensure_future(scheduler.stop())
    await scheduler.advance(20 * SECOND)
    assert not stopping.done()
    job.open()
    await stopping

    assert outcomes(scheduler) == [(at(10, 0), "succeeded", None)]
    assert fixed_clock.now() == at(10, 0, 50)


async def test_after_the_grace_stop_aborts_the_runs_in_progress_with_a_job_aborted_error(
    scheduler: ManualJobScheduler, fixed_clock: FixedClock
) -> None:
    job = Gate()
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=job)
    await scheduler.start()
    await scheduler.advance(2 * MINUTE)

    await scheduler.stop()

    assert fixed_clock.now() == plus(at(10, 0, 30), 30 * SECOND)
    [execution] = job.started
    assert isinstance(execution.signal.reason, JobAbortedError)
    assert outcomes(scheduler) == [(at(10, 0), "failed", "JOB_ABORTED")]
    assert scheduler.runs[0].duration_ms == 60_000.0
    assert job.ended == [], "stop returns without waiting for the aborted run"


async def test_the_grace_period_is_an_option(
    build: Callable[..., ManualJobScheduler], fixed_clock: FixedClock
) -> None:
    scheduler = build(grace_ms=5 * SECOND)
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=Gate())
    await scheduler.start()
    await scheduler.advance(2 * MINUTE)

    await scheduler.stop()

    assert fixed_clock.now() == at(10, 0, 35)
    assert outcomes(scheduler) == [(at(10, 0), "failed", "JOB_ABORTED")]


async def test_a_run_that_waited_in_a_queue_is_dropped_and_recorded_missed(
    scheduler: ManualJobScheduler,
) -> None:
    job = Gate()
    scheduler.register(name=JOB, schedule={"every": "1m", "overlap": "queue"}, run=job)
    await scheduler.start()
    await scheduler.advance(90 * SECOND)

    stopping = asyncio.ensure_future(scheduler.stop())
    await scheduler.advance(0)
    job.open()
    await stopping

    assert [e.scheduled_at for e in job.started] == [at(9, 59)]
    assert outcomes(scheduler) == [
        (at(10, 0), "missed", None),
        (at(9, 59), "succeeded", None),
    ]


async def test_an_occurrence_waiting_its_jitter_when_the_scheduler_stops_is_missed(
    fixed_clock: FixedClock,
) -> None:
    timers = ManualJobTimers(fixed_clock)
    seen: list[tuple[datetime, str]] = []
    scheduler = InProcessJobScheduler(
        clock=fixed_clock,
        lock=InMemoryLock(fixed_clock),
        scope=FixedExecutionScope(),
        ids=SequentialIdGenerator(),
        timers=timers,
        random=lambda: 0.5,
        on_run=lambda run, error, detail: seen.append((run.scheduled_at, run.outcome.value)),
    )
    job = Recorder()
    scheduler.register(name=JOB, schedule={"every": "15m", "jitter_ms": MINUTE}, run=job)
    await scheduler.start()
    await timers.advance(90 * SECOND + 10 * SECOND)

    await timers.run_until(scheduler.stop())
    await timers.advance(HOUR)

    assert job.executions == []
    assert seen == [(at(10, 0), "missed")]


async def test_stop_returns_at_once_when_nothing_runs(
    scheduler: ManualJobScheduler, fixed_clock: FixedClock
) -> None:
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=Recorder())
    await scheduler.start()

    await scheduler.stop()

    assert fixed_clock.now() == at(9, 58, 30)


async def test_stopping_a_scheduler_that_never_started_leaves_it_ready_to_start(
    scheduler: ManualJobScheduler,
) -> None:
    job = Recorder()
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=job)

    await scheduler.stop()
    await scheduler.start()
    await scheduler.advance(2 * MINUTE)

    assert job.due == [at(10, 0)]
    await scheduler.stop()


async def test_starting_twice_is_refused(scheduler: ManualJobScheduler) -> None:
    await scheduler.start()

    with pytest.raises(RuntimeError, match="already started"):
        await scheduler.start()

    await scheduler.stop()


async def test_a_stopped_scheduler_can_start_again_from_the_instant_of_the_start(
    scheduler: ManualJobScheduler, fixed_clock: FixedClock
) -> None:
    job = Recorder()
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=job)
    await scheduler.start()
    await scheduler.advance(2 * MINUTE)
    await scheduler.stop()
    fixed_clock.set(at(10, 40))

    await scheduler.start()
    await scheduler.advance(10 * MINUTE)

    assert job.due == [at(10, 0), at(10, 45)]


async def test_a_job_registered_after_start_is_scheduled_at_once(
    scheduler: ManualJobScheduler,
) -> None:
    await scheduler.start()
    await scheduler.advance(30 * SECOND)
    job = Recorder()

    scheduler.register(name=JOB, schedule={"every": "1m"}, run=job)
    await scheduler.advance(MINUTE)

    assert job.due == [at(10, 0)]


async def test_it_sleeps_at_most_an_hour_at_a_time(scheduler: ManualJobScheduler) -> None:
    scheduler.register(name=JOB, schedule={"every": "1d"}, run=Recorder())

    await scheduler.start()
    await scheduler.advance(0)

    assert scheduler.timers.pending == [plus(at(9, 58, 30), HOUR)]


async def test_without_any_job_it_still_wakes_every_hour(scheduler: ManualJobScheduler) -> None:
    await scheduler.start()
    await scheduler.advance(0)

    assert scheduler.timers.pending == [plus(at(9, 58, 30), HOUR)]


async def test_it_computes_again_when_it_wakes_so_a_corrected_clock_is_noticed_within_the_hour(
    scheduler: ManualJobScheduler, fixed_clock: FixedClock
) -> None:
    job = Recorder()
    scheduler.register(name=JOB, schedule={"every": "1d", "missed": "run-once"}, run=job)
    await scheduler.start()
    await scheduler.advance(0)

    fixed_clock.set(datetime(2026, 3, 3, 0, 30, tzinfo=UTC))  # a suspended machine wakes up
    await scheduler.advance(HOUR)

    assert [(e.scheduled_at, e.started_at) for e in job.executions] == [
        (datetime(2026, 3, 3, tzinfo=UTC), datetime(2026, 3, 3, 0, 30, tzinfo=UTC))
    ]


async def test_a_clock_set_back_does_not_run_an_occurrence_twice(
    scheduler: ManualJobScheduler, fixed_clock: FixedClock
) -> None:
    job = Recorder()
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=job)
    await scheduler.start()
    await scheduler.advance(2 * MINUTE)

    fixed_clock.set(at(9, 59))
    await scheduler.advance(20 * MINUTE)

    assert job.due == [at(10, 0), at(10, 15)]


async def test_a_failing_job_does_not_stop_the_scheduler_and_its_next_occurrence_runs_as_usual(
    scheduler: ManualJobScheduler,
) -> None:
    attempts: list[datetime] = []

    async def run(execution: object) -> None:
        attempts.append(getattr(execution, "scheduled_at"))  # noqa: B009
        raise RuntimeError("the mail server is down")

    other = Recorder()
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=run)
    scheduler.register(name="billing.export-ledger", schedule={"every": "15m"}, run=other)
    await scheduler.start()

    await scheduler.advance(32 * MINUTE)

    assert attempts == [at(10, 0), at(10, 15), at(10, 30)], "no retry: the next occurrence is"
    assert other.due == [at(10, 0), at(10, 15), at(10, 30)]
    assert len(scheduler.failures) == 3


async def test_the_grace_is_measured_on_the_clock_of_the_scheduler(
    fixed_clock: FixedClock,
) -> None:
    timers = ManualJobTimers(fixed_clock)
    scheduler = InProcessJobScheduler(
        clock=fixed_clock,
        lock=InMemoryLock(fixed_clock),
        scope=FixedExecutionScope(),
        ids=SequentialIdGenerator(),
        timers=timers,
        grace_ms=10 * SECOND,
    )
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=Gate())
    await scheduler.start()
    await timers.advance(2 * MINUTE)
    stopping = asyncio.ensure_future(scheduler.stop())

    await timers.advance(9 * SECOND)
    assert not stopping.done()
    await timers.advance(timedelta(seconds=1))

    assert stopping.done()
    await stopping


async def test_a_job_with_no_occurrence_before_the_year_9999_is_left_unarmed_and_others_run(
    build: Callable[..., ManualJobScheduler],
) -> None:
    checkpoints = InMemoryJobCheckpoints()
    checkpoints.write("archive.corrupt", datetime(9999, 12, 31, 23, 59, tzinfo=UTC))
    scheduler = build(checkpoints=checkpoints)
    corrupt, healthy = Recorder(), Recorder()
    scheduler.register(name="archive.corrupt", schedule={"every": "15m"}, run=corrupt)
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=healthy)
    await scheduler.start()

    await scheduler.advance(17 * MINUTE)

    assert corrupt.executions == []
    assert healthy.due == [at(10, 0), at(10, 15)]
    assert [d.next_run_at for d in scheduler.describe()] == [None, at(10, 30)]


async def test_a_job_that_cancels_itself_is_recorded_failed_and_the_scheduler_goes_on(
    scheduler: ManualJobScheduler,
) -> None:
    async def run(execution: object) -> None:
        raise asyncio.CancelledError

    scheduler.register(name=JOB, schedule={"every": "15m"}, run=run)
    await scheduler.start()

    await scheduler.advance(17 * MINUTE)

    assert outcomes(scheduler) == [
        (at(10, 0), "failed", "UNEXPECTED_ERROR"),
        (at(10, 15), "failed", "UNEXPECTED_ERROR"),
    ]


async def test_stop_aborts_a_run_now_in_progress_too(scheduler: ManualJobScheduler) -> None:
    job = Gate()
    scheduler.register(name=JOB, schedule={"every": "15m", "enabled": False}, run=job)
    await scheduler.start()
    running = asyncio.ensure_future(scheduler.run_now(JOB))
    await scheduler.advance(0)

    await scheduler.stop()

    assert isinstance(job.started[0].signal.reason, JobAbortedError)
    with pytest.raises(JobAbortedError):
        await running
