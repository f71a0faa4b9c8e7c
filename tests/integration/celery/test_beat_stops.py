"""A beat stopped anywhere in a send leaves no claim behind; the occurrence gets an outcome.

Celery's beat turns SIGTERM into ``SystemExit`` and Ctrl-C into ``KeyboardInterrupt``, raised
wherever beat is: asking the lock, claiming the run state, publishing. Each is raised here from
the port beat is calling, on a fixed clock; the process test stops a real beat mid-publish.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery import Celery

from ddd_celery.celery import beat as beat_module
from ddd_celery.celery.beat import JobBeatScheduler
from ddd_celery.celery.registry import ATTRIBUTE, CeleryJob, CeleryJobs
from ddd_celery.declarations.execution import JobExecution
from ddd_celery.declarations.schedule import parse_job_schedule
from ddd_celery.kernel.clock import FixedClock
from ddd_celery.kernel.ids import SequentialIdGenerator
from ddd_celery.kernel.lock import InMemoryLock, Lease
from ddd_celery.kernel.scope import FixedExecutionScope
from ddd_celery.scheduling.checkpoints import InMemoryJobCheckpoints
from ddd_celery.scheduling.observability import RunDetail, RunRecorder
from ddd_celery.scheduling.occurrence import SchedulerRules, lock_key
from ddd_celery.scheduling.outcomes import JobRun, Outcome
from ddd_celery.scheduling.run_state import Claim, InMemoryJobRunState

JOB = "billing.send-payment-reminders"
START = datetime(2026, 3, 2, 9, 59, 59, tzinfo=UTC)
TEN = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)


class RemindersJob:
    def run(self, execution: JobExecution) -> None:
        return None


class StoppingLock(InMemoryLock):
    """The stop arrives while beat asks the lock (after the store took it, or before)."""

    def __init__(self, clock: FixedClock, stop: BaseException, *, taken: bool) -> None:
        super().__init__(clock)
        self.stop, self.taken = stop, taken

    def acquire(self, key: str, ttl_ms: int) -> Lease | None:
        if self.taken:
            super().acquire(key, ttl_ms)
        raise self.stop


class StoppingRunState(InMemoryJobRunState):
    """The stop arrives once the store recorded the claim, before beat reads the answer."""

    def __init__(self, clock: FixedClock, stop: BaseException) -> None:
        super().__init__(clock)
        self.stop = stop

    def claim(self, job: str, scheduled_at: datetime, *, queue: bool, ttl_ms: int) -> Claim:
        super().claim(job, scheduled_at, queue=queue, ttl_ms=ttl_ms)
        raise self.stop


class Beat:
    """One beat on a fixed clock, its runs recorded; ``send_stop`` interrupts its publish."""

    def __init__(self) -> None:
        self.clock = FixedClock(START)
        self.runs: list[JobRun] = []
        self.sent: list[str] = []
        self.send_stop: BaseException | None = None
        self.checkpoints = InMemoryJobCheckpoints()
        self.app = Celery(f"beat-{uuid.uuid4().hex}", broker="memory://", set_as_current=False)
        self.app.send_task = self._send_task
        job = CeleryJob(
            name=JOB,
            schedule=parse_job_schedule({"every": "1s"}, job=JOB),
            task_name=JOB,
            queue="billing",
            job_class=RemindersJob,
        )
        self.registry = CeleryJobs(
            jobs={JOB: job},
            clock=self.clock,
            lock=InMemoryLock(self.clock),
            checkpoints=self.checkpoints,
            run_state=InMemoryJobRunState(self.clock),
            last_runs=None,
            ids=SequentialIdGenerator(),
            scope=FixedExecutionScope(),
            recorder=RunRecorder(on_run=self._on_run),
            rules=SchedulerRules(),
            tenants=None,
            start=True,
            providers={},
        )
        setattr(self.app, ATTRIBUTE, self.registry)
        self.beat = JobBeatScheduler(app=self.app)

    def tick_at(self, at: datetime) -> None:
        self.clock.set(at)
        self.beat.tick()

    def _send_task(self, name: str, *args: Any, **kwargs: Any) -> None:
        if self.send_stop is not None:
            raise self.send_stop
        self.sent.append(name)

    def _on_run(self, run: JobRun, error: BaseException | None, detail: RunDetail) -> None:
        self.runs.append(run)


STOPS = [SystemExit(), KeyboardInterrupt()]


@pytest.mark.parametrize("stop", STOPS, ids=["sigterm", "ctrl-c"])
def test_a_stop_during_the_publish_records_job_aborted_and_ends_the_claim(
    stop: BaseException,
) -> None:
    beat = Beat()
    beat.send_stop = stop

    with pytest.raises(type(stop)):
        beat.tick_at(TEN)

    [run] = beat.runs
    assert (run.outcome, run.error_code, run.scheduled_at) == (Outcome.FAILED, "JOB_ABORTED", TEN)
    assert beat.registry.run_state.running(JOB) is None
    beat.beat.close()
    assert beat.checkpoints.read(JOB) == TEN  # a restart does not take it for a gap


@pytest.mark.parametrize("stop", STOPS, ids=["sigterm", "ctrl-c"])
def test_a_stop_once_the_claim_is_stored_records_job_aborted_and_ends_the_claim(
    stop: BaseException,
) -> None:
    beat = Beat()
    beat.registry.run_state = StoppingRunState(beat.clock, stop)

    with pytest.raises(type(stop)):
        beat.tick_at(TEN)

    assert [(r.outcome, r.error_code) for r in beat.runs] == [(Outcome.FAILED, "JOB_ABORTED")]
    assert beat.registry.run_state.running(JOB) is None
    assert beat.sent == []


@pytest.mark.parametrize("taken", [True, False], ids=["lock-taken", "lock-not-taken"])
def test_a_stop_while_beat_asks_the_lock_records_job_aborted_and_claims_nothing(
    taken: bool,
) -> None:
    beat = Beat()
    beat.registry.lock = StoppingLock(beat.clock, SystemExit(), taken=taken)

    with pytest.raises(SystemExit):
        beat.tick_at(TEN)

    assert [(r.outcome, r.error_code) for r in beat.runs] == [(Outcome.FAILED, "JOB_ABORTED")]
    assert beat.registry.run_state.running(JOB) is None
    assert beat.sent == []


@pytest.mark.parametrize("stop", STOPS, ids=["sigterm", "ctrl-c"])
def test_a_stop_in_a_burst_records_the_batch_begun_ahead_and_leaves_the_rest_to_other_beats(
    stop: BaseException, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batch 1 was begun while batch 0 was published (``beat_batches``): its locks and claims
    are this beat's, so it is recorded with the rest of batch 0; batch 2 was never asked."""
    monkeypatch.setattr(beat_module, "DISPATCH_BATCH", 2)
    beat = Beat()
    names = [f"{JOB}-{index}" for index in range(6)]
    beat.registry.jobs = {
        name: CeleryJob(
            name=name,
            schedule=parse_job_schedule({"every": "1s"}, job=name),
            task_name=name,
            queue="billing",
            job_class=RemindersJob,
        )
        for name in names
    }
    beat.beat = JobBeatScheduler(app=beat.app, spread=lambda batches: 0)
    send = beat._send_task

    def stop_at_the_second_send(name: str, *args: Any, **kwargs: Any) -> None:
        if beat.sent:
            raise stop
        send(name, *args, **kwargs)

    beat.app.send_task = stop_at_the_second_send

    with pytest.raises(type(stop)):
        beat.tick_at(TEN)

    assert beat.sent == names[:1]
    # A message of a publish batch is known to have left once the whole batch is written: all
    # of batch 0 is recorded, with batch 1, begun ahead; batch 2 was never asked.
    aborted = [(run.job, run.outcome, run.error_code) for run in beat.runs]
    assert sorted(aborted) == [(name, Outcome.FAILED, "JOB_ABORTED") for name in names[:4]]
    assert [beat.registry.run_state.running(name) for name in names] == [None] * 6
    lock = beat.registry.lock
    # What was begun keeps its lock (a message may have left); what was not is free to take.
    assert [lock.acquire(lock_key(name, TEN), 60_000) is None for name in names] == [
        True,
        True,
        True,
        True,
        False,
        False,
    ]


def test_a_closed_beat_sends_nothing_however_often_it_is_ticked() -> None:
    beat = Beat()
    beat.tick_at(TEN)
    beat.beat.close()

    for second in range(1, 5):
        beat.tick_at(TEN + timedelta(seconds=second))

    assert beat.sent == [JOB]
    assert [r.outcome for r in beat.runs] == []
