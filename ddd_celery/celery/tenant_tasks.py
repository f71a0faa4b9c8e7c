"""The worker side of a spread occurrence: the task that runs one tenant, and the join it ends.

Each tenant run is an ``OccurrenceRun`` of one tenant, in the occurrence's scope (its
correlation id, its deadline, counted from the occurrence's start), that concludes into the
join instead of recording the occurrence: it logs its own line with its tenant
(``Scheduled job tenant run succeeded`` or ``failed``), strikes its tenant off, and, when it
was the last, records the occurrence's one outcome and ends its run. A tenant run that starts
past the deadline does not call the job: it is struck off ``JOB_TIMEOUT``, as in turn no tenant
starts once the signal is aborted. A tenant task ends in failure when its own tenant failed, so
Celery's failure path sees each failing tenant.

A prefork child that dies with a tenant in hand: the worker's main process gets Celery's
``task_failure`` with ``WorkerLostError`` and strikes the tenant off as failed with it, so the
join still ends. A whole worker lost (its main process killed) leaves the occurrence running
until its time to live, as any run of a dead worker.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from celery.exceptions import WorkerLostError

from ddd_celery.celery.message import UnreadableMessageError, refuse_unreal
from ddd_celery.celery.registry import ATTRIBUTE, CeleryJob, CeleryJobs, jobs_of
from ddd_celery.celery.spread import (
    TENANT_RAN,
    TENANT_TASK_SUFFIX,
    TenantRunMessage,
    conclude_join,
    strike_off,
    tenant_task_name,
)
from ddd_celery.celery.tasks import OccurrenceRun, RunTask
from ddd_celery.kernel.errors import error_code_of
from ddd_celery.scheduling.execution import ran
from ddd_celery.scheduling.observability import DEFAULT_LOGGER, log_fields
from ddd_celery.scheduling.outcomes import JobRun, Outcome
from ddd_celery.scheduling.tenant_runs import JobTenantRuns

_logger = logging.getLogger(DEFAULT_LOGGER)


class TenantTask(RunTask):
    """The task of a job's tenant runs (``<job>.tenant``): as its own task, never redelivered."""

    sentence = "Run one tenant of an occurrence of the scheduled job {}."

    @staticmethod
    def run_message(
        app: Any, name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any], *, carrier: Any
    ) -> tuple[JobRun, BaseException | None] | None:
        return run_tenant_message(app, name, args, kwargs, carrier=carrier)


def run_tenant_message(
    app: Any,
    name: str,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    *,
    carrier: Any = None,
) -> tuple[JobRun, BaseException | None] | None:
    """Run the tenant a tenant task names; the tenant's record and error, None if unreadable."""
    registry = jobs_of(app)
    job = registry.job(name)
    tenant_runs = registry.run_state.tenant_runs()
    message = _read(registry, job, args, kwargs)
    if message is None or tenant_runs is None:
        return None
    return TenantRun(registry, job, message, tenant_runs, app=app, carrier=carrier).execute()


