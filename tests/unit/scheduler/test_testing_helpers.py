"""Seed 004, "Testing": the manual scheduler and its timers, for specs about time."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from ddd_celery.declarations.execution import JobExecution
from ddd_celery.kernel import (
    DomainError,
    FixedClock,
    FixedExecutionScope,
    InMemoryLock,
    SequentialIdGenerator,
)
from ddd_celery.scheduling.checkpoints import InMemoryJobCheckpoints
from ddd_celery.scheduling.in_process import InProcessJobScheduler
from ddd_celery.scheduling.outcomes import Outcome
from ddd_celery.testing import ManualJobScheduler, ManualJobTimers, manual

from .conftest import JOB, MINUTE, SECOND, Gate, Recorder, at


async def test_the_seeds_spec_advances_32_minutes_and_sees_three_runs() -> None:
    async def run(execution: JobExecution) -> None:
        return None

    clock = FixedClock(datetime(2026, 3, 2, 9, 58, 30, tzinfo=UTC))
    scheduler = ManualJobScheduler(
        clock=clock,
        lock=InMemoryLock(clock),
        scope=FixedExecutionScope(),
        ids=SequentialIdGenerator(),
    )
    scheduler.register(name="billing.send-payment-reminders", schedule={"every": "15m"}, run=run)
    await scheduler.start()

    await scheduler.advance(32 * 60_000)

    assert [run.scheduled_at.isoformat() for run in scheduler.runs] == [
        "2026-03-02T10:00:00+00:00",
        "2026-03-02T10:15:00+00:00",
        "2026-03-02T10:30:00+00:00",
    ]


async def test_advance_fires_each_timer_at_its_instant_in_order(
    scheduler: ManualJobScheduler, fixed_clock: FixedClock
) -> None:
    seen: list[tuple[str, datetime, datetime]] = []

    def job(name: str) -> Callable[[JobExecution], None]:
        return lambda execution: seen.append((name, execution.scheduled_at, fixed_clock.now()))

    scheduler.register(name="billing.every-10m", schedule={"every": "10m"}, run=job("10m"))
    scheduler.register(name="billing.every-15m", schedule={"every": "15m"}, run=job("15m"))
    await scheduler.start()

    await scheduler.advance(32 * MINUTE)

    assert seen == [
        ("10m", at(10, 0), at(10, 0)),
        ("15m", at(10, 0), at(10, 0)),
        ("10m", at(10, 10), at(10, 10)),
        ("15m", at(10, 15), at(10, 15)),
        ("10m", at(10, 20), at(10, 20)),
        ("10m", at(10, 30), at(10, 30)),
        ("15m", at(10, 30), at(10, 30)),
    ]
    assert fixed_clock.now() == at(10, 30, 30)


async def test_when_advance_returns_a_job_that_waits_on_the_scheduler_alone_has_ended(
    scheduler: ManualJobScheduler,
) -> None:
    steps: list[int] = []

    async def step(n: int) -> int:
        await asyncio.sleep(0)
        return n

    async def run(execution: JobExecution) -> None:
        queue: asyncio.Queue[int] = asyncio.Queue()
        producer = asyncio.ensure_future(asyncio.gather(*(queue.put(n) for n in range(50))))
        for _ in range(50):
            steps.append(await step(await queue.get()))
        await producer

    scheduler.register(name=JOB, schedule={"every": "15m"}, run=run)
    await scheduler.start()

    await scheduler.advance(2 * MINUTE)

    assert steps == list(range(50))
    assert [r.outcome for r in scheduler.runs] == [Outcome.SUCCEEDED]


async def test_a_job_the_test_keeps_blocked_is_still_running_when_advance_returns(
    scheduler: ManualJobScheduler,
) -> None:
    job = Gate()
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=job)
    await scheduler.start()

    await scheduler.advance(2 * MINUTE)

    assert len(job.started) == 1
    assert scheduler.runs == []
    assert scheduler.describe()[0].running


async def test_runs_failures_and_runs_of(scheduler: ManualJobScheduler) -> None:
    refused = DomainError("LEDGER_CLOSED", "the ledger is closed")

    async def fail(execution: JobExecution) -> None:
        raise refused

    scheduler.register(name=JOB, schedule={"every": "15m"}, run=Recorder())
    scheduler.register(name="billing.export-ledger", schedule={"every": "30m"}, run=fail)
    await scheduler.start()

    await scheduler.advance(32 * MINUTE)

    assert [(r.job, r.scheduled_at, r.outcome) for r in scheduler.runs] == [
        (JOB, at(10, 0), "succeeded"),
        ("billing.export-ledger", at(10, 0), "failed"),
        (JOB, at(10, 15), "succeeded"),
        (JOB, at(10, 30), "succeeded"),
        ("billing.export-ledger", at(10, 30), "failed"),
    ]
    assert scheduler.failures == [refused, refused]
    assert [r.scheduled_at for r in scheduler.runs_of("billing.export-ledger")] == [
        at(10, 0),
        at(10, 30),
    ]
    first = scheduler.runs[0]
    assert (first.error_code, first.tenant_id, first.correlation_id, first.duration_ms) == (
        None,
        None,
        "id-1",
        0.0,
    )


async def test_the_manual_scheduler_has_no_jitter(scheduler: ManualJobScheduler) -> None:
    job = Recorder()
    scheduler.register(name=JOB, schedule={"every": "15m", "jitter_ms": 10 * MINUTE}, run=job)
    await scheduler.start()

    await scheduler.advance(2 * MINUTE)

    assert [(e.scheduled_at, e.started_at) for e in job.executions] == [(at(10, 0), at(10, 0))]


async def test_run_now_on_the_manual_scheduler_is_recorded_and_raises_what_the_job_raised(
    scheduler: ManualJobScheduler,
) -> None:
    refused = DomainError("NOTHING_DUE", "nothing is due")

    async def run(execution: JobExecution) -> None:
        raise refused

    scheduler.register(name=JOB, schedule={"every": "15m"}, run=run)

    with pytest.raises(DomainError):
        await scheduler.run_now(JOB)

    assert [(r.scheduled_at, r.outcome) for r in scheduler.runs] == [
        (at(9, 58, 30), Outcome.FAILED)
    ]
    assert scheduler.failures == [refused]


async def test_a_sync_job_runs_inline_so_no_thread_escapes_a_settle(
    scheduler: ManualJobScheduler,
) -> None:
    threads: list[int] = []
    scheduler.register(
        name=JOB, schedule={"every": "15m"}, run=lambda e: threads.append(threading.get_ident())
    )
    await scheduler.start()

    await scheduler.advance(2 * MINUTE)

    assert threads == [threading.get_ident()]


async def test_manual_job_timers_alone_drive_an_in_process_scheduler_built_by_hand(
    fixed_clock: FixedClock,
) -> None:
    timers = ManualJobTimers(fixed_clock)
    checkpoints = InMemoryJobCheckpoints()
    scheduler = InProcessJobScheduler(
        clock=fixed_clock,
        lock=InMemoryLock(fixed_clock),
        scope=FixedExecutionScope(),
        ids=SequentialIdGenerator(),
        timers=timers,
        checkpoints=checkpoints,
        random=lambda: 0.5,
    )
    job = Recorder()
    scheduler.register(name=JOB, schedule={"every": "15m", "jitter_ms": 20 * SECOND}, run=job)
    await scheduler.start()

    await timers.advance(2 * MINUTE)

    assert [(e.scheduled_at, e.started_at) for e in job.executions] == [(at(10, 0), at(10, 0, 10))]
    assert checkpoints.read(JOB) == at(10, 0)
    await timers.run_until(scheduler.stop())


async def test_timers_set_at_the_same_instant_fire_in_the_order_they_were_set(
    fixed_clock: FixedClock,
) -> None:
    timers = ManualJobTimers(fixed_clock)
    fired: list[str] = []

    async def wait(name: str, ms: int) -> None:
        await timers.sleep(ms)
        fired.append(name)

    tasks = [asyncio.ensure_future(wait(n, ms)) for n, ms in [("b", 20), ("a", 10), ("c", 20)]]
    await timers.advance(0)
    assert timers.pending == [at(9, 58, 30) + timedelta(milliseconds=ms) for ms in (10, 20, 20)]

    await timers.advance(20)
    await asyncio.gather(*tasks)

    assert fired == ["a", "b", "c"]
    assert timers.pending == []


async def test_a_cancelled_timer_never_fires_and_is_not_pending(fixed_clock: FixedClock) -> None:
    timers = ManualJobTimers(fixed_clock)
    sleeper = asyncio.ensure_future(timers.sleep(10))
    await timers.advance(0)

    sleeper.cancel()
    await timers.advance(0)

    assert timers.pending == []
    await timers.advance(10)
    assert sleeper.cancelled()


async def test_advance_moves_the_clock_even_with_no_timer(fixed_clock: FixedClock) -> None:
    timers = ManualJobTimers(fixed_clock)

    await timers.advance(timedelta(minutes=5))

    assert fixed_clock.now() == at(10, 3, 30)


@pytest.mark.parametrize("bad", [-1, timedelta(milliseconds=-1)])
async def test_time_does_not_go_backwards(fixed_clock: FixedClock, bad: int | timedelta) -> None:
    timers = ManualJobTimers(fixed_clock)

    with pytest.raises(ValueError, match="positive"):
        await timers.advance(bad)


async def test_a_negative_sleep_is_refused(fixed_clock: FixedClock) -> None:
    with pytest.raises(ValueError, match="positive"):
        await ManualJobTimers(fixed_clock).sleep(-1)


async def test_run_until_refuses_to_wait_on_what_no_timer_will_fire(
    fixed_clock: FixedClock,
) -> None:
    timers = ManualJobTimers(fixed_clock)
    never = asyncio.Event()

    with pytest.raises(RuntimeError, match="no timer"):
        await timers.run_until(never.wait())


async def test_run_until_lets_the_timers_fire_in_order_and_returns_the_result(
    fixed_clock: FixedClock,
) -> None:
    timers = ManualJobTimers(fixed_clock)

    async def later() -> datetime:
        await timers.sleep(5 * SECOND)
        await timers.sleep(5 * SECOND)
        return fixed_clock.now()

    assert await timers.run_until(later()) == at(9, 58, 40)


async def test_a_job_that_never_stops_being_ready_makes_settle_fail_instead_of_hanging(
    scheduler: ManualJobScheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(manual, "MAX_SETTLE_ROUNDS", 50)
    spinning = True

    async def spin(execution: JobExecution) -> None:
        while spinning:
            await asyncio.sleep(0)

    scheduler.register(name=JOB, schedule={"every": "15m"}, run=spin)
    await scheduler.start()

    with pytest.raises(RuntimeError, match="still busy"):
        await scheduler.advance(2 * MINUTE)
    spinning = False
    await scheduler.advance(0)
