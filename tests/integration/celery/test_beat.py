"""JobBeatScheduler driven in-process, as ``celery beat`` drives it, on a fixed clock.

Each beat instance is a real Celery app whose ``send_task`` is captured, so what beat publishes
(task, kwargs, queue, expiry) is asserted without a broker; one test publishes for real on the
memory transport. ``run_until`` ticks like beat's service loop and moves the clock by what
``tick()`` returned instead of sleeping. Several instances share a clock and a lock; the Redis
cases share the real Redis on REDIS_URL.

No ``__init__.py`` here: a package named ``celery`` would shadow Celery itself.
"""

from __future__ import annotations

import gc
import logging
import threading
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery import Celery
from celery.apps.beat import Beat
from celery.beat import BeatLazyFunc, Service
from celery.schedules import crontab
from redis import Redis

import ddd_celery.celery.beat as beat_module
from ddd_celery.celery import install_jobs
from ddd_celery.celery.beat import JobBeatScheduler
from ddd_celery.celery.beat_entries import translate_beat_schedule
from ddd_celery.celery.message import OccurrenceMessage
from ddd_celery.celery.registry import ATTRIBUTE, CeleryJob, CeleryJobs
from ddd_celery.declarations.cron_evaluator import next_occurrence
from ddd_celery.declarations.execution import JobExecution
from ddd_celery.declarations.schedule import parse_job_schedule
from ddd_celery.kernel.clock import FixedClock
from ddd_celery.kernel.ids import SequentialIdGenerator
from ddd_celery.kernel.lock import InMemoryLock, Lease, Lock, LockUnavailableError
from ddd_celery.kernel.scope import FixedExecutionScope
from ddd_celery.redis import RedisJobCheckpoints, RedisJobRunState, RedisLock, connect
from ddd_celery.scheduling.checkpoints import InMemoryJobCheckpoints, JobCheckpoints
from ddd_celery.scheduling.observability import COULD_NOT_FOLLOW, RunDetail, RunRecorder
from ddd_celery.scheduling.occurrence import SchedulerRules
from ddd_celery.scheduling.outcomes import JobRun, Outcome, context_of
from ddd_celery.scheduling.run_state import Claim, InMemoryJobRunState, JobRunState

START = datetime(2026, 3, 2, 9, 58, 30, tzinfo=UTC)
HOUR_LONG_RUNS = SchedulerRules(lock_ttl_ms=3_600_000)
"""A run counts as in progress for an hour (past it, its process is deemed dead)."""


class RemindersJob:
    """The class of a declared job; beat never builds it, a worker does."""

    def run(self, execution: JobExecution) -> None:
        return None


def declared(name: str, **schedule: Any) -> CeleryJob:
    return CeleryJob(
        name=name,
        schedule=parse_job_schedule(schedule, job=name),
        task_name=name,
        queue=context_of(name),
        job_class=RemindersJob,
    )


@dataclass(frozen=True)
class Sent:
    """One publish, and the instant of the clock when beat made it."""

    task: str
    args: Any
    kwargs: Mapping[str, Any]
    options: Mapping[str, Any]
    at: datetime

    @property
    def scheduled_at(self) -> str:
        return str(self.kwargs["scheduled_at"])


