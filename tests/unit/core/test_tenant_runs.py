"""The tenant runs of a spread occurrence: the option that asks for it, and its one record."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ddd_celery.declarations import DeclarationError, TenantRuns, parse_job_schedule, scheduled
from ddd_celery.scheduling.outcomes import Outcome
from ddd_celery.scheduling.settings import apply_job_settings
from ddd_celery.scheduling.tenant_runs import TenantFailure, TenantTally, joined_run

AT = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)
STARTED = AT + timedelta(seconds=2)


def test_tenant_runs_go_in_turn_unless_a_per_tenant_job_asks_to_spread_them() -> None:
    in_turn = parse_job_schedule({"every": "1d", "tenancy": "per-tenant"})
    spread = parse_job_schedule({"every": "1d", "tenancy": "per-tenant", "tenant_runs": "spread"})

    assert in_turn.options.tenant_runs is TenantRuns.IN_TURN
    assert spread.options.tenant_runs is TenantRuns.SPREAD


def test_spreading_a_global_job_is_refused_naming_the_job() -> None:
    with pytest.raises(DeclarationError, match=r"billing\.sweep.*needs 'tenancy' 'per-tenant'"):
        parse_job_schedule({"every": "1d", "tenant_runs": "spread"}, job="billing.sweep")


def test_a_tenant_runs_value_out_of_its_choices_is_refused() -> None:
    with pytest.raises(DeclarationError, match="'tenant_runs' must be one of 'in-turn', 'spread'"):
        parse_job_schedule({"every": "1d", "tenancy": "per-tenant", "tenant_runs": "parallel"})


def test_the_decorator_takes_tenant_runs_and_settings_can_switch_it() -> None:
    @scheduled("tenantruns.close-month", every="1d", tenancy="per-tenant", tenant_runs="spread")
    class CloseMonthJob:
        def run(self, execution: object) -> None: ...

    declared = {
        "tenantruns.close-month": parse_job_schedule(
            {"every": "1d", "tenancy": "per-tenant", "tenant_runs": "spread"}
        )
    }
    switched = apply_job_settings(declared, {"tenantruns.close-month": {"tenant_runs": "in-turn"}})

    assert CloseMonthJob.__scheduled_job__.schedule.options.tenant_runs is TenantRuns.SPREAD  # type: ignore[attr-defined]
    assert switched["tenantruns.close-month"].options.tenant_runs is TenantRuns.IN_TURN


def test_a_tally_without_failure_is_one_success_from_the_spread_to_the_last_run() -> None:
    record = joined_run(
        "billing.close-month",
        AT,
        started_at=STARTED,
        ended_at=STARTED + timedelta(seconds=25),
        correlation_id="corr-1",
        tally=TenantTally(1_000, None),
    )

    assert (record.outcome, record.duration_ms, record.started_at) == (
        Outcome.SUCCEEDED,
        25_000,
        STARTED,
    )
    assert (record.context, record.correlation_id, record.error_code, record.tenant_id) == (
        "billing",
        "corr-1",
        None,
        None,
    )


def test_a_tally_with_a_failure_fails_the_occurrence_with_that_tenants_code_and_type() -> None:
    failure = TenantFailure("globex", "INVOICE_LOCKED", "InvoiceLockedError")

    record = joined_run(
        "billing.close-month",
        AT,
        started_at=STARTED,
        ended_at=STARTED,
        correlation_id="corr-1",
        tally=TenantTally(3, failure),
    )

    assert (record.outcome, record.error_code, record.error_type, record.tenant_id) == (
        Outcome.FAILED,
        "INVOICE_LOCKED",
        "InvoiceLockedError",
        "globex",
    )
