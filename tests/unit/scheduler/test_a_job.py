"""Seed 004, "A job": what run(execution) receives, and what the name of a job is used for."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime

import pytest

from ddd_celery.declarations.errors import DeclarationError
from ddd_celery.declarations.execution import JobExecution
from ddd_celery.kernel import (
    FixedClock,
    FixedExecutionScope,
    InMemoryLock,
    InMemoryMetrics,
    SequentialIdGenerator,
    system_actor,
)
from ddd_celery.scheduling.in_process import InProcessJobScheduler
from ddd_celery.scheduling.observability import RUNS_COUNTER
from ddd_celery.testing import ManualJobScheduler, ManualJobTimers

from .conftest import JOB, MINUTE, SECOND, Gate, Recorder, SpyLock, at


async def test_a_run_receives_the_instant_it_was_due_the_instant_it_started_and_attempt_one(
    scheduler: ManualJobScheduler,
) -> None:
    job = Recorder()
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=job)
    await scheduler.start()

    await scheduler.advance(2 * MINUTE)

    [execution] = job.executions
    assert (execution.scheduled_at, execution.started_at, execution.attempt) == (
        at(10, 0),
        at(10, 0),
        1,
    )
    assert execution.tenant_id is None
    assert not execution.signal.aborted


async def test_started_at_is_later_than_scheduled_at_by_the_jitter(
    fixed_clock: FixedClock,
) -> None:
    timers = ManualJobTimers(fixed_clock)
    scheduler = InProcessJobScheduler(
        clock=fixed_clock,
        lock=InMemoryLock(fixed_clock),
        scope=FixedExecutionScope(),
        ids=SequentialIdGenerator(),
        timers=timers,
        random=lambda: 0.25,
    )
    job = Recorder()
    scheduler.register(name=JOB, schedule={"every": "15m", "jitter_ms": 8 * SECOND}, run=job)
    await scheduler.start()

    await timers.advance(2 * MINUTE)

    [execution] = job.executions
    assert (execution.scheduled_at, execution.started_at) == (at(10, 0), at(10, 0, 2))


async def test_started_at_is_later_than_scheduled_at_by_a_queue(
    scheduler: ManualJobScheduler,
) -> None:
    job = Gate()
    scheduler.register(name=JOB, schedule={"every": "1m", "overlap": "queue"}, run=job)
    await scheduler.start()
    await scheduler.advance(30 * SECOND)
    await scheduler.advance(80 * SECOND)

    job.open()
    await scheduler.advance(0)

    queued = job.started[1]
    assert (queued.scheduled_at, queued.started_at) == (at(10, 0), at(10, 0, 20))


async def test_the_signal_of_a_run_is_aborted_when_it_exceeds_its_timeout(
    scheduler: ManualJobScheduler,
) -> None:
    job = Gate()
    scheduler.register(name=JOB, schedule={"every": "15m", "timeout_ms": 10 * SECOND}, run=job)
    await scheduler.start()
    await scheduler.advance(2 * MINUTE)

    await scheduler.advance(10 * SECOND)

    [execution] = job.started
    assert execution.signal.aborted
    assert type(execution.signal.reason).__name__ == "JobTimeoutError"


async def test_an_async_run_is_awaited_on_the_loop(scheduler: ManualJobScheduler) -> None:
    threads: list[int] = []

    async def run(execution: JobExecution) -> None:
        threads.append(threading.get_ident())

    scheduler.register(name=JOB, schedule={"every": "15m"}, run=run)

    await scheduler.run_now(JOB)

    assert threads == [threading.get_ident()]


async def test_a_sync_run_runs_in_a_worker_thread_of_the_in_process_scheduler(
    fixed_clock: FixedClock, fixed_execution_scope: FixedExecutionScope
) -> None:
    scheduler = InProcessJobScheduler(
        clock=fixed_clock,
        lock=InMemoryLock(fixed_clock),
        scope=fixed_execution_scope,
        ids=SequentialIdGenerator(),
    )
    seen: list[tuple[int, str | None]] = []

    def run(execution: JobExecution) -> None:
        context = fixed_execution_scope.current()
        seen.append((threading.get_ident(), context.actor.id if context else None))

    scheduler.register(name=JOB, schedule={"every": "15m"}, run=run)

    await scheduler.run_now(JOB)

    [(thread, actor)] = seen
    assert thread != threading.get_ident()
    assert actor == JOB, "the worker thread sees the execution scope"


async def test_the_name_is_the_actor_the_lock_key_and_the_metrics_label(
    build: Callable[..., ManualJobScheduler],
    fixed_clock: FixedClock,
    fixed_execution_scope: FixedExecutionScope,
    metrics: InMemoryMetrics,
) -> None:
    lock = SpyLock(fixed_clock)
    scheduler = build(lock=lock)
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=Recorder())
    await scheduler.start()

    await scheduler.advance(2 * MINUTE)

    assert fixed_execution_scope.opened[0].actor == system_actor(JOB)
    assert [key for key, _ in lock.acquired] == [f"job:{JOB}:2026-03-02T10:00:00.000Z"]
    assert metrics.series(RUNS_COUNTER)[0]["job"] == JOB


async def test_a_schedule_that_cannot_be_read_is_refused_with_a_declaration_error_naming_the_job(
    scheduler: ManualJobScheduler,
) -> None:
    with pytest.raises(DeclarationError, match=JOB):
        scheduler.register(name=JOB, schedule={"every": 0}, run=Recorder())


async def test_a_tenancy_out_of_its_values_is_refused_naming_the_job(
    scheduler: ManualJobScheduler,
) -> None:
    with pytest.raises(DeclarationError, match=JOB):
        scheduler.register(name=JOB, schedule={"every": "15m"}, run=Recorder(), tenancy="each")


async def test_a_job_that_is_not_callable_is_refused(scheduler: ManualJobScheduler) -> None:
    with pytest.raises(DeclarationError, match=JOB):
        scheduler.register(name=JOB, schedule={"every": "15m"}, run="run")  # type: ignore[arg-type]


async def test_the_run_of_a_scheduled_job_is_passed_scheduled_at_whatever_the_clock_says(
    scheduler: ManualJobScheduler, fixed_clock: FixedClock
) -> None:
    asked: list[tuple[datetime, datetime]] = []

    async def run(execution: JobExecution) -> None:
        asked.append((execution.scheduled_at, fixed_clock.now()))

    scheduler.register(name=JOB, schedule={"every": "15m", "missed": "run-once"}, run=run)
    await scheduler.start()
    fixed_clock.set(at(10, 32))

    await scheduler.advance(0)

    assert asked == [(at(10, 30), at(10, 32))]
