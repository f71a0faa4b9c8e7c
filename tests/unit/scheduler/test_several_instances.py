"""Seeds 004 and 000, "Several instances": the lock of an occurrence and what it promises."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from ddd_celery.declarations.execution import JobExecution
from ddd_celery.kernel import (
    FixedClock,
    FixedExecutionScope,
    InMemoryLock,
    SequentialIdGenerator,
)
from ddd_celery.scheduling.errors import JobLockUnavailableError
from ddd_celery.scheduling.last_runs import InMemoryJobLastRuns
from ddd_celery.scheduling.outcomes import Outcome
from ddd_celery.scheduling.run_state import Claim, InMemoryJobRunState
from ddd_celery.testing import ManualJobScheduler

from .conftest import JOB, MINUTE, SECOND, DownLock, Gate, Recorder, SpyLock, at


async def test_runs_each_occurrence_on_one_instance_only() -> None:
    # the seed's own spec, literally: two schedulers on the same clock and the same lock
    clock = FixedClock(datetime(2026, 3, 2, 5, 58, tzinfo=UTC))
    lock = InMemoryLock(clock)
    instances = [
        ManualJobScheduler(
            clock=clock, lock=lock, scope=FixedExecutionScope(), ids=SequentialIdGenerator()
        )
        for _ in range(2)
    ]
    ran: list[datetime] = []

    for scheduler in instances:

        async def run(execution: JobExecution) -> None:
            ran.append(execution.scheduled_at)

        scheduler.register(
            name="notifications.send-reminders",
            schedule={"cron": "0 7 * * *", "time_zone": "Europe/Paris"},
            run=run,
        )
        await scheduler.start()

    first, second = instances
    await first.advance(2 * 60_000)  # 07:00 in Paris is 06:00 UTC in March
    await second.advance(0)

    assert ran == [datetime(2026, 3, 2, 6, 0, tzinfo=UTC)]
    assert [run.outcome for run in second.runs] == ["skipped-locked"]


async def test_the_shared_last_run_is_the_instance_that_ran_not_the_one_that_skipped() -> None:
    clock = FixedClock(datetime(2026, 3, 2, 5, 58, tzinfo=UTC))
    lock, last_runs = InMemoryLock(clock), InMemoryJobLastRuns()
    instances = [
        ManualJobScheduler(
            clock=clock,
            lock=lock,
            scope=FixedExecutionScope(),
            ids=SequentialIdGenerator(),
            last_runs=last_runs,
        )
        for _ in range(2)
    ]
    for scheduler in instances:
        scheduler.register(name=JOB, schedule={"every": "15m"}, run=Recorder())
        await scheduler.start()

    first, second = instances
    await first.advance(2 * MINUTE)
    await second.advance(0)

    shared = last_runs.read(JOB)
    assert shared is not None
    assert (shared.outcome, shared.scheduled_at) == (Outcome.SUCCEEDED, at(6, 0))
    # describe() stays the view of one instance: the second saw its skip
    [described] = second.describe()
    assert described.last_run is not None
    assert described.last_run.outcome is Outcome.SKIPPED_LOCKED


async def test_the_lock_key_is_the_job_name_and_the_due_instant_in_iso_8601(
    build: Callable[..., ManualJobScheduler], fixed_clock: FixedClock
) -> None:
    lock = SpyLock(fixed_clock)
    scheduler = build(lock=lock)
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=Recorder())
    await scheduler.start()

    await scheduler.advance(17 * MINUTE)

    assert [key for key, _ in lock.acquired] == [
        "job:billing.send-payment-reminders:2026-03-02T10:00:00.000Z",
        "job:billing.send-payment-reminders:2026-03-02T10:15:00.000Z",
    ]


async def test_the_lock_lives_for_the_lock_ttl_plus_jitter_and_late_after_ms(
    build: Callable[..., ManualJobScheduler], fixed_clock: FixedClock
) -> None:
    lock = SpyLock(fixed_clock)
    scheduler = build(lock=lock, lock_ttl_ms=5 * MINUTE, late_after_ms=30 * SECOND)
    scheduler.register(name=JOB, schedule={"every": "15m", "jitter_ms": 2 * SECOND}, run=Recorder())
    scheduler.register(
        name="billing.export-ledger",
        schedule={"every": "15m", "timeout_ms": 45 * SECOND},
        run=Recorder(),
    )
    await scheduler.start()

    await scheduler.advance(2 * MINUTE)

    assert sorted(ttl for _, ttl in lock.acquired) == [
        45 * SECOND + 30 * SECOND,
        5 * MINUTE + 2 * SECOND + 30 * SECOND,
    ]


async def test_the_default_lock_ttl_is_fifteen_minutes_for_a_job_without_timeout(
    build: Callable[..., ManualJobScheduler], fixed_clock: FixedClock
) -> None:
    lock = SpyLock(fixed_clock)
    scheduler = build(lock=lock)
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=Recorder())
    await scheduler.start()

    await scheduler.advance(2 * MINUTE)

    assert [ttl for _, ttl in lock.acquired] == [15 * MINUTE + 60 * SECOND]


async def test_the_lock_is_not_released_when_the_run_ends_so_a_later_instance_is_still_skipped(
    build: Callable[..., ManualJobScheduler], fixed_clock: FixedClock
) -> None:
    lock = InMemoryLock(fixed_clock)
    first, second = build(lock=lock), build(lock=lock)
    job = Recorder()
    for instance in (first, second):
        instance.register(name=JOB, schedule={"every": "15m"}, run=job)
        await instance.start()

    await first.advance(2 * MINUTE)
    await second.advance(0)

    assert job.due == [at(10, 0)]
    assert [run.outcome for run in first.runs] == [Outcome.SUCCEEDED]
    assert [run.outcome for run in second.runs] == [Outcome.SKIPPED_LOCKED]


async def test_the_lock_is_released_when_this_instance_handles_the_next_occurrence(
    build: Callable[..., ManualJobScheduler], fixed_clock: FixedClock
) -> None:
    lock = SpyLock(fixed_clock)
    scheduler = build(lock=lock)
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=Recorder())
    await scheduler.start()

    await scheduler.advance(2 * MINUTE)
    assert lock.released == []

    await scheduler.advance(15 * MINUTE)
    assert lock.released == ["job:billing.send-payment-reminders:2026-03-02T10:00:00.000Z"]


async def test_a_lock_is_kept_while_a_lagging_instance_could_still_reach_its_occurrence(
    build: Callable[..., ManualJobScheduler], fixed_clock: FixedClock
) -> None:
    # every second: the next occurrences come long before late_after_ms has passed, so releasing
    # at the next occurrence would let the lagging instance run these occurrences again
    lock = SpyLock(fixed_clock)
    first, second = build(lock=lock), build(lock=lock)
    job = Recorder()
    for instance in (first, second):
        instance.register(name=JOB, schedule={"every": "1s"}, run=job)
        await instance.start()

    await first.advance(5 * SECOND)
    await second.advance(0)

    assert len(job.due) == 5
    assert len(set(job.due)) == 5, "no occurrence ran twice"
    assert lock.released == []
    assert {run.outcome for run in second.runs} == {Outcome.SKIPPED_LOCKED}


async def test_a_lock_is_released_once_no_instance_can_reach_its_occurrence_on_time(
    build: Callable[..., ManualJobScheduler], fixed_clock: FixedClock
) -> None:
    lock = SpyLock(fixed_clock)
    scheduler = build(lock=lock)
    scheduler.register(name=JOB, schedule={"every": "1s"}, run=Recorder())
    await scheduler.start()

    # from 09:58:30, the first instant is 09:58:31: its lock is kept 60 s (late_after_ms) after it
    await scheduler.advance(61 * SECOND)
    assert lock.released == []

    await scheduler.advance(1 * SECOND)
    assert lock.released == ["job:billing.send-payment-reminders:2026-03-02T09:58:31.000Z"]


async def test_an_instance_whose_timer_fires_after_the_lock_expired_runs_the_occurrence_again(
    build: Callable[..., ManualJobScheduler], fixed_clock: FixedClock
) -> None:
    lock = InMemoryLock(fixed_clock)
    first, second = build(lock=lock, lock_ttl_ms=MINUTE), build(lock=lock, late_after_ms=MINUTE)
    job = Recorder()
    for instance in (first, second):
        instance.register(name=JOB, schedule={"every": "15m", "missed": "run-once"}, run=job)
        await instance.start()

    await first.advance(2 * MINUTE + 30 * SECOND)
    fixed_clock.set(at(10, 2, 30))
    await second.advance(0)

    assert job.due == [at(10, 0), at(10, 0)], "at most once is best effort"


async def test_a_lock_store_that_cannot_be_reached_fails_the_occurrence_and_runs_nothing(
    build: Callable[..., ManualJobScheduler], logs: pytest.LogCaptureFixture
) -> None:
    scheduler = build(lock=DownLock())
    job = Recorder()
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=job)
    await scheduler.start()

    await scheduler.advance(17 * MINUTE)

    assert job.executions == []
    assert [(r.outcome, r.error_code) for r in scheduler.runs] == [
        (Outcome.FAILED, "JOB_LOCK_UNAVAILABLE"),
        (Outcome.FAILED, "JOB_LOCK_UNAVAILABLE"),
    ]
    [error, _] = scheduler.failures
    assert isinstance(error, JobLockUnavailableError)
    assert isinstance(error.__cause__, ConnectionError)
    [failed, *_] = [r for r in logs.records if r.getMessage() == "Scheduled job failed"]
    assert failed.levelno == logging.ERROR
    assert failed.__dict__["error_code"] == "JOB_LOCK_UNAVAILABLE"


class _DownRunState(InMemoryJobRunState):
    def claim(self, job: str, scheduled_at: datetime, *, queue: bool, ttl_ms: int) -> Claim:
        raise ConnectionError("redis://10.0.0.7:6379 refused the connection")


async def test_a_run_state_that_cannot_be_reached_fails_the_occurrence_like_the_lock(
    build: Callable[..., ManualJobScheduler], fixed_clock: FixedClock
) -> None:
    scheduler = build(run_state=_DownRunState(fixed_clock))
    job = Recorder()
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=job)
    await scheduler.start()

    await scheduler.advance(2 * MINUTE)

    assert job.executions == []
    assert [(r.outcome, r.error_code) for r in scheduler.runs] == [
        (Outcome.FAILED, "JOB_LOCK_UNAVAILABLE")
    ]


async def test_run_now_takes_no_lock(
    build: Callable[..., ManualJobScheduler], fixed_clock: FixedClock
) -> None:
    lock = SpyLock(fixed_clock)
    scheduler = build(lock=lock)
    job = Recorder()
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=job)

    await scheduler.run_now(JOB)

    assert lock.acquired == []
    assert len(job.executions) == 1


async def test_a_lock_held_by_another_instance_is_skipped_locked_even_while_its_run_is_in_progress(
    build: Callable[..., ManualJobScheduler], fixed_clock: FixedClock
) -> None:
    lock = InMemoryLock(fixed_clock)
    first, second = build(lock=lock), build(lock=lock)
    job = Gate()
    for instance in (first, second):
        instance.register(name=JOB, schedule={"every": "15m"}, run=job)
        await instance.start()

    await first.advance(2 * MINUTE)
    await second.advance(0)

    assert [e.scheduled_at for e in job.started] == [at(10, 0)]
    assert [r.outcome for r in second.runs] == [Outcome.SKIPPED_LOCKED]
    assert first.runs == []
