"""``manual_scheduler_for(app)``: a spec about time runs the app's jobs exactly as wired."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from celery import Celery

from ddd_celery.celery import install_jobs
from ddd_celery.declarations import JobExecution, scheduled
from ddd_celery.kernel import (
    ContextVarExecutionScope,
    FixedClock,
    InMemoryErrorReporter,
    InMemoryLock,
    InMemoryTenantDirectory,
    SystemClock,
)
from ddd_celery.testing import manual_scheduler_for

START = datetime(2026, 3, 2, 9, 58, 30, tzinfo=UTC)
MINUTE = 60_000


@dataclass
class Ledger:
    """The port the jobs take; the spec's fake records what each built job saw."""

    entries: list[tuple[str, str, str | None]] = field(default_factory=list)


@scheduled("wired.export", every="15m")
class ExportJob:
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def run(self, execution: JobExecution) -> None:
        self.ledger.entries.append(("export", execution.scheduled_at.strftime("%H:%M"), None))


@scheduled("wired.close", cron="0 11 * * *", time_zone="Europe/Paris", tenancy="per-tenant")
class CloseJob:
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    async def run(self, execution: JobExecution) -> None:
        context = ContextVarExecutionScope().current()
        assert context is not None
        self.ledger.entries.append(("close", str(context.actor), execution.tenant_id))


@scheduled("wired.purge", every="1m")
class PurgeJob:
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def run(self, execution: JobExecution) -> None:
        self.ledger.entries.append(("purge", execution.scheduled_at.strftime("%H:%M"), None))


def create_app(clock: Any, ledger: Ledger, environ: dict[str, str]) -> Celery:
    """The composition root under test, as production builds it."""
    app = Celery(f"wired-{uuid.uuid4().hex[:12]}", broker="memory://", set_as_current=False)
    install_jobs(
        app,
        jobs=[ExportJob, CloseJob, PurgeJob],
        providers={Ledger: lambda: ledger},
        lock=InMemoryLock(clock),
        clock=clock,
        tenants=InMemoryTenantDirectory(("lyon", "paris")),
        settings={"wired.export": {"schedule": {"every": "30m"}}},
        environ=environ,
    )
    return app


async def test_the_jobs_run_with_the_apps_settings_providers_and_tenants() -> None:
    clock, ledger = FixedClock(START), Ledger()
    app = create_app(clock, ledger, {"JOB_WIRED_PURGE_ENABLED": "false"})
    scheduler = manual_scheduler_for(app)
    await scheduler.start()

    await scheduler.advance(62 * MINUTE)
    await scheduler.stop()

    # 11:00 in Paris is 10:00 UTC in March; the settings make the export every 30 minutes
    assert ledger.entries == [
        ("export", "10:00", None),
        ("close", "system:wired.close", "lyon"),
        ("close", "system:wired.close", "paris"),
        ("export", "10:30", None),
        ("export", "11:00", None),
    ]
    assert [run.outcome.value for run in scheduler.runs_of("wired.close")] == ["succeeded"]
    assert scheduler.runs_of("wired.purge") == []


async def test_run_now_runs_a_job_as_wired_even_when_it_is_switched_off() -> None:
    clock, ledger = FixedClock(START), Ledger()
    scheduler = manual_scheduler_for(create_app(clock, ledger, {"JOB_WIRED_PURGE_ENABLED": "0"}))

    await scheduler.run_now("wired.purge")

    assert ledger.entries == [("purge", "09:58", None)]


def test_an_app_on_the_system_clock_needs_a_fixed_clock_for_its_spec() -> None:
    app = create_app(SystemClock(), Ledger(), {})

    with pytest.raises(ValueError, match=r"clock=FixedClock"):
        manual_scheduler_for(app)

    assert manual_scheduler_for(app, clock=FixedClock(START)).describe()[0].name == "wired.export"


@scheduled("wired.broken", every="1h")
class BrokenJob:
    def run(self, execution: JobExecution) -> None:
        raise RuntimeError("the ledger is gone")


async def test_the_error_reporter_of_the_spec_receives_the_unexpected_failures() -> None:
    clock = FixedClock(START)
    app = Celery(f"wired-{uuid.uuid4().hex[:12]}", broker="memory://", set_as_current=False)
    install_jobs(app, jobs=[BrokenJob], lock=InMemoryLock(clock), clock=clock, environ={})
    errors = InMemoryErrorReporter()
    scheduler = manual_scheduler_for(app, errors=errors)
    await scheduler.start()

    await scheduler.advance(2 * MINUTE)
    await scheduler.stop()

    [(error, context)] = errors.reported
    assert isinstance(error, RuntimeError)
    assert context["job"] == "wired.broken"
