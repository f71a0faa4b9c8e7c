"""Retention applied by the relay: finished jobs purged in bounded batches after publishing.

The relay's pass publishes the due jobs first, then purges the succeeded and cancelled jobs past
their retention (``ddd_celery_keep_*_ms``, a week by default; dead jobs kept unless a setting
asks), ``ddd_celery_purge_batch`` a call, at most ``max_batches`` calls and within its time
budget. On the in-memory store, the real Redis and the real PostgreSQL, with a fixed clock and a
Celery app on the in-memory broker.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from background_jobs import ECHO, EchoJob, Seen
from celery import Celery
from celery.signals import before_task_publish
from redis import Redis
from sqlalchemy import Engine

from ddd_celery.background import InMemoryJobStore
from ddd_celery.background.store import (
    FINISHED_STATUSES,
    Dispatch,
    EnqueuedBy,
    JobStatus,
    JobStore,
    NewJob,
)
from ddd_celery.celery import install_jobs
from ddd_celery.celery.background import install_background_jobs
from ddd_celery.celery.background.relay import (
    PURGE_IDLE_MS,
    PURGED_COUNTER,
    RELAY_JOB,
    Relay,
    Retention,
)
from ddd_celery.celery.beat import JobBeatScheduler
from ddd_celery.celery.config import JobsConfigError, read_config
from ddd_celery.kernel import FixedClock, InMemoryLock, iso_ms
from ddd_celery.kernel.errors import StoreUnavailableError
from ddd_celery.kernel.metrics import InMemoryMetrics
from ddd_celery.redis import RedisJobStore
from ddd_celery.scheduling.outcomes import JobRun
from ddd_celery.sql import SqlJobStore, create_tables, drop_tables

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
WEEK = timedelta(days=7)
QUEUE = "celerybg"

SUCCEEDED, CANCELLED, DEAD = JobStatus.SUCCEEDED, JobStatus.CANCELLED, JobStatus.DEAD


def app_with(**settings: Any) -> Celery:
    app = Celery(f"retention-{uuid.uuid4().hex[:8]}", broker="memory://", set_as_current=False)
    app.conf.update({f"ddd_celery_{name}": value for name, value in settings.items()})
    return app


def still_relay(app: Celery, store: JobStore, clock: FixedClock, **options: Any) -> Relay:
    """A relay whose passes take no time on the purge's budget: on a loaded machine a first
    publish can spend the 250 ms, and these tests are not about the budget."""
    return Relay(app, store, clock, monotonic=lambda: 0.0, **options)


def new_job(job_id: str, at: datetime, *, max_attempts: int = 1) -> NewJob:
    return NewJob(
        id=job_id,
        name=ECHO,
        queue=QUEUE,
        payload={"text": job_id},
        enqueued_at=at,
        run_at=at,
        max_attempts=max_attempts,
        enqueued_by=EnqueuedBy(),
    )


def finished(store: JobStore, status: JobStatus, at: datetime, count: int) -> list[str]:
    """``count`` jobs that finished ``status`` at ``at``, through the store's own commands."""
    ids = []
    for _ in range(count):
        job_id = f"{status.value}-{uuid.uuid4().hex[:12]}"
        store.add(new_job(job_id, at), dispatched=True)
        if status is CANCELLED:
            assert store.cancel(job_id, tenant_id=None, now=at)
        else:
            claimed = store.claim_job(job_id, now=at, lease_ms=60_000)
            assert claimed is not None
            if status is SUCCEEDED:
                store.complete(claimed.lease, now=at)
            else:
                store.fail(
                    claimed.lease,
                    now=at,
                    error_code="UNEXPECTED_ERROR",
                    error_type="RuntimeError",
                    retry_at=None,
                )
        ids.append(job_id)
    return ids


def due(store: JobStore, at: datetime, count: int) -> list[str]:
    """``count`` jobs due at ``at`` that no message woke yet: the relay's to publish."""
    ids = [f"due-{uuid.uuid4().hex[:12]}" for _ in range(count)]
    for job_id in ids:
        store.add(new_job(job_id, at, max_attempts=3), dispatched=False)
    return ids


def kept(store: JobStore, ids: Collection[str]) -> list[str]:
    return [job_id for job_id in ids if store.find(job_id, tenant_id=None) is not None]


