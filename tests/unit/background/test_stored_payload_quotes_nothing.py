"""A stored payload that no longer validates against its model: the attempt's error names the job
and its id, never the stored value, and nothing chained to it quotes the value either."""

from __future__ import annotations

import json
from typing import Any

from ddd_celery.background import (
    BackgroundJobRun,
    InMemoryJobStore,
    InvalidEnqueueError,
    JobStatus,
    QueueWorker,
    StoredJobQueue,
)
from ddd_celery.kernel import FixedClock, FixedExecutionScope
from ddd_celery.testing import ManualJobTimers
from tests.unit.background.jobs import CompileStatementsJob

SECRET = "vanished-secret"


async def test_a_stored_payload_its_model_no_longer_takes_is_named_never_quoted(
    store: InMemoryJobStore, jobs: StoredJobQueue, clock: FixedClock, scope: FixedExecutionScope
) -> None:
    errors: list[BaseException | None] = []

    def on_run(run: BackgroundJobRun, error: BaseException | None, *detail: Any) -> None:
        errors.append(error)

    worker = QueueWorker(
        store=store, clock=clock, scope=scope, timers=ManualJobTimers(clock), on_run=on_run
    )
    worker.register(CompileStatementsJob, lambda: CompileStatementsJob(lambda p, e: None))
    job_id = jobs.enqueue(CompileStatementsJob, {"month": "2026-10"})
    store._jobs[job_id].payload = json.dumps({"month": SECRET})  # a damaged or migrated row

    await worker.run_due()

    [error] = errors
    assert isinstance(error, InvalidEnqueueError)
    assert str(error) == (
        f"job 'ledger.compile-statements': the payload stored for job {job_id!r} no longer "
        "validates: the payload's field 'month' is refused by StatementPayload "
        "(string_pattern_mismatch)"
    )
    assert (error.code, error.field) == ("INVALID_ENQUEUE", "month")
    seen: BaseException | None = error
    while seen is not None:
        assert SECRET not in f"{seen} {seen!r} {seen.args!r}"
        seen = seen.__cause__ or seen.__context__
    assert error.__context__ is None
    dead = store.find(job_id, tenant_id=None)
    assert dead is not None
    assert (dead.status, dead.last_error_code) == (JobStatus.DEAD, "INVALID_ENQUEUE")
