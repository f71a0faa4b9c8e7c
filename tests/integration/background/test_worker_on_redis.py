"""QueueWorker and StoredJobQueue on the real Redis store: the same specs hold on it.

Each test keeps its keys under a prefix of its own and deletes them afterwards: other tests
share the server. Time passes on a fixed clock, never in real time.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from redis import Redis
from services import REDIS_URL

from ddd_celery import BackgroundJobExecution
from ddd_celery.background import (
    BackgroundJobRun,
    JobInterruptedError,
    QueueWorker,
    StoredJobQueue,
)
from ddd_celery.kernel import (
    FixedClock,
    FixedExecutionScope,
    InMemoryUnitOfWork,
    SequentialIdGenerator,
)
from ddd_celery.redis import RedisJobStore, connect
from ddd_celery.testing import ManualJobTimers
from tests.unit.background.conftest import work
from tests.unit.background.jobs import CompileStatementsJob, Gate, ImportPatientsJob

pytestmark = pytest.mark.redis


@pytest.fixture
def redis_store() -> Iterator[RedisJobStore]:
    client: Redis = connect(REDIS_URL)
    prefix = f"test:background-worker:{uuid.uuid4().hex}:"
    yield RedisJobStore(client, prefix=prefix)
    for key in client.scan_iter(match=f"{prefix}*"):
        client.delete(key)
    client.close()


@pytest.fixture
def runs() -> list[BackgroundJobRun]:
    return []


def worker_on(
    store: RedisJobStore,
    clock: FixedClock,
    scope: FixedExecutionScope,
    runs: list[Any],
    **options: Any,
) -> QueueWorker:
    return QueueWorker(
        store=store,
        clock=clock,
        scope=scope,
        timers=ManualJobTimers(clock),
        on_run=lambda run, error, detail: runs.append(run),
        random=lambda: 0.999_999,
        **options,
    )


async def test_a_job_enqueued_in_a_unit_of_work_is_retried_dead_and_revived_on_redis(
    redis_store: RedisJobStore, clock: FixedClock, scope: FixedExecutionScope, runs: list[Any]
) -> None:
    unit_of_work = InMemoryUnitOfWork()
    jobs = StoredJobQueue(
        store=redis_store,
        clock=clock,
        ids=SequentialIdGenerator(),
        scope=scope,
        unit_of_work=unit_of_work,
    )
    attempts: list[tuple[int, Any]] = []

    def fails_three_times(payload: Any, execution: BackgroundJobExecution) -> None:
        attempts.append((execution.attempt, execution.checkpoint))
        execution.save_checkpoint({"tried": len(attempts)})
        if len(attempts) <= 3:
            raise RuntimeError("the statement service is down")

    worker = worker_on(redis_store, clock, scope, runs)
    worker.register(CompileStatementsJob, lambda: CompileStatementsJob(fails_three_times))
    with scope.open(work(tenant="t-1")), unit_of_work.begin():
        job_id = jobs.enqueue(CompileStatementsJob, {"month": "2026-10"})
        assert redis_store.find(job_id, tenant_id=None) is None

    for wait_ms in (0, 1_000, 2_000):
        clock.advance(wait_ms)
        await worker.run_due()

    assert [run.status.value for run in runs] == ["retried", "retried", "dead"]
    with scope.open(work(tenant="t-2")):
        assert jobs.find(job_id) is None
        assert jobs.retry_dead(job_id) is False
    with scope.open(work(tenant="t-1")):
        assert jobs.retry_dead(job_id) is True
    await worker.run_due()

    assert [run.status.value for run in runs][-1] == "succeeded"
    assert attempts == [(1, None), (2, {"tried": 1}), (3, {"tried": 2}), (1, {"tried": 3})]
    with scope.open(work(tenant="t-1")):
        view = jobs.find(job_id)
    assert view is not None
    assert (view.status, view.attempts) == ("succeeded", 1)


async def test_cancelling_a_running_job_on_redis_interrupts_it_at_the_next_heartbeat(
    redis_store: RedisJobStore, clock: FixedClock, scope: FixedExecutionScope, runs: list[Any]
) -> None:
    jobs = StoredJobQueue(store=redis_store, clock=clock, ids=SequentialIdGenerator(), scope=scope)
    gate = Gate()
    timers = ManualJobTimers(clock)
    worker = QueueWorker(
        store=redis_store,
        clock=clock,
        scope=scope,
        timers=timers,
        lease_ms=3_000,
        on_run=lambda run, error, detail: runs.append(run),
    )
    worker.register(ImportPatientsJob, lambda: ImportPatientsJob(gate))
    job_id = jobs.enqueue(ImportPatientsJob, {})
    await worker.start()
    await timers.settle()

    assert jobs.cancel(job_id) is True
    await timers.advance(1_000)

    [execution] = gate.started
    assert isinstance(execution.signal.reason, JobInterruptedError)
    assert [run.status.value for run in runs] == ["interrupted"]
    gate.open()
    await worker.stop()


async def test_two_workers_on_redis_run_each_job_once(
    redis_store: RedisJobStore, clock: FixedClock, scope: FixedExecutionScope, runs: list[Any]
) -> None:
    jobs = StoredJobQueue(store=redis_store, clock=clock, ids=SequentialIdGenerator(), scope=scope)
    ran: list[int] = []

    async def note(payload: Any, execution: BackgroundJobExecution) -> None:
        await asyncio.sleep(0)
        ran.append(payload["n"])

    workers = [worker_on(redis_store, clock, scope, runs, concurrency=4) for _ in range(2)]
    for worker in workers:
        worker.register(ImportPatientsJob, lambda: ImportPatientsJob(note))
    for index in range(30):
        jobs.enqueue(ImportPatientsJob, {"n": index})

    await asyncio.gather(*(worker.run_due() for worker in workers))

    assert sorted(ran) == list(range(30))
    assert len(runs) == 30
