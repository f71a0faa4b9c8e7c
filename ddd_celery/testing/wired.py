"""The jobs of a Celery app as ``install_jobs`` wired them, on a ``ManualJobScheduler``.

A spec about time then runs what production runs: the declared classes, built from the app's
providers inside each run's scope, on the schedules its settings and environment give, for the
tenants of its directory. Only the clock, the lock, the scope and the ids are the spec's, so
nothing is sent to a broker and no store is asked.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

from ddd_celery.celery.app import observe_with
from ddd_celery.celery.registry import CeleryJob, CeleryJobs, jobs_of
from ddd_celery.declarations.execution import JobExecution
from ddd_celery.kernel.clock import FixedClock
from ddd_celery.kernel.ids import IdGenerator, SequentialIdGenerator
from ddd_celery.kernel.lock import InMemoryLock, Lock
from ddd_celery.kernel.metrics import Metrics
from ddd_celery.kernel.reporting import ErrorReporter
from ddd_celery.kernel.scope import ExecutionScope, FixedExecutionScope
from ddd_celery.scheduling.execution import JobCallable
from ddd_celery.scheduling.observability import OnRun, report_failed_runs
from ddd_celery.testing.manual import ManualJobScheduler


def manual_scheduler_for(
    app: Any,
    *,
    clock: FixedClock | None = None,
    lock: Lock | None = None,
    scope: ExecutionScope | None = None,
    ids: IdGenerator | None = None,
    logger: logging.Logger | None = None,
    metrics: Metrics | None = None,
    on_run: OnRun | None = None,
    errors: ErrorReporter | None = None,
) -> ManualJobScheduler:
    """A ``ManualJobScheduler`` holding every declared job of ``app``, as wired; not started.

    Each job keeps the schedule and options it runs with in production (its declaration, then
    ``settings``, then ``JOB_<CONTEXT>_<JOB>_ENABLED``), is built at each run from the app's
    providers, and runs for the app's tenants; ``late_after_ms`` and ``lock_ttl_ms`` are the
    app's. ``clock`` defaults to the app's own when it is a ``FixedClock`` (so what the jobs
    read moves with ``advance``); ``lock``, ``scope`` and ``ids`` default to an
    ``InMemoryLock`` on it, a ``FixedExecutionScope`` and ``SequentialIdGenerator``. Entries of
    ``beat_schedule`` are left out: their tasks are the app's own. ``errors`` receives the
    runs that failed unexpectedly, as ``install_jobs(..., errors=...)`` wires it, besides
    ``on_run``. ``app`` may also be the ``CeleryJobs`` ``install_jobs`` returned. Raises
    ``ValueError`` without a fixed clock.
    """
    registry = app if isinstance(app, CeleryJobs) else jobs_of(app)
    if clock is None:
        if not isinstance(registry.clock, FixedClock):
            raise ValueError(
                "a manual scheduler moves a FixedClock: pass manual_scheduler_for(app, "
                "clock=FixedClock(...)), or build the app with one"
            )
        clock = registry.clock
    scheduler = ManualJobScheduler(
        clock=clock,
        lock=lock or InMemoryLock(clock),
        scope=scope or FixedExecutionScope(),
        ids=ids or SequentialIdGenerator(),
        tenants=registry.tenants,
        logger=logger,
        metrics=metrics,
        late_after_ms=registry.rules.late_after_ms,
        lock_ttl_ms=registry.rules.lock_ttl_ms,
        on_run=observe_with(on_run, None if errors is None else report_failed_runs(errors)),
    )
    for job in registry.jobs.values():
        if job.declared:
            scheduler.register(name=job.name, schedule=job.schedule, run=_built(registry, job))
    return scheduler


def _built(registry: CeleryJobs, job: CeleryJob) -> JobCallable:
    """``run(execution)`` of a job built from the app's providers at each run, in its scope."""
    if inspect.iscoroutinefunction(getattr(job.job_class, "run", None)):

        async def run_async(execution: JobExecution) -> Any:
            return await registry.build(job).run(execution)

        return run_async

    def run_sync(execution: JobExecution) -> Any:
        return registry.build(job).run(execution)

    return run_sync
