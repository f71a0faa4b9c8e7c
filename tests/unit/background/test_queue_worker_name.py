"""QueueWorker names itself in each claim: the attempt's ``worker`` in the job's history."""

from __future__ import annotations

import os
import socket
from typing import Any

import pytest

from ddd_celery.background import InMemoryJobStore, QueueWorker, StoredJobQueue
from ddd_celery.kernel import FixedClock, FixedExecutionScope
from ddd_celery.testing import ManualJobTimers
from tests.unit.background.jobs import SendReceiptJob, succeed


def worker(store: InMemoryJobStore, clock: FixedClock, **options: Any) -> QueueWorker:
    made = QueueWorker(
        store=store,
        clock=clock,
        scope=FixedExecutionScope(),
        timers=ManualJobTimers(clock),
        **options,
    )
    made.register(SendReceiptJob, lambda: SendReceiptJob(succeed))
    return made


async def test_each_claim_names_the_worker_as_the_attempt_s_worker(
    jobs: StoredJobQueue, store: InMemoryJobStore, clock: FixedClock
) -> None:
    job_id = jobs.enqueue(SendReceiptJob, {})

    await worker(store, clock, name="poller-eu-1").run_due()

    job = store.find(job_id, tenant_id=None)
    assert job is not None
    assert [(attempt.number, attempt.worker) for attempt in job.history] == [(1, "poller-eu-1")]


async def test_a_worker_not_named_is_its_host_and_process(
    jobs: StoredJobQueue, store: InMemoryJobStore, clock: FixedClock
) -> None:
    job_id = jobs.enqueue(SendReceiptJob, {})
    unnamed = worker(store, clock)

    await unnamed.run_due()

    job = store.find(job_id, tenant_id=None)
    assert job is not None
    assert unnamed.name == f"{socket.gethostname()}:{os.getpid()}"
    assert [attempt.worker for attempt in job.history] == [unnamed.name]


@pytest.mark.parametrize("name", ["", "  ", 7])
def test_a_name_that_names_nothing_is_refused(
    name: Any, store: InMemoryJobStore, clock: FixedClock
) -> None:
    with pytest.raises(ValueError, match="name must be a non-empty string"):
        worker(store, clock, name=name)
