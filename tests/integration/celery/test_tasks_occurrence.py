"""The task's effect, called as a worker calls it: one message, one occurrence, one record."""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery.exceptions import SoftTimeLimitExceeded
from celery_support import AppFactory, Runs
from probe_jobs import ASYNC, SYNC, AsyncProbeJob, Probe, SyncProbeJob

from ddd_celery.celery import CeleryJobs, OccurrenceMessage, install_jobs
from ddd_celery.celery.tasks import run_message
from ddd_celery.declarations import JobExecution
from ddd_celery.kernel import (
    DomainError,
    InMemoryLock,
    InMemoryMetrics,
    InMemoryTenantDirectory,
    SequentialIdGenerator,
    SystemClock,
    TenantDirectory,
    system_actor,
)
from ddd_celery.scheduling.errors import JobTimeoutError
from ddd_celery.scheduling.observability import (
    COULD_NOT_FOLLOW,
    DURATION_HISTOGRAM,
    RUNS_COUNTER,
)
from ddd_celery.scheduling.run_state import Claim, InMemoryJobRunState

AT = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
MESSAGE = OccurrenceMessage(AT, "corr-1").to_kwargs()


def wire(
    make_app: AppFactory, probe: Probe, runs: Runs, **overrides: Any
) -> tuple[Any, CeleryJobs]:
    app = make_app()
    clock = SystemClock()
    options: dict[str, Any] = {
        "jobs": [SyncProbeJob, AsyncProbeJob],
        "providers": {Probe: lambda: probe},
        "lock": InMemoryLock(clock),
        "clock": clock,
        "ids": SequentialIdGenerator(),
        "on_run": runs,
        "environ": {},
    }
    return app, install_jobs(app, **(options | overrides))


@pytest.mark.parametrize("name", [SYNC, ASYNC])
def test_a_run_opens_the_scope_of_a_scheduled_run_from_the_message(
    make_app: AppFactory, runs: Runs, name: str
) -> None:
    probe = Probe()
    app, _ = wire(make_app, probe, runs, settings={name: {"timeout_ms": 60_000}})

    run_message(app, name, (), MESSAGE)

    [seen] = probe.seen
    context = seen.context
    assert context is not None
    assert context.origin == "schedule"
    assert context.actor == system_actor(name)
    assert context.correlation_id == "corr-1"
    assert context.scheduled_at == AT
    assert context.tenant_id is None
    assert seen.execution.scheduled_at == AT
    assert seen.execution.attempt == 1
    assert context.deadline == seen.execution.started_at + timedelta(minutes=1)


