"""Seed 004, "Replacing the scheduler": the options an InProcessJobScheduler is built with."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from ddd_celery.kernel import (
    FixedClock,
    FixedExecutionScope,
    InMemoryLock,
    Lease,
    Lock,
    SequentialIdGenerator,
)
from ddd_celery.scheduling.in_process import InProcessJobScheduler
from ddd_celery.scheduling.observability import DEFAULT_LOGGER
from ddd_celery.scheduling.timers import SystemJobTimers
from ddd_celery.testing import ManualJobScheduler, ManualJobTimers

from .conftest import JOB, MINUTE, Recorder, at


class _Untouchable(Lock):
    """A lock that must not be asked: building a scheduler opens no connection."""

    def __init__(self) -> None:
        self.asked = 0

    def acquire(self, key: str, ttl_ms: int) -> Lease | None:
        self.asked += 1
        return None

    def release(self, lease: Lease) -> bool:
        self.asked += 1
        return False


async def test_building_registering_and_starting_ask_nothing_of_the_lock(
    fixed_clock: FixedClock,
) -> None:
    lock = _Untouchable()
    timers = ManualJobTimers(fixed_clock)
    scheduler = InProcessJobScheduler(
        clock=fixed_clock,
        lock=lock,
        scope=FixedExecutionScope(),
        ids=SequentialIdGenerator(),
        timers=timers,
    )
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=Recorder())
    await scheduler.start()
    await timers.advance(MINUTE)
    assert lock.asked == 0

    await timers.advance(MINUTE)
    assert lock.asked == 1, "the lock is asked at each occurrence"


def test_the_clock_lock_scope_and_ids_are_required() -> None:
    with pytest.raises(TypeError):
        InProcessJobScheduler()  # type: ignore[call-arg]


@pytest.mark.parametrize(
    "options",
    [{"late_after_ms": 0}, {"lock_ttl_ms": -1}, {"grace_ms": -1}, {"grace_ms": 1.5}],
)
def test_options_out_of_their_values_are_refused(
    fixed_clock: FixedClock, options: dict[str, object]
) -> None:
    with pytest.raises(ValueError, match=next(iter(options))):
        InProcessJobScheduler(
            clock=fixed_clock,
            lock=InMemoryLock(fixed_clock),
            scope=FixedExecutionScope(),
            ids=SequentialIdGenerator(),
            **options,  # type: ignore[arg-type]
        )


def test_without_timers_it_sleeps_on_the_system_timers(fixed_clock: FixedClock) -> None:
    scheduler = InProcessJobScheduler(
        clock=fixed_clock,
        lock=InMemoryLock(fixed_clock),
        scope=FixedExecutionScope(),
        ids=SequentialIdGenerator(),
    )

    assert isinstance(scheduler._timers, SystemJobTimers)


async def test_without_a_logger_it_writes_to_the_ddd_celery_scheduling_logger(
    scheduler: ManualJobScheduler, logs: pytest.LogCaptureFixture
) -> None:
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=Recorder())
    await scheduler.start()

    await scheduler.advance(2 * MINUTE)

    assert [(r.name, r.getMessage()) for r in logs.records] == [
        (DEFAULT_LOGGER, "Scheduled job succeeded")
    ]


async def test_the_logger_given_receives_the_lines(
    build: Callable[..., ManualJobScheduler], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="clinic.jobs")
    scheduler = build(logger=logging.getLogger("clinic.jobs"))
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=Recorder())
    await scheduler.start()

    await scheduler.advance(2 * MINUTE)

    assert [(r.name, r.getMessage()) for r in caplog.records] == [
        ("clinic.jobs", "Scheduled job succeeded")
    ]


async def test_without_metrics_it_measures_nothing_and_runs_as_usual(
    build: Callable[..., ManualJobScheduler],
) -> None:
    scheduler = build(metrics=None)
    job = Recorder()
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=job)
    await scheduler.start()

    await scheduler.advance(2 * MINUTE)

    assert job.due == [at(10, 0)]
