"""``run_now``: one deliberate run in this process, as a worker would run it, with no lock."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from celery_support import AppFactory, Runs
from probe_jobs import ASYNC, SYNC, AsyncProbeJob, Probe, SyncProbeJob

from ddd_celery.celery import CeleryJobs, install_jobs, run_now
from ddd_celery.declarations import JobExecution
from ddd_celery.kernel import (
    DomainError,
    FixedClock,
    InMemoryTenantDirectory,
    Lease,
    Lock,
    SequentialIdGenerator,
    system_actor,
)
from ddd_celery.scheduling.errors import JobTimeoutError, UnknownJobError
from ddd_celery.scheduling.run_state import InMemoryJobRunState

NOW = datetime(2026, 3, 2, 9, 58, 30, tzinfo=UTC)
CLAIMED = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


class UntouchableLock(Lock):
    """run_now takes no lock: asking this one fails the test."""

    def acquire(self, key: str, ttl_ms: int) -> Lease | None:
        raise AssertionError(f"run_now asked the lock for {key}")

    def release(self, lease: Lease) -> bool:
        raise AssertionError("run_now released a lock")


def wire(
    make_app: AppFactory, probe: Probe, runs: Runs, **overrides: Any
) -> tuple[Any, CeleryJobs]:
    app = make_app()
    clock = FixedClock(NOW)
    options: dict[str, Any] = {
        "jobs": [SyncProbeJob, AsyncProbeJob],
        "providers": {Probe: lambda: probe},
        "lock": UntouchableLock(),
        "clock": clock,
        "run_state": InMemoryJobRunState(clock),
        "ids": SequentialIdGenerator("now-"),
        "on_run": runs,
        "environ": {},
    }
    return app, install_jobs(app, **(options | overrides))


@pytest.mark.parametrize("name", [SYNC, ASYNC])
def test_run_now_runs_the_job_in_the_scope_of_a_scheduled_run_at_the_instant_asked(
    make_app: AppFactory, runs: Runs, name: str
) -> None:
    probe = Probe()
    app, _ = wire(make_app, probe, runs)

    record = run_now(app, name)

    [seen] = probe.seen
    assert seen.context is not None
    assert (seen.context.origin, seen.context.actor) == ("schedule", system_actor(name))
    assert seen.context.correlation_id == "now-1"
    assert seen.execution.scheduled_at == NOW
    assert (record.outcome, record.scheduled_at, record.correlation_id) == (
        "succeeded",
        NOW,
        "now-1",
    )
    assert runs.records == [record]


def test_each_run_now_gets_a_fresh_correlation_id(make_app: AppFactory, runs: Runs) -> None:
    app, registry = wire(make_app, Probe(), runs)

    run_now(app, SYNC)
    run_now(registry, SYNC)

    assert [r.correlation_id for r in runs.records] == ["now-1", "now-2"]


def test_run_now_takes_no_lock_and_leaves_the_run_state_alone(
    make_app: AppFactory, runs: Runs
) -> None:
    app, registry = wire(make_app, Probe(), runs)
    registry.run_state.claim(SYNC, CLAIMED, queue=False, ttl_ms=3_600_000)

    run_now(app, SYNC)

    assert registry.run_state.running(SYNC) == CLAIMED
    assert [r.outcome for r in runs.records] == ["succeeded"]


def test_run_now_runs_a_disabled_job_in_a_process_that_runs_no_job_by_time(
    make_app: AppFactory, runs: Runs
) -> None:
    probe = Probe()
    app, registry = wire(
        make_app,
        probe,
        runs,
        environ={"RUN_JOBS": "false", "JOB_PROBE_SYNC_ENABLED": "false"},
    )
    assert registry.start is False
    assert registry.jobs[SYNC].schedule.options.enabled is False

    run_now(app, SYNC)

    assert len(probe.seen) == 1


def test_run_now_raises_what_the_job_raised_after_recording_it(
    make_app: AppFactory, runs: Runs
) -> None:
    refused = DomainError("NOTHING_DUE", "nothing is due")

    def refuse(execution: JobExecution) -> None:
        raise refused

    app, _ = wire(make_app, Probe(behaviour=refuse), runs)

    with pytest.raises(DomainError) as raised:
        run_now(app, SYNC)

    assert raised.value is refused
    assert [(r.outcome, r.error_code) for r in runs.records] == [("failed", "NOTHING_DUE")]


def test_run_now_of_a_run_past_its_timeout_raises_the_timeout(
    make_app: AppFactory, runs: Runs
) -> None:
    def outlive(execution: JobExecution) -> None:
        execution.signal.wait(5)

    app, _ = wire(make_app, Probe(behaviour=outlive), runs, settings={SYNC: {"timeout_ms": 20}})

    with pytest.raises(JobTimeoutError):
        run_now(app, SYNC)

    assert [r.error_code for r in runs.records] == ["JOB_TIMEOUT"]


def test_run_now_runs_a_per_tenant_job_for_every_tenant(make_app: AppFactory, runs: Runs) -> None:
    probe = Probe()
    app, _ = wire(
        make_app,
        probe,
        runs,
        tenants=InMemoryTenantDirectory(["acme", "globex"]),
        settings={SYNC: {"tenancy": "per-tenant"}},
    )

    run_now(app, SYNC)

    assert [s.execution.tenant_id for s in probe.seen] == ["acme", "globex"]


def test_run_now_of_a_name_no_job_has_is_refused(make_app: AppFactory, runs: Runs) -> None:
    app, _ = wire(make_app, Probe(), runs)

    with pytest.raises(UnknownJobError, match=r"probe\.renamed"):
        run_now(app, "probe.renamed")

    assert runs.records == []


def test_run_now_of_a_beat_schedule_entry_points_to_its_own_task(
    make_app: AppFactory, runs: Runs
) -> None:
    app = make_app(beat_schedule={"flush": {"task": "cache.flush", "schedule": 900}})
    install_jobs(app, jobs=[], lock=UntouchableLock(), environ={})

    with pytest.raises(TypeError, match=r"beat_schedule entry.*cache\.flush"):
        run_now(app, "beat.flush")


def test_run_now_on_an_app_without_jobs_says_to_install_them(make_app: AppFactory) -> None:
    with pytest.raises(LookupError, match="install_jobs"):
        run_now(make_app(), SYNC)