def _read(
    registry: CeleryJobs, job: CeleryJob, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> TenantRunMessage | None:
    """The tenant run a message names, or None once a message that is not one is logged."""
    try:
        if args:
            raise UnreadableMessageError(
                "must be empty: a tenant run travels as keyword arguments", field="args"
            )
        message = TenantRunMessage.from_kwargs(kwargs)
        refuse_unreal(
            message.occurrence, job.schedule, registry.clock.now(), registry.rules, registry.tenants
        )
    except UnreadableMessageError as error:
        what = "read the tenant task message"
        if error.field is not None:
            what = f"{what}: {error.field} {error.reason}"
        registry.recorder.could_not_follow(job.name, error, what=what)
        return None
    return message


class TenantRun(OccurrenceRun):
    """The run of one tenant of a spread occurrence, concluded into the occurrence's join."""

    def __init__(
        self,
        registry: CeleryJobs,
        job: CeleryJob,
        message: TenantRunMessage,
        tenant_runs: JobTenantRuns,
        *,
        app: Any,
        carrier: Any = None,
    ) -> None:
        occurrence = message.occurrence
        super().__init__(
            registry,
            job,
            scheduled_at=occurrence.scheduled_at,
            correlation_id=occurrence.correlation_id,
            tenant_id=message.tenant_id,
            app=app,
            carrier=carrier,
            started_at=message.started_at,
        )
        self._message = message
        self._tenant_runs = tenant_runs
        self._began = registry.clock.now()

    def _run(self) -> tuple[JobRun, BaseException | None]:
        """Past the occurrence's deadline the job is not called: the tenant times out."""
        deadline = self._attempt.deadline
        if deadline is not None and self._registry.clock.now() >= deadline:
            return self._conclude(self._timed_out(None), None)
        return super()._run()

    def _conclude(
        self, error: BaseException | None, tenant: str | None
    ) -> tuple[JobRun, BaseException | None]:
        """Log this tenant's run, strike it off; the last to end records the occurrence."""
        del tenant  # the run is this tenant's, whatever ended it (a timeout, a stop)
        with self._mutex:
            if self._concluded is not None:
                return self._concluded
            registry, job, tenant_id = self._registry, self._job, self._message.tenant_id
            record = ran(self._attempt, registry.clock.now(), error, tenant_id)
            began = (self._began - self._attempt.started_at).total_seconds() * 1000
            log_tenant_run(record, own_duration_ms=(record.duration_ms or 0) - began)
            failed = None
            if error is not None:
                failed = {"error_code": error_code_of(error), "error_type": type(error).__name__}
            tally = strike_off(
                registry,
                job,
                self._message.occurrence,
                tenant_runs=self._tenant_runs,
                tenant=tenant_id,
                failed=failed,
            )
            if tally is not None:
                first = tally.failure
                own = error if first is not None and first.tenant_id == tenant_id else None
                conclude_join(self._app, registry, job, self._message, tally=tally, error=own)
            self._concluded = (record, error)
        return record, error


def log_tenant_run(record: JobRun, *, own_duration_ms: float) -> None:
    """The line of one tenant run: the occurrence's fields, the tenant, its own duration."""
    message, level = TENANT_RAN[record.outcome]
    if _logger.isEnabledFor(level):
        fields = log_fields(record)
        fields["duration_ms"] = own_duration_ms
        _logger.log(level, message, extra=fields)


def on_tenant_task_failure(
    sender: Any = None, exception: BaseException | None = None, kwargs: Any = None, **_: Any
) -> None:
    """Strike off the tenant of a tenant task whose pool process died (``WorkerLostError``).

    Celery sends this in the worker's main process; the run itself never concluded, so the
    tenant is struck off failed with that error, and the join ends when it was the last.
    """
    if not isinstance(exception, WorkerLostError):
        return
    name = getattr(sender, "name", "") or ""
    app = getattr(sender, "app", None)
    if not name.endswith(TENANT_TASK_SUFFIX) or not isinstance(
        getattr(app, ATTRIBUTE, None), CeleryJobs
    ):
        return
    registry = jobs_of(app)  # settled: the main process may not have used its stores yet
    job = registry.jobs.get(getattr(sender, "job_name", ""))
    if job is not None and not (job.declared and tenant_task_name(job) == name):
        job = None
    tenant_runs = registry.run_state.tenant_runs()
    if job is None or tenant_runs is None:
        return
    message = _read(registry, job, (), kwargs or {})
    if message is None:
        return
    failed = {"error_code": error_code_of(exception), "error_type": type(exception).__name__}
    _logger.error(
        TENANT_RAN[Outcome.FAILED][0],
        extra={
            "job": job.name,
            "context": job.name.split(".", 1)[0],
            "scheduled_at": message.to_kwargs()["scheduled_at"],
            "tenant_id": message.tenant_id,
            "correlation_id": message.occurrence.correlation_id,
            **failed,
        },
    )
    tally = strike_off(
        registry,
        job,
        message.occurrence,
        tenant_runs=tenant_runs,
        tenant=message.tenant_id,
        failed=failed,
    )
    if tally is not None:
        conclude_join(app, registry, job, message, tally=tally, error=None)
