"""Seed 004, "Global or per tenant": one run per occurrence, or one per tenant of the directory."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ddd_celery.declarations.execution import JobExecution
from ddd_celery.kernel import (
    DomainError,
    FixedExecutionScope,
    InMemoryTenantDirectory,
    TenantDirectory,
)
from ddd_celery.scheduling.errors import InvalidJobScheduleError
from ddd_celery.scheduling.outcomes import Outcome
from ddd_celery.testing import ManualJobScheduler

from .conftest import MINUTE, SECOND, Gate, Recorder, at

CLOSE = "billing.close-month"


async def test_a_job_is_global_by_default_and_runs_once_in_no_tenant(
    scheduler: ManualJobScheduler, fixed_execution_scope: FixedExecutionScope
) -> None:
    job = Recorder()
    scheduler.register(name=CLOSE, schedule={"every": "15m"}, run=job)
    await scheduler.start()

    await scheduler.advance(2 * MINUTE)

    assert [e.tenant_id for e in job.executions] == [None]
    assert [c.tenant_id for c in fixed_execution_scope.opened] == [None]


async def test_a_per_tenant_job_runs_once_per_tenant_one_after_the_other_in_their_scopes(
    scheduler: ManualJobScheduler, fixed_execution_scope: FixedExecutionScope
) -> None:
    order: list[str] = []

    async def run(execution: JobExecution) -> None:
        order.append(f"start {execution.tenant_id}")
        order.append(f"end {execution.tenant_id}")

    scheduler.register(name=CLOSE, schedule={"every": "15m"}, run=run, tenancy="per-tenant")
    await scheduler.start()

    await scheduler.advance(2 * MINUTE)

    assert order == ["start acme", "end acme", "start globex", "end globex"]
    assert [c.tenant_id for c in fixed_execution_scope.opened] == ["acme", "globex"]
    assert [run.outcome for run in scheduler.runs] == [Outcome.SUCCEEDED]


async def test_the_runs_of_one_occurrence_share_its_correlation_id(
    scheduler: ManualJobScheduler, fixed_execution_scope: FixedExecutionScope
) -> None:
    scheduler.register(
        name=CLOSE, schedule={"every": "15m", "tenancy": "per-tenant"}, run=Recorder()
    )
    await scheduler.start()

    await scheduler.advance(17 * MINUTE)

    assert [c.correlation_id for c in fixed_execution_scope.opened] == [
        "id-1",
        "id-1",
        "id-2",
        "id-2",
    ]


async def test_registering_a_per_tenant_job_without_tenants_raises_invalid_job_schedule(
    build: Callable[..., ManualJobScheduler],
) -> None:
    scheduler = build(tenants=None)

    with pytest.raises(InvalidJobScheduleError, match=CLOSE):
        scheduler.register(
            name=CLOSE, schedule={"every": "15m"}, run=Recorder(), tenancy="per-tenant"
        )


async def test_the_tenancy_given_at_registration_replaces_the_schedules(
    scheduler: ManualJobScheduler,
) -> None:
    job = Recorder()
    scheduler.register(
        name=CLOSE, schedule={"every": "15m", "tenancy": "per-tenant"}, run=job, tenancy="global"
    )
    await scheduler.start()

    await scheduler.advance(2 * MINUTE)

    assert [e.tenant_id for e in job.executions] == [None]


async def test_a_failing_tenant_does_not_stop_the_others_and_the_first_error_fails_it(
    scheduler: ManualJobScheduler, tenants: InMemoryTenantDirectory
) -> None:
    tenants.add("initech")
    first = DomainError("MONTH_OPEN", "the month of acme is open")
    ran: list[str | None] = []

    async def run(execution: JobExecution) -> None:
        ran.append(execution.tenant_id)
        if execution.tenant_id == "acme":
            raise first
        if execution.tenant_id == "globex":
            raise RuntimeError("globex's ledger is locked")

    scheduler.register(name=CLOSE, schedule={"every": "15m"}, run=run, tenancy="per-tenant")
    await scheduler.start()

    await scheduler.advance(2 * MINUTE)

    assert ran == ["acme", "globex", "initech"]
    [record] = scheduler.runs
    assert (record.outcome, record.error_code, record.tenant_id) == (
        Outcome.FAILED,
        "MONTH_OPEN",
        "acme",
    )
    assert scheduler.failures == [first]


async def test_an_aborted_signal_stops_before_the_next_tenant(
    scheduler: ManualJobScheduler,
) -> None:
    job = Gate()
    scheduler.register(
        name=CLOSE,
        schedule={"every": "15m", "timeout_ms": 10 * SECOND},
        run=job,
        tenancy="per-tenant",
    )
    await scheduler.start()
    await scheduler.advance(2 * MINUTE)
    await scheduler.advance(10 * SECOND)

    job.open()
    await scheduler.advance(0)

    assert [e.tenant_id for e in job.started] == ["acme"]
    assert [(r.outcome, r.error_code) for r in scheduler.runs] == [(Outcome.FAILED, "JOB_TIMEOUT")]


async def test_the_tenant_directory_is_asked_at_each_occurrence(
    scheduler: ManualJobScheduler, tenants: InMemoryTenantDirectory
) -> None:
    job = Recorder()
    scheduler.register(name=CLOSE, schedule={"every": "15m"}, run=job, tenancy="per-tenant")
    await scheduler.start()
    await scheduler.advance(2 * MINUTE)

    tenants.add("initech")
    await scheduler.advance(15 * MINUTE)

    assert [(e.scheduled_at, e.tenant_id) for e in job.executions] == [
        (at(10, 0), "acme"),
        (at(10, 0), "globex"),
        (at(10, 15), "acme"),
        (at(10, 15), "globex"),
        (at(10, 15), "initech"),
    ]


class _Unreachable(TenantDirectory):
    def tenants(self) -> list[str]:
        raise ConnectionError("the tenants database is down")


async def test_a_tenant_directory_that_fails_fails_the_occurrence_and_the_scheduler_goes_on(
    build: Callable[..., ManualJobScheduler],
) -> None:
    scheduler = build(tenants=_Unreachable())
    scheduler.register(name=CLOSE, schedule={"every": "15m"}, run=Recorder(), tenancy="per-tenant")
    await scheduler.start()

    await scheduler.advance(17 * MINUTE)

    assert [(r.outcome, r.error_code) for r in scheduler.runs] == [
        (Outcome.FAILED, "UNEXPECTED_ERROR"),
        (Outcome.FAILED, "UNEXPECTED_ERROR"),
    ]