def test_a_run_that_returns_is_logged_counted_and_observed_as_succeeded(
    make_app: AppFactory, runs: Runs, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = InMemoryMetrics()
    app, _ = wire(make_app, Probe(), runs, metrics=metrics)
    caplog.set_level(logging.INFO, logger="ddd_celery.scheduling")

    run_message(app, SYNC, (), MESSAGE)

    [record] = runs.records
    assert (record.job, record.outcome, record.scheduled_at) == (SYNC, "succeeded", AT)
    assert record.correlation_id == "corr-1"
    [line] = [r for r in caplog.records if r.name == "ddd_celery.scheduling"]
    assert line.getMessage() == "Scheduled job succeeded"
    assert line.__dict__["correlation_id"] == "corr-1"
    assert metrics.series(RUNS_COUNTER) == [
        {"job": SYNC, "context": "probe", "status": "succeeded", "error_code": ""}
    ]
    assert metrics.counter(RUNS_COUNTER) == 1
    assert len(metrics.observations(DURATION_HISTOGRAM, job=SYNC)) == 1


def test_a_sync_job_runs_in_the_task_s_thread_with_no_event_loop_and_what_it_returns_is_awaited(
    make_app: AppFactory, runs: Runs
) -> None:
    """A sync job costs no loop per message; one whose ``run`` returns an awaitable still
    has it awaited, and what it raises fails the run."""
    seen: list[object] = []

    async def late(execution: JobExecution) -> None:
        seen.append(asyncio.get_running_loop())
        raise DomainError("REFUSED", "the awaited part refused")

    def behaviour(execution: JobExecution) -> Any:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            seen.append(None)
        return late(execution)

    class Returning(SyncProbeJob):
        def run(self, execution: JobExecution) -> Any:  # type: ignore[override]
            self.probe.run(execution)
            return behaviour(execution)

    probe = Probe()
    app, registry = wire(make_app, probe, runs)
    registry.jobs = {**registry.jobs, SYNC: replace(registry.jobs[SYNC], job_class=Returning)}

    run_message(app, SYNC, (), MESSAGE)

    [seen_thread] = probe.seen
    assert seen_thread.thread == threading.current_thread().name
    assert seen[0] is None
    assert isinstance(seen[1], asyncio.AbstractEventLoop)
    [record] = runs.records
    assert (record.outcome, record.error_code) == ("failed", "REFUSED")


def test_a_job_that_raises_is_failed_with_its_code_and_the_worker_goes_on(
    make_app: AppFactory, runs: Runs
) -> None:
    refused = DomainError("REMINDER_NOT_DUE", "reminder r-1 is not due")

    def refuse(execution: JobExecution) -> None:
        raise refused

    app, _ = wire(make_app, Probe(behaviour=refuse), runs)

    run_message(app, SYNC, (), MESSAGE)

    [record] = runs.records
    assert (record.outcome, record.error_code, record.error_type) == (
        "failed",
        "REMINDER_NOT_DUE",
        "DomainError",
    )
    assert runs.errors == [refused]


def test_a_per_tenant_job_runs_tenant_by_tenant_and_a_failing_tenant_stops_no_other(
    make_app: AppFactory, runs: Runs
) -> None:
    def fail_for_acme(execution: JobExecution) -> None:
        if execution.tenant_id == "acme":
            raise DomainError("ACME_CLOSED", "acme is closed")

    probe = Probe(behaviour=fail_for_acme)
    app, _ = wire(
        make_app,
        probe,
        runs,
        tenants=InMemoryTenantDirectory(["acme", "globex"]),
        settings={SYNC: {"tenancy": "per-tenant"}},
    )

    run_message(app, SYNC, (), MESSAGE)

    assert [s.execution.tenant_id for s in probe.seen] == ["acme", "globex"]
    assert [s.context.tenant_id for s in probe.seen if s.context] == ["acme", "globex"]
    assert {s.context.correlation_id for s in probe.seen if s.context} == {"corr-1"}
    [record] = runs.records
    assert (record.outcome, record.error_code, record.tenant_id) == (
        "failed",
        "ACME_CLOSED",
        "acme",
    )


def test_a_message_naming_a_tenant_runs_for_that_tenant_only(
    make_app: AppFactory, runs: Runs
) -> None:
    probe = Probe()
    app, _ = wire(
        make_app,
        probe,
        runs,
        tenants=InMemoryTenantDirectory(["acme", "globex"]),
        settings={SYNC: {"tenancy": "per-tenant"}},
    )

    run_message(app, SYNC, (), OccurrenceMessage(AT, "corr-1", "globex").to_kwargs())

    assert [s.execution.tenant_id for s in probe.seen] == ["globex"]


class UnreachableTenants(TenantDirectory):
    def tenants(self) -> list[str]:
        raise ConnectionError("the tenant database is down")


def test_a_tenant_directory_that_cannot_answer_fails_the_occurrence(
    make_app: AppFactory, runs: Runs
) -> None:
    probe = Probe()
    app, _ = wire(
        make_app,
        probe,
        runs,
        tenants=UnreachableTenants(),
        settings={SYNC: {"tenancy": "per-tenant"}},
    )

    run_message(app, SYNC, (), MESSAGE)

    assert probe.seen == []
    [record] = runs.records
    assert (record.outcome, record.error_code) == ("failed", "UNEXPECTED_ERROR")


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        (("2026-03-02T10:00:00Z",), {}),
        ((), {"scheduled_at": "tomorrow", "correlation_id": "c"}),
        ((), {"scheduled_at": "2026-03-02T10:00:00", "correlation_id": "c"}),
        ((), {"scheduled_at": "2026-03-02T10:00:00Z"}),
        ((), {**MESSAGE, "payload": {"x": 1}}),
    ],
    ids=["positional", "not-an-instant", "naive", "no-correlation", "unknown-field"],
)
def test_a_message_that_cannot_be_read_is_logged_naming_the_job_and_runs_nothing(
    make_app: AppFactory,
    runs: Runs,
    caplog: pytest.LogCaptureFixture,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> None:
    probe = Probe()
    app, registry = wire(make_app, probe, runs)
    registry.run_state.claim(SYNC, AT, queue=False, ttl_ms=60_000)

    run_message(app, SYNC, args, kwargs)

    assert probe.seen == []
    assert runs.records == []
    [line] = [r for r in caplog.records if r.getMessage() == COULD_NOT_FOLLOW]
    assert line.levelno == logging.ERROR
    assert line.__dict__["job"] == SYNC
    assert registry.run_state.running(SYNC) == AT


def test_a_run_ends_its_claim_in_the_run_state(make_app: AppFactory, runs: Runs) -> None:
    app, registry = wire(make_app, Probe(), runs)
    assert registry.run_state.claim(SYNC, AT, queue=True, ttl_ms=60_000) is Claim.STARTED

    run_message(app, SYNC, (), MESSAGE)

    assert registry.run_state.running(SYNC) is None


class BrokenRunState(InMemoryJobRunState):
    def finish(self, job: str, scheduled_at: datetime, *, ttl_ms: int) -> datetime | None:
        raise ConnectionError("Redis is down")


def test_a_run_state_that_cannot_be_asked_is_logged_and_the_outcome_still_recorded(
    make_app: AppFactory, runs: Runs, caplog: pytest.LogCaptureFixture
) -> None:
    app, _ = wire(make_app, Probe(), runs, run_state=BrokenRunState(SystemClock()))

    run_message(app, SYNC, (), MESSAGE)

    assert [r.outcome for r in runs.records] == ["succeeded"]
    [line] = [r for r in caplog.records if r.getMessage() == COULD_NOT_FOLLOW]
    assert line.__dict__["operation"] == "finish the run"


def test_a_queued_occurrence_that_cannot_be_sent_is_failed_and_frees_the_job(
    make_app: AppFactory, runs: Runs, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe = Probe()
    app, registry = wire(make_app, probe, runs)

    def broker_down(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("the broker is down")

    monkeypatch.setattr(app, "send_task", broker_down)
    queued = AT + timedelta(hours=1)
    registry.run_state.claim(SYNC, AT, queue=True, ttl_ms=60_000)
    assert registry.run_state.claim(SYNC, queued, queue=True, ttl_ms=60_000) is Claim.QUEUED

    run_message(app, SYNC, (), MESSAGE)

    assert [(r.scheduled_at, r.outcome) for r in runs.records] == [
        (AT, "succeeded"),
        (queued, "failed"),
    ]
    assert registry.run_state.running(SYNC) is None


def raise_soft_time_limit(execution: JobExecution) -> None:
    raise SoftTimeLimitExceeded()


@pytest.mark.parametrize("name", [SYNC, ASYNC])
def test_a_soft_time_limit_aborts_the_signal_and_records_a_timeout_with_no_further_tenant(
    make_app: AppFactory, runs: Runs, name: str
) -> None:
    probe = Probe(behaviour=raise_soft_time_limit)
    app, _ = wire(
        make_app,
        probe,
        runs,
        tenants=InMemoryTenantDirectory(["acme", "globex"]),
        settings={name: {"tenancy": "per-tenant", "timeout_ms": 60_000}},
    )

    run_message(app, name, (), MESSAGE)

    [seen] = probe.seen
    assert isinstance(seen.execution.signal.reason, JobTimeoutError)
    [record] = runs.records
    assert (record.outcome, record.error_code, record.tenant_id) == ("failed", "JOB_TIMEOUT", None)
    assert runs.errors == [seen.execution.signal.reason]


def test_a_job_that_ignores_its_signal_is_recorded_timed_out_at_its_deadline_and_once(
    make_app: AppFactory, runs: Runs
) -> None:
    outcomes_while_running: list[list[str]] = []

    def ignore_signal(execution: JobExecution) -> None:
        outcomes_while_running.append([r.outcome for r in runs.wait_for(1, timeout=5)])

    probe = Probe(behaviour=ignore_signal)
    app, _ = wire(make_app, probe, runs, settings={SYNC: {"timeout_ms": 100}})

    run_message(app, SYNC, (), MESSAGE)

    assert outcomes_while_running == [["failed"]]
    [record] = runs.records
    assert (record.outcome, record.error_code) == ("failed", "JOB_TIMEOUT")
    assert 100 <= (record.duration_ms or 0) < 1_000
    assert isinstance(probe.seen[0].execution.signal.reason, JobTimeoutError)


def test_a_job_that_honours_its_signal_stops_at_the_deadline_and_is_recorded_once(
    make_app: AppFactory, runs: Runs
) -> None:
    stopped: list[BaseException] = []

    def wait_for_abort(execution: JobExecution) -> None:
        execution.signal.wait(5)
        try:
            execution.signal.throw_if_aborted()
        except JobTimeoutError as error:
            stopped.append(error)
            raise

    app, _ = wire(
        make_app, Probe(behaviour=wait_for_abort), runs, settings={SYNC: {"timeout_ms": 50}}
    )

    run_message(app, SYNC, (), MESSAGE)

    [record] = runs.records
    assert (record.outcome, record.error_code) == ("failed", "JOB_TIMEOUT")
    assert runs.errors == stopped


def test_a_run_within_its_timeout_is_not_timed_out_later(make_app: AppFactory, runs: Runs) -> None:
    app, _ = wire(make_app, Probe(), runs, settings={SYNC: {"timeout_ms": 100}})

    run_message(app, SYNC, (), MESSAGE)
    for timer in [t for t in threading.enumerate() if isinstance(t, threading.Timer)]:
        timer.join(1)  # a watchdog left armed would fire within this wait

    assert [r.outcome for r in runs.records] == ["succeeded"]