@dataclass
class Instance:
    """One beat process: its Celery app, its registry, what it sent and recorded.

    With ``worker`` on, a sent occurrence of a declared job ends at once in the run state, as a
    worker that runs it in no time would; off, runs stay in progress until the test ends them.
    """

    clock: FixedClock
    jobs: list[CeleryJob]
    lock: Lock
    checkpoints: JobCheckpoints | None = None
    run_state: JobRunState | None = None
    start: bool = True
    worker: bool = True
    rules: SchedulerRules = field(default_factory=SchedulerRules)
    broken_send: Exception | None = None
    sent: list[Sent] = field(default_factory=list)
    runs: list[JobRun] = field(default_factory=list)
    errors: list[BaseException | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.app = Celery(f"beat-{uuid.uuid4().hex}", broker="memory://", set_as_current=False)
        self.app.send_task = self._send_task
        self.registry = CeleryJobs(
            jobs={job.name: job for job in self.jobs},
            clock=self.clock,
            lock=self.lock,
            checkpoints=self.checkpoints,
            run_state=self.run_state or InMemoryJobRunState(self.clock),
            last_runs=None,
            ids=SequentialIdGenerator(),
            scope=FixedExecutionScope(),
            recorder=RunRecorder(on_run=self._on_run),
            rules=self.rules,
            tenants=None,
            start=self.start,
            providers={},
        )
        setattr(self.app, ATTRIBUTE, self.registry)

    def beat(self, **kwargs: Any) -> JobBeatScheduler:
        return JobBeatScheduler(app=self.app, **kwargs)

    def outcomes(self) -> list[tuple[str, str]]:
        return [(run.outcome.value, _iso(run.scheduled_at)) for run in self.runs]

    def _send_task(self, name: str, args: Any = None, kwargs: Any = None, **options: Any) -> None:
        if self.broken_send is not None:
            raise self.broken_send
        self.sent.append(Sent(name, args, kwargs or {}, options, self.clock.now()))
        job = self.registry.jobs.get(name)
        if self.worker and job is not None and job.declared:
            at = OccurrenceMessage.from_kwargs(kwargs or {}).scheduled_at
            self.registry.run_state.finish(name, at, ttl_ms=60_000)

    def _on_run(self, run: JobRun, error: BaseException | None, detail: RunDetail) -> None:
        self.runs.append(run)
        self.errors.append(error)


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def run_until(clock: FixedClock, until: datetime, *beats: JobBeatScheduler) -> list[float]:
    """Tick every beat as beat's loop does, moving the clock by the shortest sleep returned."""
    sleeps: list[float] = []
    for _ in range(100_000):
        sleep = min(beat.tick() for beat in beats)
        sleeps.append(sleep)
        now = clock.now()
        if now >= until:
            return sleeps
        clock.set(min(until, now + timedelta(seconds=sleep)))
    raise AssertionError("beat never went idle")


def scheduled(sent: list[Sent]) -> list[str]:
    return [item.scheduled_at for item in sent]


class Untouchable(Lock, JobCheckpoints, JobRunState):
    """Stores that fail the test if asked anything: what the banner must never do."""

    asked: list[str]

    def __init__(self) -> None:
        self.asked = []

    def acquire(self, key: str, ttl_ms: int) -> Lease | None:
        self.asked.append("acquire")
        raise AssertionError("the lock was asked")

    def release(self, lease: Lease) -> bool:
        self.asked.append("release")
        raise AssertionError("the lock was asked")

    def read(self, job: str) -> datetime | None:
        self.asked.append("read")
        raise AssertionError("the checkpoints were asked")

    def write(self, job: str, handled: datetime) -> None:
        self.asked.append("write")
        raise AssertionError("the checkpoints were asked")

    def claim(self, job: str, scheduled_at: datetime, *, queue: bool, ttl_ms: int) -> Claim:
        self.asked.append("claim")
        raise AssertionError("the run state was asked")

    def finish(self, job: str, scheduled_at: datetime, *, ttl_ms: int) -> datetime | None:
        raise AssertionError("the run state was asked")

    def drop_queued(self, job: str) -> datetime | None:
        raise AssertionError("the run state was asked")

    def running(self, job: str) -> datetime | None:
        raise AssertionError("the run state was asked")


class SwitchableLock(Lock):
    """An in-memory lock whose store can be taken down and brought back; counts round trips."""

    def __init__(self, clock: FixedClock) -> None:
        self._inner = InMemoryLock(clock)
        self.down = False
        self.acquired: list[str] = []
        self.released: list[str] = []

    def acquire(self, key: str, ttl_ms: int) -> Lease | None:
        if self.down:
            raise LockUnavailableError("the lock store is down")
        self.acquired.append(key)
        return self._inner.acquire(key, ttl_ms)

    def release(self, lease: Lease) -> bool:
        if self.down:
            raise LockUnavailableError("the lock store is down")
        self.released.append(lease.key)
        return self._inner.release(lease)


class BrokenRunState(InMemoryJobRunState):
    def claim(self, job: str, scheduled_at: datetime, *, queue: bool, ttl_ms: int) -> Claim:
        raise ConnectionError("the run state store is down")


class BrokenCheckpoints(InMemoryJobCheckpoints):
    def write(self, job: str, handled: datetime) -> None:
        raise ConnectionError("the checkpoint store is down")


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(START)


# --- sending on time -------------------------------------------------------------------------


def test_sends_each_occurrence_of_an_interval_on_its_epoch_aligned_instant(
    clock: FixedClock,
) -> None:
    instance = Instance(clock, [declared("billing.remind", every="15m")], InMemoryLock(clock))

    run_until(clock, START + timedelta(minutes=32), instance.beat())

    assert scheduled(instance.sent) == [
        "2026-03-02T10:00:00.000Z",
        "2026-03-02T10:15:00.000Z",
        "2026-03-02T10:30:00.000Z",
    ]
    assert [item.at for item in instance.sent] == [
        datetime(2026, 3, 2, 10, minute, tzinfo=UTC) for minute in (0, 15, 30)
    ]


def test_sends_the_job_task_with_the_occurrence_on_its_context_queue_expiring_with_its_lock(
    clock: FixedClock,
) -> None:
    instance = Instance(clock, [declared("billing.remind", every="15m")], InMemoryLock(clock))

    run_until(clock, START + timedelta(minutes=2), instance.beat())

    (sent,) = instance.sent
    assert sent.task == "billing.remind"
    assert sent.kwargs == {
        "scheduled_at": "2026-03-02T10:00:00.000Z",
        "correlation_id": "id-1",
        "tenant_id": None,
    }
    # the lock lives 15 min (no timeout_ms) + 1 min of lateness, from when it was taken
    assert sent.options == {
        "queue": "billing",
        "expires": datetime(2026, 3, 2, 10, 16, tzinfo=UTC),
        "serializer": "json",
        "headers": {},  # the trace's, when a tracer provider is set (test_tracing.py)
    }


def test_publishes_a_json_message_a_worker_can_read_on_the_memory_transport(
    clock: FixedClock,
) -> None:
    queue_name = f"billing-{uuid.uuid4().hex}"  # the memory transport's queues are global
    job = replace(declared("billing.remind", every="15m"), queue=queue_name)
    instance = Instance(clock, [job], InMemoryLock(clock))
    del instance.app.send_task  # the real publish, on kombu's memory transport

    run_until(clock, START + timedelta(minutes=2), instance.beat())

    with instance.app.connection_for_read() as connection:
        queue = connection.SimpleQueue(queue_name)
        message = queue.get(timeout=1)
        queue.close()
    assert message.content_type == "application/json"
    assert message.headers["task"] == "billing.remind"
    assert message.headers["expires"] is not None
    args, kwargs, _ = message.decode()
    assert args == []
    assert OccurrenceMessage.from_kwargs(kwargs).scheduled_at == datetime(
        2026, 3, 2, 10, tzinfo=UTC
    )


def test_sends_a_cron_job_at_its_wall_clock_time_in_its_zone_across_a_change_of_clocks() -> None:
    clock = FixedClock(datetime(2026, 3, 27, 12, tzinfo=UTC))
    job = declared("notification.send-reminders", cron="0 7 * * *", time_zone="Europe/Paris")
    instance = Instance(clock, [job], InMemoryLock(clock))

    run_until(clock, datetime(2026, 3, 31, 12, tzinfo=UTC), instance.beat())

    # 07:00 in Paris is 06:00 UTC in winter, 05:00 UTC from Sunday 29 March
    assert scheduled(instance.sent) == [
        "2026-03-28T06:00:00.000Z",
        "2026-03-29T05:00:00.000Z",
        "2026-03-30T05:00:00.000Z",
        "2026-03-31T05:00:00.000Z",
    ]


def test_a_pinned_time_that_does_not_exist_that_day_is_not_sent() -> None:
    clock = FixedClock(datetime(2026, 3, 28, 12, tzinfo=UTC))
    job = declared("billing.close", cron="30 2 * * *", time_zone="Europe/Paris")
    instance = Instance(clock, [job], InMemoryLock(clock))

    run_until(clock, datetime(2026, 3, 30, 12, tzinfo=UTC), instance.beat())

    # 02:30 does not exist in Paris on 29 March: no run that day, nothing moved to 03:30
    assert scheduled(instance.sent) == ["2026-03-30T00:30:00.000Z"]
    assert instance.runs == []


# --- how long beat sleeps --------------------------------------------------------------------


def test_tick_returns_the_seconds_until_the_next_instant(clock: FixedClock) -> None:
    instance = Instance(clock, [declared("billing.remind", every="15m")], InMemoryLock(clock))

    assert instance.beat().tick() == 90.0


def test_tick_never_asks_beat_to_sleep_more_than_an_hour(clock: FixedClock) -> None:
    job = declared("billing.close", cron="0 2 1 * *")
    instance = Instance(clock, [job], InMemoryLock(clock))

    assert instance.beat().tick() == 3600.0


def test_tick_honours_a_shorter_max_interval(clock: FixedClock) -> None:
    instance = Instance(clock, [declared("billing.remind", every="15m")], InMemoryLock(clock))

    assert instance.beat(max_interval=30).tick() == 30.0


def test_an_idle_tick_asks_no_store_anything(clock: FixedClock) -> None:
    stores = Untouchable()
    instance = Instance(clock, [declared("billing.remind", every="15m")], stores, run_state=stores)
    beat = instance.beat()

    for _ in range(3):
        beat.tick()

    assert stores.asked == []


def _collected(thing: object) -> bool:
    """Whether the garbage collector's generations hold ``thing`` (a frozen object is in none)."""
    return any(held is thing for generation in range(3) for held in gc.get_objects(generation))


def test_the_set_up_is_frozen_out_of_the_garbage_collector_until_beat_closes(
    clock: FixedClock,
) -> None:
    gc.unfreeze()
    instance = Instance(clock, [declared("billing.remind", every="15m")], InMemoryLock(clock))
    assert _collected(instance.registry)

    beat = instance.beat()
    try:
        assert not _collected(instance.registry)
        assert not _collected(beat._due[0])
    finally:
        beat.close()

    assert gc.get_freeze_count() == 0
    assert _collected(instance.registry)


def test_a_process_that_runs_no_job_by_time_schedules_nothing(clock: FixedClock) -> None:
    instance = Instance(
        clock, [declared("billing.remind", every="1s")], InMemoryLock(clock), start=False
    )

    sleeps = run_until(clock, START + timedelta(minutes=5), instance.beat())

    assert instance.sent == []
    assert set(sleeps) == {3600.0}


def test_a_disabled_job_is_never_sent_while_the_others_are(clock: FixedClock) -> None:
    jobs = [
        declared("billing.remind", every="15m", enabled=False),
        declared("billing.export", every="15m"),
    ]
    instance = Instance(clock, jobs, InMemoryLock(clock))

    run_until(clock, START + timedelta(minutes=20), instance.beat())

    assert [item.task for item in instance.sent] == ["billing.export", "billing.export"]


# --- several beats ---------------------------------------------------------------------------


def test_two_beats_sharing_a_lock_send_each_occurrence_once_and_the_other_skips(
    clock: FixedClock,
) -> None:
    lock, run_state = InMemoryLock(clock), InMemoryJobRunState(clock)
    job = declared("notification.send-reminders", cron="0 7 * * *", time_zone="Europe/Paris")
    first, second = (Instance(clock, [job], lock, run_state=run_state) for _ in range(2))

    run_until(clock, datetime(2026, 3, 4, 12, tzinfo=UTC), first.beat(), second.beat())

    assert scheduled(first.sent + second.sent) == [
        "2026-03-03T06:00:00.000Z",
        "2026-03-04T06:00:00.000Z",
    ]
    assert second.outcomes() == [
        ("skipped-locked", "2026-03-03T06:00:00Z"),
        ("skipped-locked", "2026-03-04T06:00:00Z"),
    ]


def _burst(count: int) -> list[CeleryJob]:
    return [declared(f"billing.remind-{index}", every="15m") for index in range(count)]


def _names(sent: list[Sent]) -> list[int]:
    return [int(item.task.rsplit("-", 1)[1]) for item in sent]


def test_a_beat_walks_a_burst_from_the_batch_its_spread_picks(
    clock: FixedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(beat_module, "DISPATCH_BATCH", 2)
    instance = Instance(clock, _burst(8), InMemoryLock(clock))
    picked: list[int] = []

    def spread(batches: int) -> int:
        picked.append(batches)
        return 2

    run_until(clock, START + timedelta(minutes=2), instance.beat(spread=spread))

    assert _names(instance.sent) == [4, 5, 6, 7, 0, 1, 2, 3]
    assert picked == [4]  # no batch held by another beat: no jump


def test_two_beats_on_one_burst_each_take_their_share_first_then_find_the_rest_taken(
    clock: FixedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second beat ticks while the first sends its first message, as two processes do."""
    monkeypatch.setattr(beat_module, "DISPATCH_BATCH", 2)
    lock, run_state = InMemoryLock(clock), InMemoryJobRunState(clock)
    jobs = _burst(8)
    first, second = (Instance(clock, jobs, lock, run_state=run_state) for _ in range(2))
    second_beat = second.beat(spread=lambda batches: 2 if batches == 4 else 0)
    send = first._send_task

    def send_then_let_the_other_tick(name: str, *args: Any, **kwargs: Any) -> None:
        send(name, *args, **kwargs)
        if len(first.sent) == 1:
            second_beat.tick()

    first.app.send_task = send_then_let_the_other_tick
    first_beat = first.beat(spread=lambda batches: 0)

    run_until(clock, START + timedelta(minutes=2), first_beat, second_beat)

    # While the first sent batch 0 it had begun batch 1 ahead (beat_batches): both are its.
    assert _names(first.sent) == [0, 1, 2, 3]
    assert _names(second.sent) == [4, 5, 6, 7]  # batch 0 held by the first, then batch 1
    assert Counter(_names(first.sent + second.sent)) == Counter(range(8))
    assert sorted(second.outcomes()) == [("skipped-locked", "2026-03-02T10:00:00Z")] * 4
    assert sorted(first.outcomes()) == [("skipped-locked", "2026-03-02T10:00:00Z")] * 4


def test_a_burst_s_next_batch_is_begun_while_one_is_published_one_begin_at_a_time(
    clock: FixedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(beat_module, "DISPATCH_BATCH", 2)
    instance = Instance(clock, _burst(6), InMemoryLock(clock))
    store = instance.registry.occurrences()
    begin, send = store.begin, instance.app.send_task
    events: list[str] = []
    asking = threading.Lock()
    last_begun = threading.Event()

    def watched(beginnings: Any, *, releasing: Any = ()) -> Any:
        assert asking.acquire(blocking=False), "two begins at once"
        try:
            events.append("begin " + ",".join(b.job.rsplit("-", 1)[1] for b in beginnings))
            return begin(beginnings, releasing=releasing)
        finally:
            asking.release()
            if beginnings[0].job.endswith("-0"):
                last_begun.set()

    def sent(name: str, *args: Any, **kwargs: Any) -> None:
        if name.endswith("-5"):  # the last batch is begun while this one is published
            assert last_begun.wait(10)
        send(name, *args, **kwargs)
        events.append("sent " + name.rsplit("-", 1)[1])

    monkeypatch.setattr(store, "begin", watched)
    instance.app.send_task = sent

    run_until(clock, START + timedelta(minutes=2), instance.beat(spread=lambda batches: 1))

    # The walk from batch 1, each batch asked once the one before it answered.
    assert [event for event in events if event.startswith("begin")] == [
        "begin 2,3",
        "begin 4,5",
        "begin 0,1",
    ]
    assert _names(instance.sent) == [2, 3, 4, 5, 0, 1]


def test_the_leases_a_burst_leaves_are_released_a_share_with_each_batch_of_the_next(
    clock: FixedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not all in the first begin: 100,000 leases in one script would hold the store."""
    monkeypatch.setattr(beat_module, "DISPATCH_BATCH", 2)
    jobs = [declared(f"billing.remind-{index}", every="1m") for index in range(6)]
    rules = SchedulerRules(late_after_ms=5_000)  # a lease of 09:59 is free by 10:00
    instance = Instance(clock, jobs, InMemoryLock(clock), rules=rules)
    store = instance.registry.occurrences()
    begin = store.begin
    released: list[int] = []

    def counted(beginnings: Any, *, releasing: Any = ()) -> Any:
        released.append(len(releasing))
        return begin(beginnings, releasing=releasing)

    monkeypatch.setattr(store, "begin", counted)

    run_until(clock, START + timedelta(minutes=2, seconds=1), instance.beat())

    assert released == [0, 0, 0, 2, 2, 2]  # 09:59 took six leases; 10:00 frees them, 2 a batch
    assert len(instance.sent) == 12


def test_a_job_that_needs_no_single_instance_is_sent_by_every_beat(clock: FixedClock) -> None:
    lock = SwitchableLock(clock)
    job = declared("billing.warm-cache", every="15m", single_instance=False)
    first, second = (Instance(clock, [job], lock) for _ in range(2))

    run_until(clock, START + timedelta(minutes=2), first.beat(), second.beat())

    assert len(first.sent) == len(second.sent) == 1
    assert lock.acquired == []


# --- the lock store down ---------------------------------------------------------------------


def test_a_lock_store_that_cannot_be_asked_fails_the_occurrence_and_sends_nothing(
    clock: FixedClock,
) -> None:
    lock = SwitchableLock(clock)
    lock.down = True
    instance = Instance(clock, [declared("billing.remind", every="1s")], lock)

    sleeps = run_until(clock, START + timedelta(seconds=3), instance.beat())

    assert instance.sent == []
    assert [run.outcome for run in instance.runs] == [Outcome.FAILED] * 3
    assert {run.error_code for run in instance.runs} == {"JOB_LOCK_UNAVAILABLE"}
    assert isinstance(instance.errors[0].__cause__, LockUnavailableError)  # type: ignore[union-attr]
    assert all(sleep >= 0 for sleep in sleeps)


def test_sends_again_once_the_lock_store_is_back(clock: FixedClock) -> None:
    lock = SwitchableLock(clock)
    instance = Instance(clock, [declared("billing.remind", every="1s")], lock)
    beat = instance.beat()
    lock.down = True
    run_until(clock, START + timedelta(seconds=2), beat)

    lock.down = False
    run_until(clock, START + timedelta(seconds=4), beat)

    assert scheduled(instance.sent) == ["2026-03-02T09:58:33.000Z", "2026-03-02T09:58:34.000Z"]
    assert instance.outcomes() == [
        ("failed", "2026-03-02T09:58:31Z"),
        ("failed", "2026-03-02T09:58:32Z"),
    ]


def test_a_run_state_that_cannot_be_asked_fails_the_occurrence_and_sends_nothing(
    clock: FixedClock,
) -> None:
    instance = Instance(
        clock,
        [declared("billing.remind", every="15m")],
        InMemoryLock(clock),
        run_state=BrokenRunState(clock),
    )

    run_until(clock, START + timedelta(minutes=2), instance.beat())

    assert instance.sent == []
    assert [(run.outcome, run.error_code) for run in instance.runs] == [
        (Outcome.FAILED, "JOB_LOCK_UNAVAILABLE")
    ]


def test_an_unreachable_redis_fails_the_occurrence_without_stopping_beat(
    clock: FixedClock, closed_port_url: str
) -> None:
    client = connect(closed_port_url, timeout=0.2, retries=0)
    instance = Instance(clock, [declared("billing.remind", every="15m")], RedisLock(client))

    run_until(clock, START + timedelta(minutes=17), instance.beat())

    assert instance.sent == []
    assert [(run.outcome, run.error_code) for run in instance.runs] == [
        (Outcome.FAILED, "JOB_LOCK_UNAVAILABLE"),
        (Outcome.FAILED, "JOB_LOCK_UNAVAILABLE"),
    ]


# --- the lock of each occurrence -------------------------------------------------------------


def test_takes_the_lock_named_after_the_job_and_the_instant(clock: FixedClock) -> None:
    lock = SwitchableLock(clock)
    instance = Instance(clock, [declared("billing.remind", every="15m")], lock)

    run_until(clock, START + timedelta(minutes=2), instance.beat())

    assert lock.acquired == ["job:billing.remind:2026-03-02T10:00:00.000Z"]


def test_keeps_each_lease_until_no_beat_can_still_reach_its_occurrence_then_releases_it(
    clock: FixedClock,
) -> None:
    lock = SwitchableLock(clock)
    instance = Instance(clock, [declared("billing.remind", every="1s")], lock)
    beat = instance.beat()

    run_until(clock, START + timedelta(seconds=61), beat)
    assert lock.released == []

    run_until(clock, START + timedelta(seconds=63, milliseconds=500), beat)
    # 09:58:31 is past its minute of lateness at 09:59:32: released while handling that one
    assert lock.released == [
        "job:billing.remind:2026-03-02T09:58:31.000Z",
        "job:billing.remind:2026-03-02T09:58:32.000Z",
    ]


def test_a_lease_that_already_expired_is_forgotten_without_a_round_trip(
    clock: FixedClock,
) -> None:
    lock = SwitchableLock(clock)
    instance = Instance(clock, [declared("billing.remind", every="1h")], lock)

    run_until(clock, START + timedelta(hours=3), instance.beat())

    assert len(instance.sent) == 3
    assert lock.released == []


def test_a_lease_that_cannot_be_released_is_logged_and_beat_goes_on(
    clock: FixedClock, caplog: pytest.LogCaptureFixture
) -> None:
    lock = SwitchableLock(clock)
    instance = Instance(clock, [declared("billing.remind", every="1s")], lock)
    beat = instance.beat()
    run_until(clock, START + timedelta(seconds=61, milliseconds=500), beat)

    lock.down = True
    run_until(clock, START + timedelta(seconds=62, milliseconds=500), beat)

    assert [
        getattr(record, "operation", None)
        for record in caplog.records
        if record.msg == COULD_NOT_FOLLOW
    ] == ["release the lock"]
    assert [run.outcome for run in instance.runs] == [Outcome.FAILED]


# --- checkpoints and restarts ----------------------------------------------------------------


def test_writes_the_last_occurrence_handled_of_each_job(clock: FixedClock) -> None:
    checkpoints = InMemoryJobCheckpoints()
    instance = Instance(
        clock, [declared("billing.remind", every="15m")], InMemoryLock(clock), checkpoints
    )

    run_until(clock, START + timedelta(minutes=20), instance.beat())

    assert checkpoints.read("billing.remind") == datetime(2026, 3, 2, 10, 15, tzinfo=UTC)


def test_the_beat_that_holds_the_lock_writes_the_checkpoint_and_the_others_leave_it(
    clock: FixedClock,
) -> None:
    class CountedCheckpoints(InMemoryJobCheckpoints):
        writes = 0

        def write(self, job: str, handled: datetime) -> None:
            CountedCheckpoints.writes += 1
            super().write(job, handled)

    lock, checkpoints = InMemoryLock(clock), CountedCheckpoints()
    job = declared("billing.remind", every="15m")
    first, second = (Instance(clock, [job], lock, checkpoints) for _ in range(2))

    run_until(clock, START + timedelta(minutes=32), first.beat(), second.beat())

    assert checkpoints.read("billing.remind") == datetime(2026, 3, 2, 10, 30, tzinfo=UTC)
    assert CountedCheckpoints.writes == 3


def test_after_a_restart_a_gap_is_recorded_missed_once_with_its_first_instant(
    clock: FixedClock,
) -> None:
    checkpoints, lock = InMemoryJobCheckpoints(), InMemoryLock(clock)
    job = declared("billing.remind", every="15m")
    before = Instance(clock, [job], lock, checkpoints)
    run_until(clock, START + timedelta(minutes=2), before.beat())

    clock.set(datetime(2026, 3, 2, 11, 7, tzinfo=UTC))  # down from 10:02 to 11:07
    after = Instance(clock, [job], lock, checkpoints)
    run_until(clock, datetime(2026, 3, 2, 11, 20, tzinfo=UTC), after.beat())

    assert after.outcomes() == [("missed", "2026-03-02T10:15:00Z")]
    assert scheduled(after.sent) == ["2026-03-02T11:15:00.000Z"]


def test_jobs_of_one_schedule_each_start_from_their_own_checkpoint(clock: FixedClock) -> None:
    """The set-up makes one plan per schedule and checkpoint, and gives each job its own."""
    schedule = parse_job_schedule({"every": "15m"})
    jobs = [
        replace(declared(f"billing.remind-{index}", every="15m"), schedule=schedule)
        for index in range(3)
    ]
    jobs.append(declared("billing.other", every="15m"))  # an equal schedule, not the same
    checkpoints = InMemoryJobCheckpoints()
    for name in ("billing.remind-0", "billing.remind-1", "billing.other"):
        checkpoints.write(name, datetime(2026, 3, 2, 9, 30, tzinfo=UTC))
    instance = Instance(clock, jobs, InMemoryLock(clock), checkpoints)

    run_until(clock, START + timedelta(minutes=2), instance.beat())

    assert sorted((run.job, run.outcome.value) for run in instance.runs) == [
        ("billing.other", "missed"),
        ("billing.remind-0", "missed"),
        ("billing.remind-1", "missed"),
    ]
    assert sorted((item.task, item.scheduled_at) for item in instance.sent) == [
        (job.name, "2026-03-02T10:00:00.000Z") for job in sorted(jobs, key=lambda j: j.name)
    ]


def test_after_a_restart_run_once_sends_the_latest_missed_occurrence_once(
    clock: FixedClock,
) -> None:
    checkpoints, lock = InMemoryJobCheckpoints(), InMemoryLock(clock)
    job = declared("billing.remind", every="15m", missed="run-once")
    before = Instance(clock, [job], lock, checkpoints)
    run_until(clock, START + timedelta(minutes=2), before.beat())

    clock.set(datetime(2026, 3, 2, 11, 7, tzinfo=UTC))
    after = Instance(clock, [job], lock, checkpoints)
    run_until(clock, datetime(2026, 3, 2, 11, 20, tzinfo=UTC), after.beat())

    assert scheduled(after.sent) == ["2026-03-02T11:00:00.000Z", "2026-03-02T11:15:00.000Z"]
    assert after.sent[0].at == datetime(2026, 3, 2, 11, 7, tzinfo=UTC)
    assert after.runs == []


def test_without_checkpoints_a_restart_starts_from_now(clock: FixedClock) -> None:
    job = declared("billing.remind", every="15m", missed="run-once")
    clock.set(datetime(2026, 3, 2, 11, 7, tzinfo=UTC))
    instance = Instance(clock, [job], InMemoryLock(clock))

    run_until(clock, datetime(2026, 3, 2, 11, 20, tzinfo=UTC), instance.beat())

    assert scheduled(instance.sent) == ["2026-03-02T11:15:00.000Z"]
    assert instance.runs == []


def test_a_beat_that_was_blocked_records_its_gap_missed_and_goes_on(clock: FixedClock) -> None:
    instance = Instance(clock, [declared("billing.remind", every="15m")], InMemoryLock(clock))
    beat = instance.beat()
    beat.tick()

    clock.set(datetime(2026, 3, 2, 10, 31, 30, tzinfo=UTC))  # the process slept past 10:00
    run_until(clock, datetime(2026, 3, 2, 10, 46, tzinfo=UTC), beat)

    # 10:00 and 10:15 are late; 10:30 is 90 s late, past the minute: one gap, then 10:45
    assert instance.outcomes() == [("missed", "2026-03-02T10:00:00Z")]
    assert scheduled(instance.sent) == ["2026-03-02T10:45:00.000Z"]


def test_an_occurrence_reached_a_few_seconds_late_is_still_sent(clock: FixedClock) -> None:
    instance = Instance(clock, [declared("billing.remind", every="15m")], InMemoryLock(clock))
    beat = instance.beat()
    beat.tick()

    clock.set(datetime(2026, 3, 2, 10, 0, 45, tzinfo=UTC))
    beat.tick()

    assert scheduled(instance.sent) == ["2026-03-02T10:00:00.000Z"]


def test_a_checkpoint_that_cannot_be_read_or_written_is_logged_and_the_job_goes_on(
    clock: FixedClock, caplog: pytest.LogCaptureFixture
) -> None:
    class Unreadable(BrokenCheckpoints):
        def read(self, job: str) -> datetime | None:
            raise ConnectionError("the checkpoint store is down")

    instance = Instance(
        clock, [declared("billing.remind", every="15m")], InMemoryLock(clock), Unreadable()
    )

    run_until(clock, START + timedelta(minutes=2), instance.beat())

    assert scheduled(instance.sent) == ["2026-03-02T10:00:00.000Z"]
    assert [
        getattr(record, "operation", None)
        for record in caplog.records
        if record.msg == COULD_NOT_FOLLOW
    ] == [
        "read the checkpoint",
        "write the checkpoint",
    ]


# --- overlap, through the run state shared with workers --------------------------------------


def test_an_occurrence_that_comes_while_the_previous_run_is_in_progress_is_skipped(
    clock: FixedClock,
) -> None:
    instance = Instance(
        clock, [declared("billing.remind", every="15m")], InMemoryLock(clock), worker=False
    )

    run_until(clock, START + timedelta(minutes=17), instance.beat())

    assert scheduled(instance.sent) == ["2026-03-02T10:00:00.000Z"]
    assert instance.outcomes() == [("skipped-overlap", "2026-03-02T10:15:00Z")]


def test_with_overlap_queue_one_occurrence_waits_for_the_worker_and_the_next_is_skipped(
    clock: FixedClock,
) -> None:
    job = declared("billing.remind", every="15m", overlap="queue")
    instance = Instance(clock, [job], InMemoryLock(clock), worker=False, rules=HOUR_LONG_RUNS)

    run_until(clock, START + timedelta(minutes=32), instance.beat())

    assert scheduled(instance.sent) == ["2026-03-02T10:00:00.000Z"]
    assert instance.outcomes() == [("skipped-overlap", "2026-03-02T10:30:00Z")]
    # the worker that ends 10:00 is handed 10:15, the occurrence waiting behind it
    assert instance.registry.run_state.finish(
        job.name, datetime(2026, 3, 2, 10, tzinfo=UTC), ttl_ms=60_000
    ) == datetime(2026, 3, 2, 10, 15, tzinfo=UTC)


def test_a_run_in_progress_on_another_beat_s_worker_is_seen_through_the_shared_state(
    clock: FixedClock,
) -> None:
    lock, run_state = InMemoryLock(clock), InMemoryJobRunState(clock)
    job = declared("billing.remind", every="15m")
    first = Instance(clock, [job], lock, run_state=run_state, worker=False)
    second = Instance(clock, [job], lock, run_state=run_state, worker=False)

    run_until(clock, START + timedelta(minutes=17), first.beat(), second.beat())

    assert scheduled(first.sent + second.sent) == ["2026-03-02T10:00:00.000Z"]
    assert sorted(first.outcomes() + second.outcomes()) == [
        ("skipped-locked", "2026-03-02T10:00:00Z"),
        ("skipped-locked", "2026-03-02T10:15:00Z"),
        ("skipped-overlap", "2026-03-02T10:15:00Z"),
    ]


# --- jitter ----------------------------------------------------------------------------------


def test_jitter_delays_the_send_but_not_the_instant_the_run_is_due(clock: FixedClock) -> None:
    job = declared("billing.remind", every="15m", jitter_ms=10_000)
    instance = Instance(clock, [job], InMemoryLock(clock))
    beat = instance.beat(random=lambda: 0.5)

    sleeps = run_until(clock, START + timedelta(minutes=2), beat)

    (sent,) = instance.sent
    assert sent.scheduled_at == "2026-03-02T10:00:00.000Z"
    assert sent.at == datetime(2026, 3, 2, 10, 0, 5, tzinfo=UTC)
    assert 5.0 in sleeps


def test_jitter_is_drawn_for_each_occurrence(clock: FixedClock) -> None:
    draws = iter([0.0, 0.9, 0.3])
    job = declared("billing.remind", every="15m", jitter_ms=10_000)
    instance = Instance(clock, [job], InMemoryLock(clock))

    run_until(clock, START + timedelta(minutes=32), instance.beat(random=lambda: next(draws)))

    assert [item.at.second for item in instance.sent] == [0, 9, 3]


def test_an_occurrence_still_waiting_its_jitter_when_beat_stops_is_recorded_missed(
    clock: FixedClock,
) -> None:
    job = declared("billing.remind", every="15m", jitter_ms=10_000)
    instance = Instance(clock, [job], InMemoryLock(clock))
    beat = instance.beat(random=lambda: 0.5)
    run_until(clock, datetime(2026, 3, 2, 10, 0, 2, tzinfo=UTC), beat)

    beat.close()

    assert instance.sent == []
    assert instance.outcomes() == [("missed", "2026-03-02T10:00:00Z")]


# --- tick never raises -----------------------------------------------------------------------


def test_a_broker_that_refuses_the_publish_fails_the_occurrence_and_frees_the_job(
    clock: FixedClock,
) -> None:
    job = declared("billing.remind", every="15m")
    instance = Instance(clock, [job], InMemoryLock(clock), worker=False)
    instance.broken_send = ConnectionRefusedError("the broker is down")
    beat = instance.beat()
    run_until(clock, START + timedelta(minutes=2), beat)

    instance.broken_send = None
    run_until(clock, START + timedelta(minutes=17), beat)

    assert [(run.outcome, run.error_code) for run in instance.runs] == [
        (Outcome.FAILED, "UNEXPECTED_ERROR")
    ]
    assert instance.runs[0].correlation_id == "id-1"
    # the run never sent is no longer in progress: 10:15 is sent, not skipped
    assert scheduled(instance.sent) == ["2026-03-02T10:15:00.000Z"]


def test_a_job_whose_next_instant_cannot_be_computed_does_not_stop_the_others(
    clock: FixedClock, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    broken, healthy = declared("billing.broken", every="15m"), declared("billing.ok", every="15m")
    instance = Instance(clock, [broken, healthy], InMemoryLock(clock))

    def failing(parsed: Any, after: datetime) -> datetime:
        if parsed is broken.schedule:
            raise RuntimeError("a bug in the schedule")
        return next_occurrence(parsed, after)

    monkeypatch.setattr("ddd_celery.celery.beat.next_occurrence", failing)
    run_until(clock, START + timedelta(minutes=32), instance.beat())

    # each occurrence is still sent; the next instant is computed again a minute later
    assert Counter(item.task for item in instance.sent) == {"billing.broken": 3, "billing.ok": 3}
    assert any("billing.broken" in record.getMessage() for record in caplog.records)


def test_a_tick_that_fails_outright_is_logged_and_beat_sleeps_instead_of_dying(
    clock: FixedClock, caplog: pytest.LogCaptureFixture
) -> None:
    instance = Instance(clock, [declared("billing.remind", every="15m")], InMemoryLock(clock))
    beat = instance.beat(lazy=True)
    delattr(instance.app, ATTRIBUTE)  # a scheduler ticked with no jobs installed

    assert beat.tick() == 60.0
    assert caplog.records[-1].levelno == logging.ERROR


def test_setting_up_beat_without_installed_jobs_stops_it_at_start() -> None:
    app = Celery("no-jobs", broker="memory://", set_as_current=False)

    with pytest.raises(LookupError, match="install_jobs"):
        JobBeatScheduler(app=app)


# --- the banner, and how celery beat finds the scheduler -------------------------------------


def test_the_banner_of_celery_beat_asks_no_store_anything(
    clock: FixedClock, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    stores = Untouchable()
    instance = Instance(
        clock, [declared("billing.remind", every="15m")], stores, stores, run_state=stores
    )
    program = Beat(app=instance.app, scheduler="ddd", quiet=True)
    service = Service(
        app=instance.app, scheduler_cls=program.scheduler_cls, schedule_filename=program.schedule
    )

    banner = program.startup_info(service)

    assert "JobBeatScheduler" in banner
    assert ". ddd_celery -> 1 job, lock Untouchable" in banner
    assert stores.asked == []
    assert list(tmp_path.iterdir()) == []  # no shelve file either


@pytest.mark.parametrize("name", ["ddd", "ddd_celery.celery.beat:JobBeatScheduler"])
def test_celery_beat_finds_the_scheduler_by_its_alias_or_its_path(
    clock: FixedClock, name: str
) -> None:
    instance = Instance(clock, [declared("billing.remind", every="15m")], InMemoryLock(clock))

    scheduler = Service(app=instance.app, scheduler_cls=name).get_scheduler(lazy=True)

    assert isinstance(scheduler, JobBeatScheduler)
    assert scheduler.max_interval == 3600


# --- beat_schedule entries -------------------------------------------------------------------


def test_a_beat_schedule_entry_is_sent_as_celery_beat_sends_it_under_the_lock(
    clock: FixedClock,
) -> None:
    entries = translate_beat_schedule(
        {
            "Flush cache": {
                "task": "cache.flush",
                "schedule": timedelta(minutes=15),
                "args": (1, BeatLazyFunc(lambda: "evaluated")),
                "kwargs": {"force": True},
                "options": {"queue": "maintenance", "priority": 3},
            }
        },
        timezone="Europe/Paris",
    )
    lock = InMemoryLock(clock)
    first, second = (Instance(clock, entries, lock) for _ in range(2))

    run_until(clock, START + timedelta(minutes=2), first.beat(), second.beat())

    (sent,) = first.sent + second.sent
    assert (sent.task, sent.args, sent.kwargs) == ("cache.flush", [1, "evaluated"], {"force": True})
    assert sent.options == {
        "queue": "maintenance",
        "priority": 3,
        "headers": {"celery_beat_task": True},
    }
    assert sent.at == datetime(2026, 3, 2, 10, tzinfo=UTC)
    assert second.outcomes() == [("skipped-locked", "2026-03-02T10:00:00Z")]


def test_the_entries_install_jobs_finds_in_beat_schedule_are_what_beat_sends(
    clock: FixedClock,
) -> None:
    app = Celery(f"beat-{uuid.uuid4().hex}", broker="memory://", set_as_current=False)
    app.conf.update(
        beat_schedule={"Flush cache": {"task": "cache.flush", "schedule": crontab(minute=0)}},
        timezone="Europe/Paris",
    )
    install_jobs(app, jobs=[], lock=InMemoryLock(clock), clock=clock, environ={})
    sent: list[tuple[str, datetime]] = []
    app.send_task = lambda name, *args, **options: sent.append((name, clock.now()))
    beat = Service(app=app, scheduler_cls=app.conf.beat_scheduler).get_scheduler()

    run_until(clock, START + timedelta(minutes=2), beat)

    assert isinstance(beat, JobBeatScheduler)
    assert sent == [("cache.flush", datetime(2026, 3, 2, 10, tzinfo=UTC))]


def test_an_entry_set_after_install_jobs_is_named_in_a_warning_since_beat_never_sends_it(
    clock: FixedClock, caplog: pytest.LogCaptureFixture
) -> None:
    app = Celery(f"beat-{uuid.uuid4().hex}", broker="memory://", set_as_current=False)
    install_jobs(app, jobs=[], lock=InMemoryLock(clock), clock=clock, environ={})
    app.conf.beat_schedule = {"late entry": {"task": "cache.flush", "schedule": 60}}

    JobBeatScheduler(app=app)

    (warning,) = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert "late entry" in warning.getMessage()


# --- the real Redis --------------------------------------------------------------------------


@pytest.mark.redis
def test_three_beats_sharing_redis_send_each_occurrence_once(
    clock: FixedClock, redis_client: Redis, redis_prefix: str
) -> None:
    jobs = [
        declared("billing.tick", every="1s"),
        declared("notification.send-reminders", cron="* * * * *", time_zone="Europe/Paris"),
    ]
    instances = [
        Instance(
            clock,
            jobs,
            RedisLock(redis_client, prefix=redis_prefix, clock=clock),
            RedisJobCheckpoints(redis_client, prefix=f"{redis_prefix}checkpoint:"),
            run_state=RedisJobRunState(redis_client, prefix=f"{redis_prefix}run:"),
        )
        for _ in range(3)
    ]

    run_until(clock, START + timedelta(seconds=90), *(instance.beat() for instance in instances))

    sent = [item for instance in instances for item in instance.sent]
    ticks = sorted(item.scheduled_at for item in sent if item.task == "billing.tick")
    assert len(ticks) == len(set(ticks)) == 90
    assert sorted(item.scheduled_at for item in sent if item.task != "billing.tick") == [
        "2026-03-02T09:59:00.000Z",
        "2026-03-02T10:00:00.000Z",
    ]
    skipped = [run for instance in instances for run in instance.runs]
    assert {run.outcome for run in skipped} == {Outcome.SKIPPED_LOCKED}
    assert len(skipped) == 2 * 92
    assert (
        redis_client.get(f"{redis_prefix}checkpoint:billing.tick")
        == str(int(datetime(2026, 3, 2, 10, 0, tzinfo=UTC).timestamp() * 1000)).encode()
    )


@pytest.mark.redis
def test_a_beat_restarted_on_redis_checkpoints_runs_the_latest_missed_occurrence_once(
    clock: FixedClock, redis_client: Redis, redis_prefix: str
) -> None:
    job = declared("billing.remind", every="15m", missed="run-once")

    def instance() -> Instance:
        return Instance(
            clock,
            [job],
            RedisLock(redis_client, prefix=redis_prefix, clock=clock),
            RedisJobCheckpoints(redis_client, prefix=f"{redis_prefix}checkpoint:"),
            run_state=RedisJobRunState(redis_client, prefix=f"{redis_prefix}run:"),
        )

    before = instance()
    run_until(clock, START + timedelta(minutes=2), before.beat())
    clock.set(datetime(2026, 3, 2, 11, 7, tzinfo=UTC))  # killed at 10:02, back at 11:07
    after, other = instance(), instance()
    run_until(clock, datetime(2026, 3, 2, 11, 10, tzinfo=UTC), after.beat(), other.beat())

    assert scheduled(after.sent + other.sent) == ["2026-03-02T11:00:00.000Z"]


@pytest.mark.redis
def test_overlap_is_decided_on_the_run_state_in_redis_across_beats(
    clock: FixedClock, redis_client: Redis, redis_prefix: str
) -> None:
    job = declared("billing.remind", every="15m", overlap="queue")
    first, second = (
        Instance(
            clock,
            [job],
            RedisLock(redis_client, prefix=redis_prefix, clock=clock),
            run_state=RedisJobRunState(redis_client, prefix=f"{redis_prefix}run:"),
            worker=False,
            rules=HOUR_LONG_RUNS,
        )
        for _ in range(2)
    )

    run_until(clock, START + timedelta(minutes=32), first.beat(), second.beat())

    assert scheduled(first.sent + second.sent) == ["2026-03-02T10:00:00.000Z"]
    assert ("skipped-overlap", "2026-03-02T10:30:00Z") in first.outcomes() + second.outcomes()
    assert first.registry.run_state.finish(
        job.name, datetime(2026, 3, 2, 10, tzinfo=UTC), ttl_ms=60_000
    ) == datetime(2026, 3, 2, 10, 15, tzinfo=UTC)
