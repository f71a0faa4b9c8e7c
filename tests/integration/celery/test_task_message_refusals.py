"""Messages a worker refuses: unreadable ones, instants no occurrence has, tenants not its own.

Whoever can publish on the broker can send a job's task any kwargs (``celery call``). A worker
runs only what could be an occurrence beat sent, records no outcome for the rest (an outcome
keyed on a forged instant would pin the job's last outcome), leaves the run state alone, and
logs which field was wrong and why, never the value it held.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery_support import AppFactory, Runs
from probe_jobs import SYNC, AsyncProbeJob, Probe, SyncProbeJob

from ddd_celery.celery import CeleryJobs, OccurrenceMessage, install_jobs
from ddd_celery.celery.tasks import on_task_revoked, run_message
from ddd_celery.kernel import (
    FixedClock,
    InMemoryLock,
    InMemoryTenantDirectory,
    SequentialIdGenerator,
    TenantDirectory,
)
from ddd_celery.scheduling.last_runs import InMemoryJobLastRuns
from ddd_celery.scheduling.observability import COULD_NOT_FOLLOW

NOW = datetime(2026, 3, 2, 10, 0, 30, tzinfo=UTC)
HOUR = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
"""The occurrence of SYNC (every hour) that is due at ``NOW``."""
SECRET = "4242-4242"


def wire(
    make_app: AppFactory, probe: Probe, runs: Runs, **overrides: Any
) -> tuple[Any, CeleryJobs, InMemoryJobLastRuns]:
    app = make_app()
    clock = FixedClock(NOW)
    last_runs = InMemoryJobLastRuns()
    options: dict[str, Any] = {
        "jobs": [SyncProbeJob, AsyncProbeJob],
        "providers": {Probe: lambda: probe},
        "lock": InMemoryLock(clock),
        "clock": clock,
        "ids": SequentialIdGenerator(),
        "on_run": runs,
        "last_runs": last_runs,
        "environ": {},
    }
    return app, install_jobs(app, **(options | overrides)), last_runs


def refusal(caplog: pytest.LogCaptureFixture) -> str:
    """The one line that logged the refusal: its ``operation`` says the field and why."""
    [line] = [r for r in caplog.records if r.getMessage() == COULD_NOT_FOLLOW]
    assert line.levelno == logging.ERROR
    assert line.__dict__["job"] == SYNC
    return str(line.__dict__["operation"])


def message(at: datetime, tenant: str | None = None) -> dict[str, str | None]:
    return OccurrenceMessage(at, "corr-1", tenant).to_kwargs()


def assert_refused_untouched(
    probe: Probe, runs: Runs, registry: CeleryJobs, last_runs: InMemoryJobLastRuns
) -> None:
    assert probe.seen == []
    assert runs.records == []
    assert last_runs.read(SYNC) is None
    assert registry.run_state.running(SYNC) == HOUR  # the claim of the real run is its own


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"scheduled_at": f"2026-03-02 {SECRET}", "correlation_id": "c"}, "scheduled_at"),
        ({"scheduled_at": 4242, "correlation_id": "c"}, "scheduled_at"),
        ({"scheduled_at": "2026-03-02T10:00:00", "correlation_id": "c"}, "scheduled_at"),
        ({"scheduled_at": "2026-03-02T10:00:00Z", "correlation_id": ""}, "correlation_id"),
        ({**message(HOUR), "tenant_id": 4242}, "tenant_id"),
        ({**message(HOUR), SECRET: SECRET}, "kwargs"),
    ],
    ids=["not-an-instant", "not-a-string", "naive", "empty-correlation", "tenant-int", "extra"],
)
def test_a_message_that_cannot_be_read_is_logged_with_its_field_and_why_never_its_value(
    make_app: AppFactory,
    runs: Runs,
    caplog: pytest.LogCaptureFixture,
    kwargs: dict[str, Any],
    field: str,
) -> None:
    probe = Probe()
    app, registry, last_runs = wire(make_app, probe, runs)
    registry.run_state.claim(SYNC, HOUR, queue=False, ttl_ms=60_000)

    run_message(app, SYNC, (), kwargs)

    assert_refused_untouched(probe, runs, registry, last_runs)
    operation = refusal(caplog)
    assert operation.startswith(f"read the task message: {field} "), operation
    assert len(operation) > len(f"read the task message: {field} ") + 10, operation
    for record in caplog.records:
        assert SECRET not in record.getMessage()
        assert "4242" not in str(record.__dict__), record.__dict__


@pytest.mark.parametrize(
    ("at", "why"),
    [
        (datetime(9999, 12, 31, 23, tzinfo=UTC), "ahead of this worker's clock"),
        (HOUR + timedelta(hours=1), "ahead of this worker's clock"),
        (HOUR - timedelta(minutes=30), "not an instant of the job's schedule (every 1h)"),
        (HOUR - timedelta(milliseconds=1), "not an instant of the job's schedule (every 1h)"),
    ],
    ids=["year-9999", "next-hour", "half-past", "a-millisecond-off"],
)
def test_an_instant_that_cannot_be_an_occurrence_is_refused_and_pins_no_last_outcome(
    make_app: AppFactory,
    runs: Runs,
    caplog: pytest.LogCaptureFixture,
    at: datetime,
    why: str,
) -> None:
    probe = Probe()
    app, registry, last_runs = wire(make_app, probe, runs)
    registry.run_state.claim(SYNC, HOUR, queue=False, ttl_ms=60_000)

    run_message(app, SYNC, (), message(at))

    assert_refused_untouched(probe, runs, registry, last_runs)
    assert why in refusal(caplog)
    # the real occurrence still runs and is the job's last outcome
    run_message(app, SYNC, (), message(HOUR))
    latest = last_runs.read(SYNC)
    assert latest is not None
    assert (latest.scheduled_at, latest.outcome) == (HOUR, "succeeded")


def test_a_past_occurrence_and_one_due_within_the_lateness_still_run(
    make_app: AppFactory, runs: Runs
) -> None:
    """A manual send names a real instant: yesterday's, or one a worker's lagging clock has not
    reached yet (clocks a few seconds apart)."""
    probe = Probe()
    app, registry, _ = wire(make_app, probe, runs)
    assert isinstance(registry.clock, FixedClock)
    yesterday = HOUR - timedelta(days=1)

    run_message(app, SYNC, (), message(yesterday))
    registry.clock.set(HOUR - timedelta(seconds=5))
    run_message(app, SYNC, (), message(HOUR))

    assert [s.execution.scheduled_at for s in probe.seen] == [yesterday, HOUR]


class UnreachableTenants(TenantDirectory):
    def tenants(self) -> list[str]:
        raise ConnectionError("the tenant database is down")


@pytest.mark.parametrize(
    ("tenancy", "directory", "why"),
    [
        ("global", InMemoryTenantDirectory(["acme"]), "is set on a global job"),
        ("per-tenant", InMemoryTenantDirectory(["acme"]), "is not a tenant the directory lists"),
        ("per-tenant", UnreachableTenants(), "the tenant directory did not answer"),
    ],
    ids=["global-job", "unknown-tenant", "directory-down"],
)
def test_a_tenant_the_job_does_not_run_for_is_refused(
    make_app: AppFactory,
    runs: Runs,
    caplog: pytest.LogCaptureFixture,
    *,
    tenancy: str,
    directory: TenantDirectory,
    why: str,
) -> None:
    probe = Probe()
    app, registry, last_runs = wire(
        make_app, probe, runs, tenants=directory, settings={SYNC: {"tenancy": tenancy}}
    )
    registry.run_state.claim(SYNC, HOUR, queue=False, ttl_ms=60_000)

    run_message(app, SYNC, (), message(HOUR, "evil-corp"))

    assert_refused_untouched(probe, runs, registry, last_runs)
    operation = refusal(caplog)
    assert operation.startswith("read the task message: tenant_id "), operation
    assert why in operation
    assert "evil-corp" not in operation


class Revoked:
    def __init__(self, app: Any) -> None:
        self.app = app
        self.name = SYNC


def test_an_expired_message_with_a_forged_instant_records_no_missed_outcome(
    make_app: AppFactory, runs: Runs, caplog: pytest.LogCaptureFixture
) -> None:
    app, _, last_runs = wire(make_app, Probe(), runs)
    forged = type("Request", (), {"kwargs": message(datetime(9999, 1, 1, tzinfo=UTC))})()

    on_task_revoked(sender=Revoked(app), request=forged)

    assert runs.records == []
    assert last_runs.read(SYNC) is None
    assert "ahead of this worker's clock" in refusal(caplog)
