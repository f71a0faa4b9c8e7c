"""Seed 004, "Options": overlap, missed, timeout_ms, jitter_ms, enabled, single_instance.

Seed 000, "Failure, overlap and missed occurrences", says why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from ddd_celery.kernel import FixedClock, FixedExecutionScope, SequentialIdGenerator
from ddd_celery.scheduling.checkpoints import InMemoryJobCheckpoints, JobCheckpoints
from ddd_celery.scheduling.errors import JobTimeoutError
from ddd_celery.scheduling.in_process import InProcessJobScheduler
from ddd_celery.scheduling.observability import COULD_NOT_FOLLOW
from ddd_celery.scheduling.outcomes import Outcome
from ddd_celery.testing import ManualJobScheduler, ManualJobTimers

from .conftest import JOB, MINUTE, SECOND, Gate, Recorder, SpyLock, at, plus


def outcomes(scheduler: ManualJobScheduler) -> list[tuple[datetime, str]]:
    return [(run.scheduled_at, run.outcome.value) for run in scheduler.runs]


# -- intervals --------------------------------------------------------------------------------


async def test_an_interval_is_aligned_on_the_unix_epoch_not_on_the_start(
    scheduler: ManualJobScheduler,
) -> None:
    job = Recorder()
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=job)
    await scheduler.start()

    await scheduler.advance(47 * MINUTE)

    assert job.due == [at(10, 0), at(10, 15), at(10, 30), at(10, 45)]


async def test_a_one_day_interval_falls_at_midnight_utc(scheduler: ManualJobScheduler) -> None:
    job = Recorder()
    scheduler.register(name=JOB, schedule={"every": "1d"}, run=job)
    await scheduler.start()

    await scheduler.advance(2 * 24 * 60 * MINUTE)

    assert job.due == [datetime(2026, 3, 3, tzinfo=UTC), datetime(2026, 3, 4, tzinfo=UTC)]


# -- overlap ----------------------------------------------------------------------------------


async def test_overlap_skip_does_not_start_an_occurrence_while_the_previous_run_is_in_progress(
    scheduler: ManualJobScheduler,
) -> None:
    job = Gate()
    scheduler.register(name=JOB, schedule={"every": "1m"}, run=job)
    await scheduler.start()
    await scheduler.advance(30 * SECOND)

    await scheduler.advance(2 * MINUTE)

    assert [e.scheduled_at for e in job.started] == [at(9, 59)]
    assert outcomes(scheduler) == [(at(10, 0), "skipped-overlap"), (at(10, 1), "skipped-overlap")]


async def test_after_a_skipped_overlap_the_next_occurrence_runs_as_usual(
    scheduler: ManualJobScheduler,
) -> None:
    job = Gate()
    scheduler.register(name=JOB, schedule={"every": "1m"}, run=job)
    await scheduler.start()
    await scheduler.advance(90 * SECOND)

    job.open()
    await scheduler.advance(MINUTE)

    assert [e.scheduled_at for e in job.started] == [at(9, 59), at(10, 1)]
    assert outcomes(scheduler) == [
        (at(10, 0), "skipped-overlap"),
        (at(9, 59), "succeeded"),
        (at(10, 1), "succeeded"),
    ]


async def test_overlap_queue_starts_the_occurrence_when_the_run_ends(
    scheduler: ManualJobScheduler,
) -> None:
    job = Gate()
    scheduler.register(name=JOB, schedule={"every": "1m", "overlap": "queue"}, run=job)
    await scheduler.start()
    await scheduler.advance(90 * SECOND)
    assert [e.scheduled_at for e in job.started] == [at(9, 59)]

    job.open()
    await scheduler.advance(0)

    assert [(e.scheduled_at, e.started_at) for e in job.started] == [
        (at(9, 59), at(9, 59)),
        (at(10, 0), at(10, 0)),
    ]
    assert outcomes(scheduler) == [(at(9, 59), "succeeded"), (at(10, 0), "succeeded")]


async def test_overlap_queue_keeps_one_occurrence_waiting_at_most_and_skips_the_next_ones(
    scheduler: ManualJobScheduler,
) -> None:
    job = Gate()
    scheduler.register(name=JOB, schedule={"every": "1m", "overlap": "queue"}, run=job)
    await scheduler.start()
    await scheduler.advance(30 * SECOND + 3 * MINUTE)

    job.open()
    await scheduler.advance(0)

    assert [e.scheduled_at for e in job.started] == [at(9, 59), at(10, 0)]
    assert outcomes(scheduler) == [
        (at(10, 1), "skipped-overlap"),
        (at(10, 2), "skipped-overlap"),
        (at(9, 59), "succeeded"),
        (at(10, 0), "succeeded"),
    ]


# -- missed -----------------------------------------------------------------------------------


async def test_an_occurrence_reached_later_than_late_after_ms_is_missed_and_the_next_runs(
    scheduler: ManualJobScheduler, fixed_clock: FixedClock
) -> None:
    job = Recorder()
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=job)
    await scheduler.start()
    fixed_clock.set(at(10, 1, 1))

    await scheduler.advance(15 * MINUTE)

    assert outcomes(scheduler) == [(at(10, 0), "missed"), (at(10, 15), "succeeded")]


async def test_a_timer_a_few_seconds_late_still_runs_its_occurrence(
    scheduler: ManualJobScheduler, fixed_clock: FixedClock
) -> None:
    job = Recorder()
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=job)
    await scheduler.start()
    fixed_clock.set(at(10, 1))

    await scheduler.advance(0)

    assert [(e.scheduled_at, e.started_at) for e in job.executions] == [(at(10, 0), at(10, 1))]


async def test_late_after_ms_is_an_option_of_the_scheduler(
    build: Callable[..., ManualJobScheduler], fixed_clock: FixedClock
) -> None:
    scheduler = build(late_after_ms=5 * SECOND)
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=Recorder())
    await scheduler.start()
    fixed_clock.set(at(10, 0, 6))

    await scheduler.advance(0)

    assert outcomes(scheduler) == [(at(10, 0), "missed")]


async def test_missed_is_recorded_once_for_a_gap_with_its_first_instant(
    scheduler: ManualJobScheduler, fixed_clock: FixedClock
) -> None:
    job = Recorder()
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=job)
    await scheduler.start()
    fixed_clock.set(at(11, 20))

    await scheduler.advance(0)
    await scheduler.advance(10 * MINUTE)

    assert outcomes(scheduler) == [(at(10, 0), "missed"), (at(11, 30), "succeeded")]


async def test_missed_run_once_runs_the_latest_occurrence_of_a_gap_once(
    scheduler: ManualJobScheduler, fixed_clock: FixedClock
) -> None:
    job = Recorder()
    scheduler.register(name=JOB, schedule={"every": "15m", "missed": "run-once"}, run=job)
    await scheduler.start()
    fixed_clock.set(at(11, 20))

    await scheduler.advance(0)
    await scheduler.advance(10 * MINUTE)

    assert [(e.scheduled_at, e.started_at) for e in job.executions] == [
        (at(11, 15), at(11, 20)),
        (at(11, 30), at(11, 30)),
    ]
    assert outcomes(scheduler) == [(at(11, 15), "succeeded"), (at(11, 30), "succeeded")]


async def test_an_occurrence_after_a_gap_that_is_still_on_time_runs(
    scheduler: ManualJobScheduler, fixed_clock: FixedClock
) -> None:
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=Recorder())
    await scheduler.start()
    fixed_clock.set(at(10, 15, 30))

    await scheduler.advance(0)

    assert outcomes(scheduler) == [(at(10, 0), "missed"), (at(10, 15), "succeeded")]


# -- checkpoints ------------------------------------------------------------------------------


def _restarted(
    fixed_clock: FixedClock, checkpoints: JobCheckpoints | None, **options: object
) -> tuple[InProcessJobScheduler, ManualJobTimers, Recorder]:
    timers = ManualJobTimers(fixed_clock)
    scheduler = InProcessJobScheduler(
        clock=fixed_clock,
        lock=SpyLock(fixed_clock),
        scope=FixedExecutionScope(),
        ids=SequentialIdGenerator(),
        timers=timers,
        checkpoints=checkpoints,
        **options,  # type: ignore[arg-type]
    )
    job = Recorder()
    return scheduler, timers, job


async def test_the_scheduler_writes_the_last_occurrence_it_handled_for_each_job(
    fixed_clock: FixedClock,
) -> None:
    checkpoints = InMemoryJobCheckpoints()
    scheduler, timers, job = _restarted(fixed_clock, checkpoints)
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=job)
    await scheduler.start()

    await timers.advance(17 * MINUTE)

    assert checkpoints.read(JOB) == at(10, 15)


async def test_with_checkpoints_run_once_catches_up_the_latest_occurrence_missed_while_down(
    fixed_clock: FixedClock,
) -> None:
    checkpoints = InMemoryJobCheckpoints()
    checkpoints.write(JOB, at(7, 0))
    seen: list[tuple[datetime, str]] = []
    scheduler, timers, job = _restarted(
        fixed_clock,
        checkpoints,
        on_run=lambda run, error, detail: seen.append((run.scheduled_at, run.outcome.value)),
    )
    scheduler.register(name=JOB, schedule={"every": "1h", "missed": "run-once"}, run=job)

    await scheduler.start()
    await timers.advance(0)

    assert [(e.scheduled_at, e.started_at) for e in job.executions] == [(at(9, 0), START_AT)]
    assert seen == [(at(9, 0), "succeeded")]
    assert checkpoints.read(JOB) == at(9, 0)


START_AT = datetime(2026, 3, 2, 9, 58, 30, tzinfo=UTC)


async def test_with_checkpoints_skip_records_one_missed_for_the_gap_while_down(
    fixed_clock: FixedClock,
) -> None:
    checkpoints = InMemoryJobCheckpoints()
    checkpoints.write(JOB, at(7, 0))
    seen: list[tuple[datetime, str]] = []
    scheduler, timers, job = _restarted(
        fixed_clock,
        checkpoints,
        on_run=lambda run, error, detail: seen.append((run.scheduled_at, run.outcome.value)),
    )
    scheduler.register(name=JOB, schedule={"every": "1h"}, run=job)

    await scheduler.start()
    await timers.advance(2 * MINUTE)

    assert seen == [(at(8, 0), "missed"), (at(10, 0), "succeeded")]


@pytest.mark.parametrize(
    ("missed", "records"),
    [
        ("skip", [("09:58:21", "missed"), ("09:58:30", "succeeded")]),
        ("run-once", [("09:58:30", "succeeded")]),
    ],
)
async def test_a_short_restart_never_replays_its_gap_and_the_next_instants_run_on_time(
    fixed_clock: FixedClock, missed: str, records: list[tuple[str, str]]
) -> None:
    # stopped after 09:58:20 with a job of every second, started again ten seconds later
    checkpoints = InMemoryJobCheckpoints()
    checkpoints.write(JOB, at(9, 58, 20))
    fixed_clock.set(plus(at(9, 58, 30), 400))
    seen: list[tuple[str, str]] = []
    scheduler, timers, job = _restarted(
        fixed_clock,
        checkpoints,
        on_run=lambda run, error, detail: seen.append(
            (run.scheduled_at.strftime("%H:%M:%S"), run.outcome.value)
        ),
    )
    scheduler.register(name=JOB, schedule={"every": "1s", "missed": missed}, run=job)

    await scheduler.start()
    await timers.advance(0)

    assert seen == records
    assert job.due == [at(9, 58, 30)]
    await timers.advance(2 * SECOND)
    assert job.due == [at(9, 58, 30), at(9, 58, 31), at(9, 58, 32)]
    assert checkpoints.read(JOB) == at(9, 58, 32)


async def test_without_checkpoints_a_restart_forgets_and_starts_from_the_instant_of_the_start(
    fixed_clock: FixedClock,
) -> None:
    first, timers, job = _restarted(fixed_clock, None)
    first.register(name=JOB, schedule={"every": "1h", "missed": "run-once"}, run=job)
    await first.start()
    await timers.advance(2 * MINUTE)
    await first.stop()
    fixed_clock.set(at(12, 30))  # down for two hours and a half

    seen: list[str] = []
    second, timers, _ = _restarted(
        fixed_clock, None, on_run=lambda run, error, detail: seen.append(run.outcome.value)
    )
    second.register(name=JOB, schedule={"every": "1h", "missed": "run-once"}, run=job)
    await second.start()
    await timers.advance(31 * MINUTE)

    assert job.due == [at(10, 0), at(13, 0)]
    assert seen == ["succeeded"]
    await second.stop()


class _BrokenCheckpoints(JobCheckpoints):
    def read(self, job: str) -> datetime | None:
        raise ConnectionError("checkpoints table is locked")

    def write(self, job: str, handled: datetime) -> None:
        raise ConnectionError("checkpoints table is locked")


async def test_a_checkpoint_that_cannot_be_read_or_written_is_logged_and_the_job_goes_on(
    fixed_clock: FixedClock, logs: pytest.LogCaptureFixture
) -> None:
    scheduler, timers, job = _restarted(fixed_clock, _BrokenCheckpoints())
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=job)

    await scheduler.start()
    await timers.advance(2 * MINUTE)

    assert job.due == [at(10, 0)]
    followed = [r for r in logs.records if r.getMessage() == COULD_NOT_FOLLOW]
    assert [(r.levelno, r.__dict__["job"], r.__dict__["operation"]) for r in followed] == [
        (logging.ERROR, JOB, "checkpoint read"),
        (logging.ERROR, JOB, "checkpoint write"),
    ]
    assert all("locked" not in r.getMessage() for r in logs.records)


# -- timeout ----------------------------------------------------------------------------------


async def test_a_run_longer_than_timeout_ms_is_aborted_with_a_job_timeout_error_and_recorded_failed(
    scheduler: ManualJobScheduler,
) -> None:
    job = Gate()
    scheduler.register(name=JOB, schedule={"every": "15m", "timeout_ms": 10 * SECOND}, run=job)
    await scheduler.start()
    await scheduler.advance(90 * SECOND)

    await scheduler.advance(10 * SECOND)

    [execution] = job.started
    assert isinstance(execution.signal.reason, JobTimeoutError)
    [record] = scheduler.runs
    assert (record.outcome, record.error_code, record.duration_ms) == (
        Outcome.FAILED,
        "JOB_TIMEOUT",
        10_000.0,
    )
    assert scheduler.failures == [execution.signal.reason]


async def test_a_run_within_its_timeout_succeeds(scheduler: ManualJobScheduler) -> None:
    job = Gate()
    scheduler.register(name=JOB, schedule={"every": "15m", "timeout_ms": 10 * SECOND}, run=job)
    await scheduler.start()
    await scheduler.advance(90 * SECOND + 9 * SECOND)

    job.open()
    await scheduler.advance(MINUTE)

    assert [(r.outcome, r.duration_ms) for r in scheduler.runs] == [(Outcome.SUCCEEDED, 9_000.0)]


async def test_a_job_that_checks_its_signal_stops_between_two_steps(
    scheduler: ManualJobScheduler,
) -> None:
    job = Gate(checks_signal=True)
    scheduler.register(name=JOB, schedule={"every": "15m", "timeout_ms": 10 * SECOND}, run=job)
    await scheduler.start()
    await scheduler.advance(100 * SECOND)

    job.open()
    await scheduler.advance(0)

    assert job.ended == []
    assert [r.error_code for r in scheduler.runs] == ["JOB_TIMEOUT"]


async def test_a_job_that_ignores_its_signal_goes_on_behind_and_overlaps_the_next_run(
    scheduler: ManualJobScheduler,
) -> None:
    job = Gate()
    scheduler.register(name=JOB, schedule={"every": "1m", "timeout_ms": 10 * SECOND}, run=job)
    await scheduler.start()

    await scheduler.advance(30 * SECOND + MINUTE)

    assert [e.scheduled_at for e in job.started] == [at(9, 59), at(10, 0)]
    assert job.ended == []
    assert scheduler.describe()[0].running
    assert outcomes(scheduler) == [(at(9, 59), "failed")]

    job.open()
    await scheduler.advance(0)
    assert [e.scheduled_at for e in job.ended] == [at(9, 59), at(10, 0)]
    assert outcomes(scheduler) == [(at(9, 59), "failed"), (at(10, 0), "succeeded")]


async def test_a_timeout_frees_a_queued_occurrence(scheduler: ManualJobScheduler) -> None:
    job = Gate()
    scheduler.register(
        name=JOB,
        schedule={"every": "1m", "overlap": "queue", "timeout_ms": 75 * SECOND},
        run=job,
    )
    await scheduler.start()
    await scheduler.advance(90 * SECOND)

    await scheduler.advance(15 * SECOND)

    assert [(e.scheduled_at, e.started_at) for e in job.started] == [
        (at(9, 59), at(9, 59)),
        (at(10, 0), at(10, 0, 15)),
    ]


# -- jitter -----------------------------------------------------------------------------------


async def test_jitter_waits_a_random_delay_up_to_jitter_ms_before_each_run(
    fixed_clock: FixedClock,
) -> None:
    draws = iter([0.0, 0.5, 0.999999])
    timers = ManualJobTimers(fixed_clock)
    scheduler = InProcessJobScheduler(
        clock=fixed_clock,
        lock=SpyLock(fixed_clock),
        scope=FixedExecutionScope(),
        ids=SequentialIdGenerator(),
        timers=timers,
        random=lambda: next(draws),
    )
    job = Recorder()
    scheduler.register(name=JOB, schedule={"every": "15m", "jitter_ms": 60 * SECOND}, run=job)
    await scheduler.start()

    await timers.advance(33 * MINUTE)

    assert [(e.scheduled_at, e.started_at) for e in job.executions] == [
        (at(10, 0), at(10, 0)),
        (at(10, 15), at(10, 15, 30)),
        (at(10, 30), plus(at(10, 30), 59_999)),
    ]


async def test_jitter_aside_an_occurrence_is_not_late(fixed_clock: FixedClock) -> None:
    timers = ManualJobTimers(fixed_clock)
    scheduler = InProcessJobScheduler(
        clock=fixed_clock,
        lock=SpyLock(fixed_clock),
        scope=FixedExecutionScope(),
        ids=SequentialIdGenerator(),
        timers=timers,
        random=lambda: 0.9,
        late_after_ms=MINUTE,
    )
    job = Recorder()
    scheduler.register(name=JOB, schedule={"every": "15m", "jitter_ms": 10 * MINUTE}, run=job)
    await scheduler.start()

    await timers.advance(12 * MINUTE)

    assert [(e.scheduled_at, e.started_at) for e in job.executions] == [(at(10, 0), at(10, 9))]


# -- enabled ----------------------------------------------------------------------------------


async def test_a_disabled_job_never_starts_by_time(scheduler: ManualJobScheduler) -> None:
    job = Recorder()
    scheduler.register(name=JOB, schedule={"every": "1m", "enabled": False}, run=job)
    await scheduler.start()

    await scheduler.advance(60 * MINUTE)

    assert job.executions == []
    assert scheduler.runs == []


async def test_run_now_still_runs_a_disabled_job(scheduler: ManualJobScheduler) -> None:
    job = Recorder()
    scheduler.register(name=JOB, schedule={"every": "1m", "enabled": False}, run=job)

    await scheduler.run_now(JOB)

    assert job.due == [START_AT]


# -- single_instance --------------------------------------------------------------------------


async def test_a_job_that_is_not_single_instance_takes_no_lock_and_runs_on_every_instance(
    build: Callable[..., ManualJobScheduler], fixed_clock: FixedClock
) -> None:
    lock = SpyLock(fixed_clock)
    first, second = build(lock=lock), build(lock=lock)
    job = Recorder()
    for instance in (first, second):
        instance.register(name=JOB, schedule={"every": "15m", "single_instance": False}, run=job)
        await instance.start()

    await first.advance(2 * MINUTE)
    await second.advance(0)

    assert job.due == [at(10, 0), at(10, 0)]
    assert lock.acquired == []
