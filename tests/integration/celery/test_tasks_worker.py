"""Job tasks on a real Celery worker (in this process, on the solo and threads pools) over Redis.

Messages are sent as beat sends them: the task named after the job, on its queue, the
occurrence in JSON kwargs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery.contrib.testing.worker import start_worker
from celery_support import AppFactory, Runs, TaskEnds
from probe_jobs import ASYNC, SYNC, AsyncProbeJob, Probe, SyncProbeJob

from ddd_celery.celery import CeleryJobs, OccurrenceMessage, install_jobs
from ddd_celery.declarations import JobExecution
from ddd_celery.kernel import InMemoryLock, SequentialIdGenerator, SystemClock
from ddd_celery.scheduling.occurrence import run_ttl_ms
from ddd_celery.scheduling.run_state import Claim

AT = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
NEXT = AT + timedelta(hours=1)


def wire(
    make_app: AppFactory, probe: Probe, runs: Runs, **overrides: Any
) -> tuple[Any, CeleryJobs]:
    app = make_app()
    clock = SystemClock()
    options: dict[str, Any] = {
        "jobs": [SyncProbeJob, AsyncProbeJob],
        "providers": {Probe: lambda: probe},
        "lock": InMemoryLock(clock),
        "clock": clock,
        "ids": SequentialIdGenerator("corr-"),
        "on_run": runs,
        "environ": {},
        "routes": {SYNC: f"{app.main}-probe", ASYNC: f"{app.main}-probe"},
    }
    return app, install_jobs(app, **(options | overrides))


@contextmanager
def worker(app: Any, pool: str = "solo", concurrency: int = 1) -> Iterator[TaskEnds]:
    """A worker of ``app`` in a thread of this process, and the count of tasks it ended."""
    ends = TaskEnds(app)
    try:
        with start_worker(
            app, pool=pool, concurrency=concurrency, perform_ping_check=False, loglevel="WARNING"
        ):
            yield ends
    finally:
        ends.close()


def send(app: Any, registry: CeleryJobs, name: str, message: dict[str, Any]) -> None:
    app.send_task(name, kwargs=message, queue=registry.jobs[name].queue, serializer="json")


@pytest.mark.parametrize("name", [SYNC, ASYNC])
def test_a_worker_runs_the_occurrence_beat_sends_and_records_it(
    make_app: AppFactory, runs: Runs, name: str
) -> None:
    probe = Probe()
    app, registry = wire(make_app, probe, runs)

    with worker(app):
        send(app, registry, name, OccurrenceMessage(AT, "corr-beat").to_kwargs())
        [record] = runs.wait_for(1)

    assert (record.job, record.outcome, record.scheduled_at) == (name, "succeeded", AT)
    assert record.correlation_id == "corr-beat"
    [seen] = probe.seen
    assert seen.thread != threading.main_thread().name


def test_a_message_that_cannot_be_read_does_not_stop_the_worker(
    make_app: AppFactory, runs: Runs
) -> None:
    probe = Probe()
    app, registry = wire(make_app, probe, runs)

    with worker(app) as ends:
        send(app, registry, SYNC, {"scheduled_at": "tomorrow", "correlation_id": "corr-bad"})
        send(app, registry, SYNC, OccurrenceMessage(AT, "corr-good").to_kwargs())
        ends.wait_for(2)

    assert [r.correlation_id for r in runs.records] == ["corr-good"]
    assert len(probe.seen) == 1


def test_the_occurrence_queued_behind_a_run_is_sent_on_when_the_run_ends(
    make_app: AppFactory, runs: Runs
) -> None:
    probe = Probe()
    app, registry = wire(make_app, probe, runs, settings={SYNC: {"overlap": "queue"}})
    state = registry.run_state
    assert state.claim(SYNC, AT, queue=True, ttl_ms=60_000) is Claim.STARTED
    assert state.claim(SYNC, NEXT, queue=True, ttl_ms=60_000) is Claim.QUEUED

    with worker(app):
        send(app, registry, SYNC, OccurrenceMessage(AT, "corr-beat").to_kwargs())
        first, queued = runs.wait_for(2)

    assert (first.scheduled_at, first.outcome) == (AT, "succeeded")
    assert (queued.scheduled_at, queued.outcome) == (NEXT, "succeeded")
    assert queued.correlation_id == "corr-1"
    assert [s.execution.scheduled_at for s in probe.seen] == [AT, NEXT]
    assert state.running(SYNC) is None


def test_a_timeout_on_the_solo_pool_is_failed_job_timeout_recorded_once(
    make_app: AppFactory, runs: Runs
) -> None:
    def ignore_signal(execution: JobExecution) -> None:
        runs.wait_for(1)

    app, registry = wire(
        make_app, Probe(behaviour=ignore_signal), runs, settings={SYNC: {"timeout_ms": 100}}
    )

    with worker(app, pool="solo") as ends:
        send(app, registry, SYNC, OccurrenceMessage(AT, "corr-beat").to_kwargs())
        ends.wait_for(1)

    [record] = runs.records
    assert (record.outcome, record.error_code) == ("failed", "JOB_TIMEOUT")


def test_a_timed_out_run_frees_the_job_for_the_occurrence_queued_behind_while_it_goes_on(
    make_app: AppFactory, runs: Runs
) -> None:
    release = threading.Event()

    def block_the_first(execution: JobExecution) -> None:
        if execution.scheduled_at == AT:
            release.wait(10)

    probe = Probe(behaviour=block_the_first)
    app, registry = wire(
        make_app, probe, runs, settings={SYNC: {"timeout_ms": 200, "overlap": "queue"}}
    )
    ttl_ms = run_ttl_ms(registry.jobs[SYNC].schedule.options, registry.rules)
    registry.run_state.claim(SYNC, AT, queue=True, ttl_ms=ttl_ms)  # as beat claims it
    registry.run_state.claim(SYNC, NEXT, queue=True, ttl_ms=ttl_ms)

    with worker(app, pool="threads", concurrency=2) as ends:
        send(app, registry, SYNC, OccurrenceMessage(AT, "corr-beat").to_kwargs())
        timed_out, queued = runs.wait_for(2)
        still_blocked = not release.is_set()
        release.set()
        ends.wait_for(2)

    assert still_blocked
    assert (timed_out.scheduled_at, timed_out.outcome, timed_out.error_code) == (
        AT,
        "failed",
        "JOB_TIMEOUT",
    )
    assert (queued.scheduled_at, queued.outcome) == (NEXT, "succeeded")
    assert len(runs.records) == 2


def test_an_occurrence_whose_message_expired_unrun_is_missed_and_frees_the_job(
    make_app: AppFactory, runs: Runs
) -> None:
    probe = Probe()
    app, registry = wire(make_app, probe, runs, settings={SYNC: {"overlap": "queue"}})
    ttl_ms = run_ttl_ms(registry.jobs[SYNC].schedule.options, registry.rules)
    registry.run_state.claim(SYNC, AT, queue=True, ttl_ms=ttl_ms)
    registry.run_state.claim(SYNC, NEXT, queue=True, ttl_ms=ttl_ms)

    with worker(app):
        app.send_task(
            SYNC,
            kwargs=OccurrenceMessage(AT, "corr-beat").to_kwargs(),
            queue=registry.jobs[SYNC].queue,
            expires=datetime.now(UTC) - timedelta(seconds=1),
        )
        expired, queued = runs.wait_for(2)

    assert (expired.scheduled_at, expired.outcome, expired.correlation_id) == (
        AT,
        "missed",
        "corr-beat",
    )
    assert (queued.scheduled_at, queued.outcome) == (NEXT, "succeeded")
    assert [s.execution.scheduled_at for s in probe.seen] == [NEXT]