class CountingStore(InMemoryJobStore):
    """The in-memory store, keeping each purge it was asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.purges: list[tuple[tuple[JobStatus, ...], int | None]] = []

    def purge_finished(
        self,
        *,
        before: datetime,
        statuses: Collection[JobStatus] = FINISHED_STATUSES,
        limit: int | None = None,
    ) -> int:
        self.purges.append((tuple(statuses), limit))
        return super().purge_finished(before=before, statuses=statuses, limit=limit)


class Ticking:
    """A monotonic clock of seconds that moves only when the store's calls say they took time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class SlowStore(CountingStore):
    """Each ``take_due`` and ``purge_finished`` takes the time given, on ``ticking``."""

    def __init__(self, ticking: Ticking, *, take_due_s: float, purge_s: float) -> None:
        super().__init__()
        self.ticking, self.take_due_s, self.purge_s = ticking, take_due_s, purge_s

    def take_due(self, *, now: datetime, limit: int, redispatch_after_ms: int) -> list[Dispatch]:
        self.ticking.now += self.take_due_s
        return super().take_due(now=now, limit=limit, redispatch_after_ms=redispatch_after_ms)

    def purge_finished(
        self,
        *,
        before: datetime,
        statuses: Collection[JobStatus] = FINISHED_STATUSES,
        limit: int | None = None,
    ) -> int:
        self.ticking.now += self.purge_s
        return super().purge_finished(before=before, statuses=statuses, limit=limit)


@pytest.fixture(
    params=[
        "memory",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("postgresql", marks=pytest.mark.postgres),
    ]
)
def any_store(request: pytest.FixtureRequest) -> Iterator[JobStore]:
    """The in-memory store, ``RedisJobStore`` and ``SqlJobStore`` on PostgreSQL, each empty."""
    if request.param == "memory":
        yield InMemoryJobStore()
    elif request.param == "redis":
        client: Redis = request.getfixturevalue("redis_client")
        prefix = request.getfixturevalue("redis_prefix")
        yield RedisJobStore(client, prefix=f"{prefix}bg:")
    else:
        engine: Engine = request.getfixturevalue("engine")
        prefix = f"test_{uuid.uuid4().hex[:12]}_"
        create_tables(engine, prefix)
        yield SqlJobStore(engine, prefix=prefix)
        drop_tables(engine, prefix)


def test_the_relay_purges_old_finished_jobs_in_bounded_batches_keeps_dead_and_recent_ones_and_publishes_each_pass(  # noqa: E501
    any_store: JobStore,
) -> None:
    store, clock = any_store, FixedClock(START)
    old_succeeded = finished(store, SUCCEEDED, START - WEEK - timedelta(days=1), 25)
    old_cancelled = finished(store, CANCELLED, START - WEEK - timedelta(days=1), 15)
    dead = finished(store, DEAD, START - timedelta(days=30), 5)
    recent = finished(store, SUCCEEDED, START - WEEK + timedelta(minutes=1), 5)
    # The pass's time stands still: this is about the batches' bound, not the time budget,
    # which a loaded machine's PostgreSQL spent after two calls.
    relay = still_relay(app_with(purge_batch=10), store, clock, max_batches=3)

    ticks = []
    for _ in range(3):
        due(store, clock.now(), 2)
        ticks.append(relay.run())
        clock.advance(1_000)

    assert [tick.published for tick in ticks] == [2, 2, 2], "every pass published its due jobs"
    assert [dict(tick.purged) for tick in ticks] == [
        {SUCCEEDED: 20, CANCELLED: 10},  # three calls of 10: succeeded, cancelled, succeeded
        {SUCCEEDED: 5, CANCELLED: 5},  # both come back short: nothing more to purge
        {},
    ]
    assert kept(store, old_succeeded + old_cancelled) == []
    assert kept(store, dead) == dead, "a dead job waits for retry-dead or a purge by hand"
    assert kept(store, recent) == recent, "younger than a week"
    stats = store.stats()
    assert [stats.total(status) for status in (SUCCEEDED, CANCELLED, DEAD)] == [5, 0, 5]
    assert stats.total(JobStatus.QUEUED) == 6


