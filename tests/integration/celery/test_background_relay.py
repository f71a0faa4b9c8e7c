"""The relay: beat's system job that hands back expired leases and publishes due jobs.

On the in-memory store and a fixed clock, with an app on Celery's in-memory broker: what the
relay publishes is watched through ``before_task_publish``, and beat is ticked by hand.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from background_jobs import ECHO, EchoJob, Seen
from celery import Celery
from celery.bin.base import CLIContext
from celery.signals import before_task_publish
from click.testing import CliRunner
from redis import Redis

from ddd_celery.background import InMemoryJobStore, JobStatus
from ddd_celery.background.observability import LEASE_EXPIRED
from ddd_celery.background.store import Dispatch, JobStore
from ddd_celery.celery import install_jobs
from ddd_celery.celery.background import BackgroundJobs, install_background_jobs
from ddd_celery.celery.background.relay import RELAY_JOB, Relay
from ddd_celery.celery.beat import JobBeatScheduler
from ddd_celery.celery.cli import jobs
from ddd_celery.celery.registry import jobs_of
from ddd_celery.declarations import JobExecution, scheduled
from ddd_celery.kernel import FixedClock, InMemoryLock, Lease, Lock, iso_ms
from ddd_celery.redis import RedisJobStore
from ddd_celery.scheduling.checkpoints import InMemoryJobCheckpoints
from ddd_celery.scheduling.last_runs import InMemoryJobLastRuns
from ddd_celery.scheduling.outcomes import JobRun

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
EVERY_SECOND = "relaytest.every-second"


@scheduled(EVERY_SECOND, every="1s")
class EverySecondJob:
    """A scheduled job beside the relay; beat only sends it here."""

    def run(self, execution: JobExecution) -> None:
        return None


class CountingStore(InMemoryJobStore):
    """The in-memory store, counting the relay's queries."""

    def __init__(self) -> None:
        super().__init__()
        self.take_due_calls = 0

    def take_due(self, *, now: datetime, limit: int, redispatch_after_ms: int) -> list[Dispatch]:
        self.take_due_calls += 1
        return super().take_due(now=now, limit=limit, redispatch_after_ms=redispatch_after_ms)


class HangingStore(CountingStore):
    """The in-memory store whose next ``take_due`` hangs until ``resume``, as a store that
    stopped answering; ``inside`` is set while a call hangs."""

    def __init__(self) -> None:
        super().__init__()
        self.hang = False
        self.inside = threading.Event()
        self._resumed = threading.Event()

    def resume(self) -> None:
        self._resumed.set()

    def take_due(self, *, now: datetime, limit: int, redispatch_after_ms: int) -> list[Dispatch]:
        if self.hang:
            self.hang = False
            self.inside.set()
            self._resumed.wait(5)
            self.inside.clear()
        return super().take_due(now=now, limit=limit, redispatch_after_ms=redispatch_after_ms)


class KeyedLock(InMemoryLock):
    """The in-memory lock, keeping the keys it was asked for."""

    def __init__(self, clock: FixedClock) -> None:
        super().__init__(clock)
        self.asked: list[str] = []

    def acquire(self, key: str, ttl_ms: int) -> Lease | None:
        self.asked.append(key)
        return super().acquire(key, ttl_ms)


@dataclass
class Setup:
    app: Celery
    clock: FixedClock
    store: CountingStore
    registry: BackgroundJobs
    runs: list[JobRun] = field(default_factory=list)
    published: list[tuple[str, dict[str, Any], Any, Any]] = field(default_factory=list)


def build(
    clock: FixedClock,
    store: CountingStore,
    lock: Lock,
    *,
    scheduled_jobs: tuple[type, ...] = (),
    **options: Any,
) -> Setup:
    app = Celery(f"relay-{uuid.uuid4().hex[:8]}", broker="memory://", set_as_current=False)
    runs: list[JobRun] = []
    install_jobs(
        app,
        jobs=list(scheduled_jobs),
        lock=lock,
        clock=clock,
        environ={},
        on_run=lambda run, error, detail: runs.append(run),
    )
    registry = install_background_jobs(
        app, jobs=[EchoJob], store=store, providers={Seen: Seen}, **options
    )
    return Setup(app, clock, store, registry, runs)


