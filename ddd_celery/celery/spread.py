"""Spreading the tenant runs of an occurrence over the workers (``tenant_runs: 'spread'``).

The task of the occurrence does not run the tenants itself: it asks the directory for them,
opens the occurrence's join in the run state's store (``JobTenantRuns``), and sends one tenant
task per tenant (``tenant_tasks.py``) to the job's queue, each carrying the occurrence's
instant, correlation id and start, so every tenant run keeps the occurrence's scope and
deadline. The run in progress stays claimed until the last tenant run ends, which records the
occurrence's one outcome and ends its run (``overlap`` keeps its meaning).

What stops the spread before every tenant is sent still gives the occurrence one outcome: a
directory that cannot answer or a join that cannot be opened fails the occurrence at once;
once a publish fails, the tenants not sent are struck off as failed with its error, so the join
still ends.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ddd_celery.celery.message import (
    OccurrenceMessage,
    UnreadableMessageError,
    refuse_unknown_fields,
)
from ddd_celery.celery.promotion import conclude_run
from ddd_celery.celery.registry import CeleryJob, CeleryJobs
from ddd_celery.celery.tracing import send_span
from ddd_celery.declarations.options import TenantRuns
from ddd_celery.kernel.errors import error_code_of
from ddd_celery.kernel.instants import iso_ms, to_utc
from ddd_celery.scheduling.execution import tenants_of
from ddd_celery.scheduling.occurrence import run_ttl_ms
from ddd_celery.scheduling.outcomes import JobRun, Outcome, context_of
from ddd_celery.scheduling.tenant_runs import (
    JobTenantRuns,
    TenantFailure,
    TenantTally,
    joined_run,
)

TENANT_TASK_SUFFIX = ".tenant"
STRIKE_OFF_RETRY_S = 10.0
"""How long a tenant run keeps striking itself off a join whose store does not answer: a
Redis failover takes seconds, and a strike-off lost leaves the occurrence unrecorded and its
run in progress until the run expires. Sent again, a strike-off changes nothing twice."""
_FIRST_WAIT_S = 0.05
_LONGEST_WAIT_S = 1.0

TENANT_RAN: dict[Outcome, tuple[str, int]] = {
    Outcome.SUCCEEDED: ("Scheduled job tenant run succeeded", logging.INFO),
    Outcome.FAILED: ("Scheduled job tenant run failed", logging.ERROR),
}
"""The line each tenant run of a spread occurrence logs, with its tenant."""


def tenant_task_name(job: CeleryJob) -> str:
    """The task of the tenant runs of ``job``: its own task's name and ``.tenant``."""
    return job.task_name + TENANT_TASK_SUFFIX


def spreads(registry: CeleryJobs, job: CeleryJob, message: OccurrenceMessage) -> bool:
    """Whether this occurrence is spread: a ``spread`` job, for every tenant, on a run state
    that keeps joins (one that keeps none runs the tenants in turn)."""
    return (
        job.schedule.options.tenant_runs is TenantRuns.SPREAD
        and message.tenant_id is None
        and registry.run_state.tenant_runs() is not None
    )


@dataclass(frozen=True, slots=True)
class TenantRunMessage:
    """What a tenant task runs: the occurrence, its tenant, and when the occurrence started."""

    occurrence: OccurrenceMessage
    started_at: datetime

    @property
    def tenant_id(self) -> str:
        assert self.occurrence.tenant_id is not None
        return self.occurrence.tenant_id

    def to_kwargs(self) -> dict[str, str | None]:
        return {**self.occurrence.to_kwargs(), "started_at": iso_ms(self.started_at)}

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any]) -> TenantRunMessage:
        """Read a tenant task's kwargs; raise ``UnreadableMessageError`` naming what is wrong."""
        refuse_unknown_fields(
            kwargs, ("scheduled_at", "correlation_id", "tenant_id", "started_at"), "a tenant run"
        )
        rest = dict(kwargs)
        raw = rest.pop("started_at", None)
        occurrence = OccurrenceMessage.from_kwargs(rest)
        if occurrence.tenant_id is None:
            raise UnreadableMessageError("must name the tenant of the run", field="tenant_id")
        if not isinstance(raw, str):
            raise UnreadableMessageError("must be an ISO 8601 instant string", field="started_at")
        try:
            started_at = to_utc(datetime.fromisoformat(raw), "started_at")
        except ValueError:
            raise UnreadableMessageError(
                "is not an ISO 8601 instant with its UTC offset", field="started_at"
            ) from None
        return cls(occurrence, started_at)


