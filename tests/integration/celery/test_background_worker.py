"""Background jobs on a real Celery worker (in this process, solo pool) over the real Redis.

The store is ``RedisJobStore`` under the test's prefix; the jobs are those of
``background_jobs``. What the app publishes is watched through Celery's ``before_task_publish``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from background_jobs import (
    ECHO,
    FLAKY,
    LONG,
    SLOW,
    STUCK,
    Attempts,
    EchoJob,
    FlakyJob,
    LongJob,
    Seen,
    SlowJob,
    StuckJob,
)
from celery.contrib.testing.worker import start_worker
from celery.signals import before_task_publish, task_failure, task_retry
from celery_support import AppFactory, TaskEnds
from redis import Redis

from ddd_celery.background import JobStatus, RunStatus
from ddd_celery.background.observability import COULD_NOT_FOLLOW
from ddd_celery.celery import install_jobs
from ddd_celery.celery.background import BackgroundJobs, install_background_jobs
from ddd_celery.kernel import InMemoryLock, SystemClock
from ddd_celery.kernel.unit_of_work import InMemoryUnitOfWork
from ddd_celery.redis.job_store import RedisJobStore

NAMES = (ECHO, FLAKY, SLOW, STUCK, LONG)
LEASE_MS = 1_000


@dataclass
class Wired:
    app: Any
    registry: BackgroundJobs
    seen: Seen
    attempts: Attempts
    published: list[tuple[str, Any, Any]]
    failures: list[BaseException]
    retries: list[BaseException]

    def relay(self) -> None:
        self.registry.relay.run()


@pytest.fixture
def wired(make_app: AppFactory, redis_client: Redis, redis_prefix: str) -> Iterator[Wired]:
    app = make_app()
    clock = SystemClock()
    install_jobs(app, jobs=[], lock=InMemoryLock(clock), clock=clock, environ={})
    seen, attempts = Seen(), Attempts()
    registry = install_background_jobs(
        app,
        jobs=[EchoJob, FlakyJob, SlowJob, StuckJob, LongJob],
        store=RedisJobStore(redis_client, prefix=f"{redis_prefix}bg:"),
        providers={Seen: lambda: seen},
        on_run=attempts,
        lease_ms=LEASE_MS,
        heartbeat_ms=100,
    )
    published: list[tuple[str, Any, Any]] = []
    failures: list[BaseException] = []
    retries: list[BaseException] = []

    def on_publish(sender: str = "", body: Any = None, headers: Any = None, **_: Any) -> None:
        if sender in NAMES:
            args, kwargs, _embed = body
            published.append((sender, (list(args), kwargs), (headers or {}).get("eta")))

    def on_failure(sender: Any = None, exception: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is app:
            failures.append(exception)

    def on_retry(sender: Any = None, reason: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is app:
            retries.append(reason)

    before_task_publish.connect(on_publish, weak=False)
    task_failure.connect(on_failure, weak=False)
    task_retry.connect(on_retry, weak=False)
    try:
        yield Wired(app, registry, seen, attempts, published, failures, retries)
    finally:
        before_task_publish.disconnect(on_publish)
        task_failure.disconnect(on_failure)
        task_retry.disconnect(on_retry)


@contextmanager
def worker(app: Any, pool: str = "solo", concurrency: int = 1) -> Iterator[TaskEnds]:
    ends = TaskEnds(app)
    try:
        with start_worker(
            app,
            pool=pool,
            concurrency=concurrency,
            perform_ping_check=False,
            loglevel="WARNING",
        ):
            yield ends
    finally:
        ends.close()


def test_a_job_enqueued_in_a_unit_of_work_is_published_after_commit_and_runs_once(
    wired: Wired,
) -> None:
    unit_of_work = InMemoryUnitOfWork()
    queue = wired.registry.queue(unit_of_work=unit_of_work)
    with worker(wired.app):
        with unit_of_work.begin():
            job_id = queue.enqueue(EchoJob, {"text": "hello"})
            assert wired.published == []
        [run] = wired.attempts.wait_for(1)

    assert wired.published == [(ECHO, ([], {"job_id": job_id}), None)]
    assert (run.job_id, run.status, run.attempt) == (job_id, RunStatus.SUCCEEDED, 1)
    assert wired.seen.of("echo") == [("hello", job_id, 1)]
    found = wired.registry.store.find(job_id, tenant_id=None)
    assert found is not None
    assert found.status is JobStatus.SUCCEEDED


def test_a_rolled_back_unit_of_work_neither_stores_nor_publishes_its_job(wired: Wired) -> None:
    unit_of_work = InMemoryUnitOfWork()
    queue = wired.registry.queue(unit_of_work=unit_of_work)
    enqueued: list[str] = []

    def use_case() -> None:
        with unit_of_work.begin():
            enqueued.append(queue.enqueue(EchoJob, {"text": "never"}))
            raise RuntimeError("the use case fails")

    with pytest.raises(RuntimeError):
        use_case()
    [job_id] = enqueued

    assert wired.published == []
    assert wired.registry.store.find(job_id, tenant_id=None) is None


def test_a_failing_job_ends_its_task_in_retry_is_retried_by_the_relay_then_dead_then_retried(
    wired: Wired,
) -> None:
    queue = wired.registry.queue()
    with worker(wired.app) as ends:
        job_id = queue.enqueue(FlakyJob, {})
        wired.attempts.wait_for(1)
        wired.relay()  # its 1 ms backoff has passed: the relay publishes the retry
        runs = wired.attempts.wait_for(2)
        assert queue.retry_dead(job_id)
        runs = wired.attempts.wait_for(3)
        ends.wait_for(3)

    assert [(run.attempt, run.status) for run in runs] == [
        (1, RunStatus.RETRIED),
        (2, RunStatus.DEAD),
        (1, RunStatus.RETRIED),
    ]
    # a retried attempt is Celery's retry (task_retry), only the one that kills it a failure
    assert [type(error).__name__ for error in wired.retries] == [
        "AttemptFailedError",
        "AttemptFailedError",
    ]
    assert [type(error).__name__ for error in wired.failures] == ["AttemptsExhaustedError"]
    # the task's error names the code and type, never the job's message (it quotes data)
    assert all("secret" not in str(error) for error in wired.failures + wired.retries)
    assert "UNEXPECTED_ERROR (RuntimeError)" in str(wired.retries[0])
    assert all(eta is None for _, _, eta in wired.published)
    assert len(wired.published) == 3


def test_messages_that_cannot_be_read_or_name_no_job_are_refused_and_the_worker_goes_on(
    wired: Wired, caplog: pytest.LogCaptureFixture
) -> None:
    app, queue = wired.app, wired.registry.queue()
    caplog.set_level(logging.ERROR, logger="ddd_celery.background")
    with worker(app) as ends:
        app.send_task(ECHO, kwargs={"job_id": "j", "junk": 1}, queue="celerybg")
        app.send_task(ECHO, args=["j"], queue="celerybg")
        app.send_task(ECHO, kwargs={"job_id": 42}, queue="celerybg")
        app.send_task(ECHO, kwargs={"job_id": "no-such-job"}, queue="celerybg")
        job_id = queue.enqueue(EchoJob, {"text": "after"})
        wired.attempts.wait_for(1)
        ends.wait_for(5)

    assert wired.seen.of("echo") == [("after", job_id, 1)]
    refusals = [record.operation for record in caplog.records if hasattr(record, "operation")]
    assert len(refusals) == 4, refusals
    assert "unexpected fields ['junk']" in refusals[0]
    assert "keyword arguments only" in refusals[1]
    assert "job_id must be a non-empty string" in refusals[2]
    assert "the store has no job with this id" in refusals[3]
    assert wired.failures == []


def test_cancel_of_a_queued_job_leaves_its_message_without_effect(wired: Wired) -> None:
    queue = wired.registry.queue()
    job_id = queue.enqueue(EchoJob, {"text": "cancelled"})
    assert queue.cancel(job_id)
    with worker(wired.app) as ends:
        ends.wait_for(1)

    assert wired.seen.of("echo") == []
    assert wired.attempts.runs == []
    view = queue.find(job_id)
    assert view is not None
    assert view.status == "cancelled"


def test_cancel_of_a_running_job_aborts_its_signal_on_the_worker(wired: Wired) -> None:
    queue = wired.registry.queue()
    with worker(wired.app):
        job_id = queue.enqueue(SlowJob, {})
        assert wired.seen.started.wait(10)
        assert queue.cancel(job_id)
        [run] = wired.attempts.wait_for(1)

    assert wired.seen.of("slow") == ["JobInterruptedError"]
    assert (run.status, run.error_code) == (RunStatus.INTERRUPTED, "JOB_INTERRUPTED")
    view = queue.find(job_id)
    assert view is not None
    assert view.status == "cancelled"
    assert wired.failures == []


def test_an_attempt_past_its_timeout_is_aborted_by_the_watchdog_on_solo(wired: Wired) -> None:
    queue = wired.registry.queue()
    with worker(wired.app):
        job_id = queue.enqueue(StuckJob, {})
        [run] = wired.attempts.wait_for(1)

    assert wired.seen.of("stuck") == ["JobTimeoutError"]
    assert (run.job_id, run.status, run.error_code) == (job_id, RunStatus.DEAD, "JOB_TIMEOUT")
    assert [type(error).__name__ for error in wired.failures] == ["AttemptsExhaustedError"]


@pytest.mark.parametrize(("pool", "concurrency"), [("solo", 1), ("threads", 4)])
def test_heartbeats_keep_the_leases_of_attempts_longer_than_them(
    wired: Wired, pool: str, concurrency: int
) -> None:
    queue = wired.registry.queue()
    expired = 0
    with worker(wired.app, pool, concurrency):
        ids = {queue.enqueue(LongJob, {}) for _ in range(concurrency)}
        assert wired.seen.started.wait(10)
        # the relay sweeps expired leases all along
        while len(wired.attempts.runs) < concurrency:
            expired += wired.registry.relay.run().expired
            time.sleep(0.1)

    runs = wired.attempts.runs
    assert {run.job_id for run in runs} == ids
    assert {(run.attempt, run.status) for run in runs} == {(1, RunStatus.SUCCEEDED)}
    assert all(run.duration_ms > LEASE_MS for run in runs)
    assert wired.seen.of("long") == [None] * concurrency
    assert expired == 0


def test_the_wake_up_of_a_job_this_worker_has_no_task_for_is_recorded_naming_it(
    wired: Wired, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="ddd_celery.background")
    with worker(wired.app):
        wired.app.send_task("celerybg.not-here", kwargs={"job_id": "job-7"}, queue="celerybg")
        wired.app.send_task("celerybg.not-a-job", kwargs={"other": 1}, queue="celerybg")
        job_id = wired.registry.queue().enqueue(EchoJob, {"text": "next"})
        wired.attempts.wait_for(1)

    refusals = [r for r in caplog.records if r.getMessage() == COULD_NOT_FOLLOW]
    assert [(r.job, r.job_id) for r in refusals] == [("celerybg.not-here", "job-7")]
    assert wired.seen.of("echo") == [("next", job_id, 1)]