@pytest.fixture
def setup() -> Iterator[Setup]:
    clock = FixedClock(START)
    built = build(clock, CountingStore(), InMemoryLock(clock), relay_batch=500)

    def on_publish(sender: str = "", body: Any = None, headers: Any = None, **kw: Any) -> None:
        if sender == ECHO:
            headers = headers or {}
            built.published.append(
                (body[1]["job_id"], body[1], headers.get("eta"), kw.get("routing_key"))
            )

    before_task_publish.connect(on_publish, weak=False)
    yield built
    before_task_publish.disconnect(on_publish)
    built.app.close()


def tick(scheduler: JobBeatScheduler) -> None:
    """Tick beat by hand, then wait for the relay's pass it started on beat's relay thread."""
    scheduler.tick()
    assert scheduler.wait_for_system_jobs(5)


def relay_of(setup: Setup) -> Relay:
    return setup.registry.relay


def test_a_delayed_job_is_published_by_the_relay_once_due_without_an_eta(setup: Setup) -> None:
    queue = setup.registry.queue()
    job_id = queue.enqueue(EchoJob, {"text": "later"}, delay_ms=10_000)
    relay = relay_of(setup)

    assert relay.run().published == 0
    setup.clock.advance(9_999)
    assert relay.run().published == 0
    setup.clock.advance(1)
    assert relay.run().published == 1
    assert relay.run().published == 0  # marked dispatched: not published twice

    assert setup.published == [(job_id, {"job_id": job_id}, None, "celerybg")]


def test_the_relay_publishes_batch_by_batch_until_a_batch_comes_back_short(
    setup: Setup,
) -> None:
    queue = setup.registry.queue()
    ids = [queue.enqueue(EchoJob, {"text": str(i)}, delay_ms=1) for i in range(1_200)]
    setup.clock.advance(1)

    tick = relay_of(setup).run()

    assert tick.published == 1_200
    assert setup.store.take_due_calls == 3  # 500, 500, 200
    assert sorted(job_id for job_id, *_ in setup.published) == sorted(ids)


def test_a_tick_publishes_at_most_max_batches_and_leaves_the_rest_to_the_next(
    setup: Setup,
) -> None:
    queue = setup.registry.queue()
    for i in range(25):
        queue.enqueue(EchoJob, {"text": str(i)}, delay_ms=1)
    setup.clock.advance(1)
    relay = Relay(setup.app, setup.store, setup.clock, batch=10, max_batches=2)

    assert relay.run().published == 20
    assert relay.run().published == 5