def spread_occurrence(
    app: Any, registry: CeleryJobs, job: CeleryJob, message: OccurrenceMessage
) -> tuple[JobRun, BaseException | None] | None:
    """Open the occurrence's join and send a tenant task per tenant.

    Returns the occurrence's record when it is concluded here (nothing could be spread, or no
    tenant to run), None once its tenants are on their way: the last of them records it.
    A start sent again (the join is already open) sends nothing.
    """
    tenant_runs = registry.run_state.tenant_runs()
    assert tenant_runs is not None
    started_at = registry.clock.now()
    ttl_ms = run_ttl_ms(job.schedule.options, registry.rules)
    try:
        tenants = [
            tenant
            for tenant in tenants_of(job.name, job.schedule.options, registry.tenants)
            if tenant is not None
        ]
        opened = bool(tenants) and tenant_runs.start(
            job.name, message.scheduled_at, tenants, ttl_ms=ttl_ms
        )
    except Exception as error:
        return _concluded(app, registry, job, message, started_at=started_at, error=error)
    if not tenants:
        return _concluded(app, registry, job, message, started_at=started_at, error=None)
    if opened:
        opening = TenantRunMessage(message, started_at)
        _send(app, registry, job, opening, tenants=tenants, tenant_runs=tenant_runs)
    return None


def _send(
    app: Any,
    registry: CeleryJobs,
    job: CeleryJob,
    message: TenantRunMessage,
    *,
    tenants: Sequence[str],
    tenant_runs: JobTenantRuns,
) -> None:
    """Send each tenant's task on one producer; past a failed publish, strike the rest off."""
    occurrence = message.occurrence
    expires = run_ttl_ms(job.schedule.options, registry.rules) / 1000
    name = tenant_task_name(job)
    sent = 0
    try:
        with (
            send_span(job.name, occurrence.scheduled_at, occurrence.correlation_id) as headers,
            app.producer_or_acquire() as producer,
        ):
            for tenant in tenants:
                kwargs = TenantRunMessage(
                    OccurrenceMessage(occurrence.scheduled_at, occurrence.correlation_id, tenant),
                    message.started_at,
                ).to_kwargs()
                app.send_task(
                    name,
                    kwargs=kwargs,
                    queue=job.queue,
                    expires=expires,
                    serializer="json",
                    headers=headers,
                    producer=producer,
                )
                sent += 1
    except Exception as error:
        registry.recorder.could_not_follow(job.name, error, what="send the tenant runs")
        failed = {"error_code": error_code_of(error), "error_type": type(error).__name__}
        for tenant in tenants[sent:]:
            tally = strike_off(
                registry, job, occurrence, tenant_runs=tenant_runs, tenant=tenant, failed=failed
            )
            if tally is not None:
                conclude_join(app, registry, job, message, tally=tally, error=None)


def strike_off(
    registry: CeleryJobs,
    job: CeleryJob,
    occurrence: OccurrenceMessage,
    *,
    tenant_runs: JobTenantRuns,
    tenant: str,
    failed: Mapping[str, str] | None,
) -> TenantTally | None:
    """Strike ``tenant`` off the join (``failed``: its error code and type); the tally if last.

    A store that does not answer is asked again for ``STRIKE_OFF_RETRY_S``, waiting longer
    each time; past that, or on any other error, it is logged, and the occurrence ends when
    its run expires.
    """
    failure = None if failed is None else TenantFailure(tenant, **failed)
    wait, give_up_at = _FIRST_WAIT_S, time.monotonic() + STRIKE_OFF_RETRY_S
    while True:
        try:
            return tenant_runs.complete(job.name, occurrence.scheduled_at, tenant, failure=failure)
        except ConnectionError as error:
            left = give_up_at - time.monotonic()
            if left > 0:
                time.sleep(min(wait, left))
                wait = min(wait * 2, _LONGEST_WAIT_S)
                continue
            registry.recorder.could_not_follow(job.name, error, what="complete a tenant run")
            return None
        except Exception as error:  # not an outage: asking again would not help
            registry.recorder.could_not_follow(job.name, error, what="complete a tenant run")
            return None


def conclude_join(
    app: Any,
    registry: CeleryJobs,
    job: CeleryJob,
    message: TenantRunMessage,
    *,
    tally: TenantTally,
    error: BaseException | None,
) -> JobRun:
    """Record the occurrence's one outcome from its tally, and end its run.

    ``error`` is what the first failing tenant raised, when that run was this process's.
    """
    occurrence = message.occurrence
    record = joined_run(
        job.name,
        occurrence.scheduled_at,
        started_at=message.started_at,
        ended_at=registry.clock.now(),
        correlation_id=occurrence.correlation_id,
        tally=tally,
    )
    conclude_run(app, registry, job, record, error)
    return record


def _concluded(
    app: Any,
    registry: CeleryJobs,
    job: CeleryJob,
    message: OccurrenceMessage,
    *,
    started_at: datetime,
    error: BaseException | None,
) -> tuple[JobRun, BaseException | None]:
    """Record an occurrence the spread ended by itself: no tenant, or nothing could be done."""
    ended_at = registry.clock.now()
    record = JobRun(
        job=job.name,
        context=context_of(job.name),
        scheduled_at=message.scheduled_at,
        outcome=Outcome.SUCCEEDED if error is None else Outcome.FAILED,
        started_at=started_at,
        duration_ms=(ended_at - started_at).total_seconds() * 1000,
        error_code=None if error is None else error_code_of(error),
        error_type=None if error is None else type(error).__name__,
        correlation_id=message.correlation_id,
    )
    conclude_run(app, registry, job, record, error)
    return record, error
