"""Running one occurrence of a job: its scope, its tenants, its outcome.

Shared by the drivers that run jobs: the in-process scheduler awaits it on its loop (sync jobs
in a worker thread); a Celery worker runs an async job on its thread's loop and a sync one with
``run_attempt_sync``, in the task's own thread (where the soft time limit can interrupt it) and
with no loop at all.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ddd_celery.declarations.execution import JobExecution
from ddd_celery.declarations.options import JobOptions, Tenancy
from ddd_celery.kernel.abort import AbortSignal
from ddd_celery.kernel.actor import system_actor
from ddd_celery.kernel.scope import ExecutionContext, ExecutionScope
from ddd_celery.kernel.tenants import TenantDirectory
from ddd_celery.scheduling.errors import InvalidJobScheduleError
from ddd_celery.scheduling.outcomes import JobRun, Outcome, context_of, error_code_of

SCHEDULE_ORIGIN = "schedule"
_MS = timedelta(milliseconds=1)

JobCallable = Callable[[JobExecution], Any]
"""What a scheduler runs: ``run(execution)``, sync or async."""

SyncCaller = Callable[[JobCallable, JobExecution], Awaitable[Any]]
"""How a driver calls a sync job: ``asyncio.to_thread`` on a loop that serves other jobs."""


async def call_inline(run: JobCallable, execution: JobExecution) -> Any:
    """Call a sync job in this thread: right where nothing else waits on the loop."""
    return run(execution)


def deadline_of(started_at: datetime, options: JobOptions) -> datetime | None:
    """The start plus ``timeout_ms``, when the job has one."""
    if options.timeout_ms is None:
        return None
    return started_at + timedelta(milliseconds=options.timeout_ms)


def tenants_of(
    job: str, options: JobOptions, directory: TenantDirectory | None
) -> list[str | None]:
    """Who an occurrence runs for: nobody in particular, or each tenant of the directory."""
    if options.tenancy is Tenancy.GLOBAL:
        return [None]
    if directory is None:
        raise InvalidJobScheduleError("a per-tenant job needs a tenant directory", job=job)
    return list(directory.tenants())


def require_tenants(job: str, options: JobOptions, directory: TenantDirectory | None) -> None:
    """Refuse, at registration, a per-tenant job on a scheduler without tenants."""
    if options.tenancy is Tenancy.PER_TENANT and directory is None:
        raise InvalidJobScheduleError(
            "tenancy 'per-tenant' needs a scheduler given a tenant directory (tenants=...)",
            job=job,
        )


@dataclass(frozen=True, slots=True)
class Attempt:
    """One occurrence to run, as the driver prepared it."""

    job: str
    scheduled_at: datetime
    started_at: datetime
    correlation_id: str
    signal: AbortSignal
    deadline: datetime | None
    tenants: Sequence[str | None]
    attempt: int = 1


@dataclass(frozen=True, slots=True)
class AttemptResult:
    """The first error of the occurrence (after every tenant had its run) and whose it was."""

    error: BaseException | None
    tenant_id: str | None


SUCCEEDED = AttemptResult(None, None)


async def run_attempt(
    attempt: Attempt,
    run: JobCallable,
    scope: ExecutionScope,
    *,
    call_sync: SyncCaller = call_inline,
) -> AttemptResult:
    """Run the job once per tenant, one after the other, each in its own execution scope.

    A tenant that fails does not stop the others; an aborted signal stops before the next one.
    """
    is_async = inspect.iscoroutinefunction(run)
    first: AttemptResult | None = None
    for tenant in attempt.tenants:
        if attempt.signal.aborted:
            # The abort is the occurrence's (timeout, stop), not this tenant's: it never ran.
            first = first or AttemptResult(attempt.signal.reason, None)
            break
        execution = execution_for(attempt, tenant)
        with scope.open(context_for(attempt, tenant)):
            try:
                result = await run(execution) if is_async else await call_sync(run, execution)
                if inspect.isawaitable(result):
                    await result
            except Exception as error:
                first = first or AttemptResult(error, tenant)
    return first or SUCCEEDED


def run_attempt_sync(
    attempt: Attempt, run: Callable[[JobExecution], object], scope: ExecutionScope
) -> AttemptResult:
    """``run_attempt`` of a sync job, called in this thread with no event loop.

    A loop run per message costs more than a short job (a task, a signal handler, two turns
    of the loop); a sync job does not need one. ``run`` awaits what it returns, if it must.
    """
    first: AttemptResult | None = None
    for tenant in attempt.tenants:
        if attempt.signal.aborted:
            first = first or AttemptResult(attempt.signal.reason, None)
            break
        execution = execution_for(attempt, tenant)
        with scope.open(context_for(attempt, tenant)):
            try:
                run(execution)
            except Exception as error:
                first = first or AttemptResult(error, tenant)
    return first or SUCCEEDED


def execution_for(attempt: Attempt, tenant: str | None) -> JobExecution:
    """What the job is given for the run of ``tenant``."""
    return JobExecution(
        scheduled_at=attempt.scheduled_at,
        started_at=attempt.started_at,
        signal=attempt.signal,
        attempt=attempt.attempt,
        tenant_id=tenant,
    )


def context_for(attempt: Attempt, tenant: str | None) -> ExecutionContext:
    """The scope of a run: origin schedule, the job's system actor, its correlation id."""
    return ExecutionContext(
        origin=SCHEDULE_ORIGIN,
        actor=system_actor(attempt.job),
        correlation_id=attempt.correlation_id,
        scheduled_at=attempt.scheduled_at,
        deadline=attempt.deadline,
        tenant_id=tenant,
    )


def ran(
    attempt: Attempt, ended_at: datetime, error: BaseException | None, tenant: str | None
) -> JobRun:
    """The record of an occurrence that ran: succeeded, or failed with the code of ``error``."""
    return JobRun(
        job=attempt.job,
        context=context_of(attempt.job),
        scheduled_at=attempt.scheduled_at,
        outcome=Outcome.SUCCEEDED if error is None else Outcome.FAILED,
        started_at=attempt.started_at,
        duration_ms=(ended_at - attempt.started_at) / _MS,
        error_code=None if error is None else error_code_of(error),
        error_type=None if error is None else type(error).__name__,
        correlation_id=attempt.correlation_id,
        tenant_id=tenant,
    )


def not_run(
    job: str,
    scheduled_at: datetime,
    outcome: Outcome,
    *,
    error: BaseException | None = None,
    correlation_id: str | None = None,
) -> JobRun:
    """The record of an occurrence that did not run: missed, skipped, or failed on its lock."""
    return JobRun(
        job=job,
        context=context_of(job),
        scheduled_at=scheduled_at,
        outcome=outcome,
        error_code=None if error is None else error_code_of(error),
        error_type=None if error is None else type(error).__name__,
        correlation_id=correlation_id,
    )