def test_a_lease_that_expired_is_handed_back_and_its_job_published_again(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = setup.registry.queue().enqueue(EchoJob, {"text": "orphan"})
    claimed = setup.store.claim_job(job_id, now=setup.clock.now(), lease_ms=3_000)
    assert claimed is not None  # a worker took it, then died
    setup.published.clear()
    caplog.set_level(logging.WARNING, logger="ddd_celery.background")

    setup.clock.advance(2_999)
    assert relay_of(setup).run().expired == 0
    setup.clock.advance(2)
    tick = relay_of(setup).run()

    assert (tick.expired, tick.published) == (1, 1)
    assert [job_id for job_id, *_ in setup.published] == [job_id]
    found = setup.store.find(job_id, tenant_id=None)
    assert found is not None
    assert (found.status, found.last_error_code) == (JobStatus.FAILED, "JOB_INTERRUPTED")
    [line] = [r for r in caplog.records if r.getMessage() == LEASE_EXPIRED]
    assert (line.levelname, line.job_id, line.status) == ("WARNING", job_id, "failed")


def test_the_relay_s_wake_up_of_a_job_handed_back_carries_the_attempts_made_as_retries(
    setup: Setup,
) -> None:
    """Flower shows the wake-up of the job's second attempt with ``retries`` 1."""
    job_id = setup.registry.queue().enqueue(EchoJob, {"text": "orphan"})
    assert setup.store.claim_job(job_id, now=setup.clock.now(), lease_ms=3_000) is not None
    retries: list[Any] = []

    def on_publish(sender: str = "", headers: Any = None, **_: Any) -> None:
        if sender == ECHO:
            retries.append((headers or {}).get("retries"))

    before_task_publish.connect(on_publish, weak=False)
    try:
        setup.clock.advance(3_001)
        tick = relay_of(setup).run()
    finally:
        before_task_publish.disconnect(on_publish)

    assert (tick.expired, tick.published) == (1, 1)
    assert retries == [1]


def test_beat_runs_the_relay_every_second_under_its_lock_and_records_each_occurrence() -> None:
    clock = FixedClock(START)
    lock, store = KeyedLock(clock), CountingStore()
    beats = [build(clock, store, lock) for _ in range(2)]
    schedulers = [JobBeatScheduler(app=beat.app) for beat in beats]
    for scheduler in schedulers:
        tick(scheduler)
    for _ in range(3):
        clock.advance(1_000)
        for scheduler in schedulers:
            tick(scheduler)

    instants = [START + timedelta(seconds=s) for s in (1, 2, 3)]
    keys = [f"job:ddd_celery.relay:{iso_ms(at)}" for at in instants]
    assert lock.asked == [key for key in keys for _ in range(2)]
    outcomes = sorted((run.scheduled_at, run.outcome.value) for beat in beats for run in beat.runs)
    assert outcomes == sorted(
        [(at, "succeeded") for at in instants] + [(at, "skipped-locked") for at in instants]
    )
    assert store.take_due_calls == 3  # one query per instant, by the beat that locked it


def test_beat_records_a_relay_that_fails_and_keeps_ticking(setup: Setup) -> None:
    class DownStore(CountingStore):
        def expire_leases(self, *, now: datetime, limit: int) -> list[Any]:
            raise ConnectionError("the store is down")

    clock = FixedClock(START)
    built = build(clock, DownStore(), InMemoryLock(clock))
    scheduler = JobBeatScheduler(app=built.app)
    tick(scheduler)
    clock.advance(1_000)
    tick(scheduler)
    clock.advance(1_000)
    tick(scheduler)

    assert [(run.outcome.value, run.error_type) for run in built.runs] == [
        ("failed", "ConnectionError"),
        ("failed", "ConnectionError"),
    ]


def test_install_background_jobs_needs_install_jobs_first_and_says_so() -> None:
    app = Celery("bare", broker="memory://", set_as_current=False)
    with pytest.raises(RuntimeError, match=r"install_jobs\(app, jobs=\[\], lock="):
        install_background_jobs(app, jobs=[EchoJob], store=InMemoryJobStore())


def test_the_relay_refuses_sizes_that_are_not_positive(setup: Setup) -> None:
    store: JobStore = setup.store
    with pytest.raises(ValueError, match="batch"):
        Relay(setup.app, store, setup.clock, batch=0)


def test_jobs_list_shows_the_relay_running_in_beat_with_its_last_outcome() -> None:
    clock = FixedClock(START)
    app = Celery(f"relay-{uuid.uuid4().hex[:8]}", broker="memory://", set_as_current=False)
    install_jobs(
        app, jobs=[], lock=InMemoryLock(clock), clock=clock, environ={},
        last_runs=InMemoryJobLastRuns(),
    )  # fmt: skip
    install_background_jobs(app, jobs=[EchoJob], store=InMemoryJobStore(), providers={Seen: Seen})
    scheduler = JobBeatScheduler(app=app)
    tick(scheduler)
    clock.advance(1_000)
    tick(scheduler)

    context = CLIContext(app=app, no_color=True, workdir=None, quiet=False)
    listed = CliRunner().invoke(jobs, ["list"], obj=context)

    [row] = [line for line in listed.output.splitlines() if line.startswith(RELAY_JOB)]
    assert "(runs in beat)" in row
    assert row.endswith(f"succeeded {iso_ms(START + timedelta(seconds=1))}")


def test_beat_logs_an_idle_relay_tick_at_debug_and_one_that_publishes_at_info_with_counts(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    scheduler = JobBeatScheduler(app=setup.app)
    tick(scheduler)  # beat's start lines
    caplog.clear()
    setup.clock.advance(1_000)
    tick(scheduler)  # nothing due
    setup.registry.queue().enqueue(EchoJob, {"text": "later"}, delay_ms=500)
    setup.clock.advance(1_000)
    tick(scheduler)  # the delayed job is due: published

    above_debug = [(r.levelname, r.getMessage()) for r in caplog.records if r.levelno > 10]
    assert above_debug == [
        ("INFO", "Relay: 0 expired leases handed back, 1 background jobs published")
    ]
    ticks = [r for r in caplog.records if r.getMessage().startswith("Relay: ")]
    assert [(r.levelname, r.expired, r.published) for r in ticks] == [
        ("DEBUG", 0, 0),
        ("INFO", 0, 1),
    ]


def test_run_now_of_the_relay_says_it_runs_inside_beat(setup: Setup) -> None:
    context = CLIContext(app=setup.app, no_color=True, workdir=None, quiet=False)
    refused = CliRunner().invoke(jobs, ["run-now", RELAY_JOB], obj=context)

    assert refused.exit_code == 2
    assert "system job that runs inside beat" in refused.output
    assert "beat_schedule" not in refused.output


def test_a_relay_pass_hung_in_its_store_holds_no_scheduled_job_and_its_skips_are_recorded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, store = FixedClock(START), HangingStore()
    built = build(clock, store, InMemoryLock(clock), scheduled_jobs=(EverySecondJob,))
    sent: list[tuple[str, Any]] = []

    def on_publish(sender: str = "", body: Any = None, **_: Any) -> None:
        sent.append((sender, body[1].get("scheduled_at") or body[1].get("job_id")))
        if sender == EVERY_SECOND:  # a worker that runs it in no time
            run_state = jobs_of(built.app).run_state
            run_state.finish(EVERY_SECOND, START.fromisoformat(body[1]["scheduled_at"]), ttl_ms=1)

    before_task_publish.connect(on_publish, weak=False)
    try:
        scheduler = JobBeatScheduler(app=built.app)
        tick(scheduler)
        job_id = built.registry.queue().enqueue(EchoJob, {"text": "due"}, delay_ms=500)
        store.hang = True
        clock.advance(1_000)
        scheduler.tick()
        assert store.inside.wait(5), "the relay's pass asked the store"
        for _ in range(4):
            assert store.inside.is_set(), "beat's tick returned while the pass hangs"
            clock.advance(1_000)
            scheduler.tick()
        assert not [job for task, job in sent if task == ECHO]
        store.resume()
        assert scheduler.wait_for_system_jobs(5)
        clock.advance(1_000)
        tick(scheduler)
    finally:
        before_task_publish.disconnect(on_publish)
        built.app.close()

    seconds = [iso_ms(START + timedelta(seconds=s)) for s in range(1, 7)]
    assert [at for task, at in sent if task == EVERY_SECOND] == seconds
    assert [job for task, job in sent if task == ECHO] == [job_id]
    relay = [(iso_ms(run.scheduled_at), run.outcome.value) for run in built.runs]
    assert sorted(relay) == [
        (seconds[0], "succeeded"),
        *[(at, "skipped-overlap") for at in seconds[1:5]],
        (seconds[5], "succeeded"),
    ]
    [still, ended] = [r.getMessage() for r in caplog.records if r.name == "ddd_celery.celery.beat"]
    assert still.startswith(
        f"beat: the pass of {RELAY_JOB} due at {seconds[0]} is still running at {seconds[1]}"
    )
    assert ended.startswith(f"beat: the pass of {RELAY_JOB} due at {seconds[0]} ended after ")
    assert ended.endswith("; 4 occurrences were skipped behind it")


def test_relay_passes_failing_in_a_row_say_why_once_and_once_more_when_one_succeeds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class FlakyStore(CountingStore):
        down = True

        def expire_leases(self, *, now: datetime, limit: int) -> list[Any]:
            if self.down:
                raise ConnectionError("the store at 10.0.0.7:6379 refused the connection")
            return super().expire_leases(now=now, limit=limit)

    clock, store = FixedClock(START), FlakyStore()
    built = build(clock, store, InMemoryLock(clock))
    scheduler = JobBeatScheduler(app=built.app)
    tick(scheduler)
    for second in range(1, 6):
        store.down = second <= 3
        clock.advance(1_000)
        tick(scheduler)

    outcomes = [run.outcome.value for run in built.runs]
    assert outcomes == ["failed"] * 3 + ["succeeded"] * 2, "each pass is still recorded"
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name.endswith(".beat")]
    assert lines == [
        (
            "ERROR",
            f"beat: the pass of {RELAY_JOB} due at {iso_ms(START + timedelta(seconds=1))} "
            "failed: ConnectionError: the store at 10.0.0.7:6379 refused the connection; the "
            "next that fail the same way are recorded failed without this line, until one "
            "succeeds",
        ),
        (
            "WARNING",
            f"beat: the pass of {RELAY_JOB} due at {iso_ms(START + timedelta(seconds=4))} "
            f"succeeded; 3 passes failed since {iso_ms(START + timedelta(seconds=1))}",
        ),
    ]


def test_beat_stops_without_waiting_for_a_relay_pass_hung_in_its_store() -> None:
    clock, store = FixedClock(START), HangingStore()
    built = build(clock, store, InMemoryLock(clock))
    scheduler = JobBeatScheduler(app=built.app)
    tick(scheduler)
    store.hang = True
    clock.advance(1_000)
    scheduler.tick()
    assert store.inside.wait(5)

    scheduler.close()

    assert store.inside.is_set(), "closed while the pass still hangs"
    assert built.runs == [], "the hung pass is recorded when it ends, if beat still runs"
    store.resume()
    assert scheduler.wait_for_system_jobs(5)
    assert [run.outcome.value for run in built.runs] == ["succeeded"]


@pytest.mark.redis
def test_a_job_record_gone_from_redis_is_dropped_and_said_and_the_pass_publishes_the_rest(
    redis_client: Redis, redis_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A Redis that evicts keys loses a job's record while its indexes still name it: the pass
    drops those entries, says so at warning with the count, and publishes every other job."""
    clock = FixedClock(START)
    store = RedisJobStore(redis_client, prefix=redis_prefix)
    built = build(clock, store, InMemoryLock(clock))  # type: ignore[arg-type]
    queue = built.registry.queue()
    gone = queue.enqueue(EchoJob, {"text": "gone"}, delay_ms=1)
    kept = queue.enqueue(EchoJob, {"text": "kept"}, delay_ms=1)
    redis_client.delete(f"{redis_prefix}job:{gone}")
    clock.advance(1)
    caplog.set_level(logging.WARNING, logger="ddd_celery.background")

    tick = relay_of(built).run()

    assert (tick.published, tick.dropped) == (1, 1)
    [line] = [r for r in caplog.records if getattr(r, "dropped", None) is not None]
    assert (line.levelname, line.dropped) == ("WARNING", 1)
    assert "record is gone" in line.getMessage()
    assert relay_of(built).run().dropped == 0
    found = store.find(kept, tenant_id=None)
    assert found is not None
    assert found.status is JobStatus.QUEUED
    built.app.close()


def test_a_beat_restarted_records_the_relay_s_gap_missed_at_debug_and_a_job_s_at_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, checkpoints = FixedClock(START), InMemoryJobCheckpoints()

    def beat() -> tuple[JobBeatScheduler, list[JobRun]]:
        app = Celery(f"relay-{uuid.uuid4().hex[:8]}", broker="memory://", set_as_current=False)
        runs: list[JobRun] = []
        install_jobs(
            app, jobs=[EverySecondJob], lock=InMemoryLock(clock), checkpoints=checkpoints,
            clock=clock, environ={}, on_run=lambda run, error, detail: runs.append(run),
        )  # fmt: skip
        install_background_jobs(
            app, jobs=[EchoJob], store=InMemoryJobStore(), providers={Seen: Seen}
        )
        return JobBeatScheduler(app=app), runs

    before, _ = beat()
    tick(before)
    clock.advance(1_000)
    tick(before)
    clock.advance(5_000)  # beat restarted 5 s later
    caplog.set_level(logging.DEBUG, logger="ddd_celery.scheduling")
    after, runs = beat()
    tick(after)

    missed = {run.job for run in runs if run.outcome.value == "missed"}
    assert missed == {RELAY_JOB, EVERY_SECOND}
    lines = {
        (r.job, r.levelname) for r in caplog.records if r.getMessage() == "Scheduled job missed"
    }
    assert lines == {(RELAY_JOB, "DEBUG"), (EVERY_SECOND, "WARNING")}