def test_a_pass_that_purged_says_it_at_info_by_status_and_the_counter_counts_each_status(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, clock, metrics = InMemoryJobStore(), FixedClock(START), InMemoryMetrics()
    app = app_with()
    install_jobs(app, jobs=[], lock=InMemoryLock(clock), clock=clock, environ={})
    registry = install_background_jobs(
        app,
        jobs=[EchoJob],
        store=store,
        providers={Seen: Seen},
        metrics=metrics,
        relay_every_ms=60_000,  # a purge budget of 15 s: a loaded machine's publish leaves it
    )
    finished(store, SUCCEEDED, START - WEEK - timedelta(milliseconds=1), 2)
    finished(store, CANCELLED, START - WEEK - timedelta(hours=1), 1)
    finished(store, SUCCEEDED, START - WEEK, 1)  # finished a week ago to the millisecond: kept
    caplog.set_level(logging.INFO, logger="ddd_celery.background")

    purged = registry.relay.run().purged
    left = store.stats().total(SUCCEEDED)
    clock.advance(1_000)
    registry.relay.run()  # a pass that purges nothing: no line

    assert purged == {SUCCEEDED: 2, CANCELLED: 1}
    lines = [r for r in caplog.records if r.getMessage().startswith("Relay: purged")]
    assert [(r.levelname, r.getMessage()) for r in lines] == [
        (
            "INFO",
            "Relay: purged 3 finished background jobs (succeeded 2, cancelled 1 finished before "
            f"{iso_ms(START - WEEK)})",
        )
    ]
    assert (lines[0].job, lines[0].purged) == (RELAY_JOB, 3)
    assert lines[0].purged_by_status == {"succeeded": 2, "cancelled": 1}
    assert metrics.counter(PURGED_COUNTER, status="succeeded") == 2
    assert metrics.counter(PURGED_COUNTER, status="cancelled") == 1
    assert left == 1


def test_the_purge_runs_in_what_publishing_left_of_the_pass_budget_and_never_before_it() -> None:
    ticking = Ticking()
    store = SlowStore(ticking, take_due_s=0.05, purge_s=0.1)
    clock = FixedClock(START)
    finished(store, SUCCEEDED, START - WEEK - timedelta(days=1), 50)
    app = app_with(purge_batch=10, keep_cancelled_ms=None)
    relay = Relay(app, store, clock, purge_budget_ms=250, monotonic=ticking)

    purged = []
    for _ in range(3):
        ticking.now = 0.0
        purged.append(relay.run().purged.get(SUCCEEDED, 0))
        clock.advance(1_000)

    # 0.05 s publishing, then a call at 0.05 and one at 0.15: at 0.25 the budget is spent
    assert purged == [20, 20, 10]
    assert store.purges == [((SUCCEEDED,), 10)] * 6  # the last came back empty: drained


def test_a_pass_whose_publishing_spent_the_budget_leaves_the_purge_to_the_next_pass() -> None:
    ticking = Ticking()
    store = SlowStore(ticking, take_due_s=0.3, purge_s=0.01)
    clock = FixedClock(START)
    old = finished(store, SUCCEEDED, START - WEEK - timedelta(days=1), 3)
    relay = Relay(app_with(), store, clock, purge_budget_ms=250, monotonic=ticking)

    first = relay.run()
    asked = list(store.purges)
    clock.advance(1_000)
    ticking.now = 0.0
    store.take_due_s = 0.0
    second = relay.run()

    assert (dict(first.purged), asked) == ({}, [])
    assert second.purged == {SUCCEEDED: 3}
    assert kept(store, old) == []


def test_after_a_purge_that_found_nothing_more_the_next_purge_is_a_minute_later() -> None:
    store, clock = CountingStore(), FixedClock(START)
    relay = still_relay(app_with(), store, clock)
    relay.run()
    asked = len(store.purges)
    later = finished(store, SUCCEEDED, START - WEEK + timedelta(seconds=30), 1)

    for _ in range(59):
        clock.advance(1_000)
        relay.run()
    idle = len(store.purges)
    clock.advance(1_000)
    tick = relay.run()

    assert asked == 2, "one call each for succeeded and cancelled, both short"
    assert idle == asked, "no purge asked for during the minute"
    assert tick.purged == {SUCCEEDED: 1}
    assert kept(store, later) == []


def test_a_failing_purge_is_said_once_and_again_when_one_succeeds_and_publishing_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class FlakyStore(CountingStore):
        down = True

        def purge_finished(
            self,
            *,
            before: datetime,
            statuses: Collection[JobStatus] = FINISHED_STATUSES,
            limit: int | None = None,
        ) -> int:
            if self.down:
                raise StoreUnavailableError("could not purge at 10.0.0.7:5432: job 'x' quoted")
            return super().purge_finished(before=before, statuses=statuses, limit=limit)

    store, clock = FlakyStore(), FixedClock(START)
    old = finished(store, SUCCEEDED, START - WEEK - timedelta(days=1), 2)
    relay = still_relay(app_with(), store, clock, redispatch_after_ms=3_600_000)
    caplog.set_level(logging.INFO, logger="ddd_celery.background")

    ticks = []
    for minute in range(4):
        store.down = minute < 3
        due(store, clock.now(), 1)
        ticks.append(relay.run())
        clock.advance(PURGE_IDLE_MS)

    assert [tick.published for tick in ticks] == [1, 1, 1, 1]
    assert [dict(tick.purged) for tick in ticks] == [{}, {}, {}, {SUCCEEDED: 2}]
    assert kept(store, old) == []
    lines = [
        (r.levelname, r.getMessage())
        for r in caplog.records
        if r.getMessage().startswith("Relay: the purge")
    ]
    assert lines == [
        (
            "ERROR",
            "Relay: the purge of finished background jobs failed (StoreUnavailableError); "
            "publishing goes on and the purge is tried again in 60 s; the next that fail the "
            "same way are not said, until one succeeds",
        ),
        (
            "WARNING",
            "Relay: the purge of finished background jobs succeeded again; 3 failed since "
            f"{iso_ms(START)}",
        ),
    ]
    [failed] = [r for r in caplog.records if r.levelname == "ERROR"]
    assert failed.error_type == "StoreUnavailableError"
    assert "10.0.0.7" not in failed.getMessage(), "an error's message may quote data"


def test_each_retention_is_a_setting_and_a_batch_of_0_turns_the_purge_off() -> None:
    store, clock = CountingStore(), FixedClock(START)
    month_ago = START - timedelta(days=30)
    succeeded = finished(store, SUCCEEDED, month_ago, 2)
    cancelled = finished(store, CANCELLED, month_ago, 2)
    dead = finished(store, DEAD, month_ago, 2)
    day = 24 * 3_600_000
    chosen = still_relay(
        app_with(keep_succeeded_ms=None, keep_cancelled_ms=40 * day, keep_dead_ms=14 * day),
        store,
        clock,
    )

    assert chosen.run().purged == {DEAD: 2}
    assert (kept(store, succeeded), kept(store, cancelled)) == (succeeded, cancelled)
    assert kept(store, dead) == []
    asked = len(store.purges)
    assert still_relay(app_with(purge_batch=0), store, clock).run().purged == {}
    assert len(store.purges) == asked, "no purge asked for"


@pytest.mark.parametrize(
    ("setting", "value", "said"),
    [
        ("ddd_celery_keep_succeeded_ms", 0, "ddd_celery_keep_succeeded_ms"),
        ("ddd_celery_keep_cancelled_ms", "7d", "ddd_celery_keep_cancelled_ms"),
        ("ddd_celery_keep_dead_ms", -1, "ddd_celery_keep_dead_ms"),
        ("ddd_celery_purge_batch", -1, "ddd_celery_purge_batch: Input should be greater"),
        ("ddd_celery_purge_batch", 1_000_000, "ddd_celery_purge_batch: Input should be less"),
    ],
)
def test_a_retention_setting_that_cannot_be_used_is_refused_naming_it(
    setting: str, value: object, said: str
) -> None:
    with pytest.raises(JobsConfigError, match=said):
        read_config({setting: value})


def test_the_default_retention_keeps_succeeded_and_cancelled_jobs_a_week_and_dead_ones() -> None:
    retention = Retention.of(read_config({}))

    assert retention.keep_ms == {SUCCEEDED: 604_800_000, CANCELLED: 604_800_000}
    assert retention.batch == 1_000


def test_a_retention_refuses_a_status_that_is_not_finished_and_sizes_out_of_range() -> None:
    with pytest.raises(ValueError, match="only finished jobs"):
        Retention({JobStatus.QUEUED: 1_000})
    with pytest.raises(ValueError, match="positive int of ms"):
        Retention({SUCCEEDED: 0})
    with pytest.raises(ValueError, match="batch"):
        Retention({}, batch=-1)
    with pytest.raises(ValueError, match="purge_budget_ms"):
        Relay(app_with(), InMemoryJobStore(), FixedClock(START), purge_budget_ms=0)


def test_beat_purges_in_the_relay_pass_and_records_the_pass_succeeded() -> None:
    clock, store = FixedClock(START), InMemoryJobStore()
    app = app_with()
    runs: list[JobRun] = []
    install_jobs(
        app, jobs=[], lock=InMemoryLock(clock), clock=clock, environ={},
        on_run=lambda run, error, detail: runs.append(run),
    )  # fmt: skip
    install_background_jobs(app, jobs=[EchoJob], store=store, providers={Seen: Seen})
    old = finished(store, CANCELLED, START - WEEK - timedelta(seconds=1), 3)
    waiting = due(store, START, 1)
    sent: list[str] = []

    def on_publish(sender: str = "", body: Any = None, **_: Any) -> None:
        if sender == ECHO:
            sent.append(body[1]["job_id"])

    before_task_publish.connect(on_publish, weak=False)
    try:
        scheduler = JobBeatScheduler(app=app)
        scheduler.tick()
        clock.advance(1_000)
        scheduler.tick()
        assert scheduler.wait_for_system_jobs(5)
        scheduler.close()
    finally:
        before_task_publish.disconnect(on_publish)
        app.close()

    assert kept(store, old) == []
    assert sent == waiting, "published by the same pass"
    assert [(run.job, run.outcome.value) for run in runs] == [(RELAY_JOB, "succeeded")]
