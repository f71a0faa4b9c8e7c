"""run_attempt: one occurrence, run tenant by tenant in its own execution scope."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ddd_celery.declarations.execution import JobExecution
from ddd_celery.declarations.options import JobOptions, Tenancy
from ddd_celery.kernel import (
    AbortController,
    DomainError,
    ExecutionContext,
    FixedExecutionScope,
    InMemoryTenantDirectory,
    system_actor,
)
from ddd_celery.scheduling.errors import (
    InvalidJobScheduleError,
    JobLockUnavailableError,
    JobTimeoutError,
)
from ddd_celery.scheduling.execution import (
    Attempt,
    AttemptResult,
    context_for,
    deadline_of,
    not_run,
    ran,
    require_tenants,
    run_attempt,
    tenants_of,
)
from ddd_celery.scheduling.outcomes import Outcome

JOB = "billing.close-month"
SCHEDULED = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)
STARTED = SCHEDULED + timedelta(seconds=3)
PER_TENANT = JobOptions(tenancy=Tenancy.PER_TENANT)


def an_attempt(
    tenants: list[str | None],
    controller: AbortController | None = None,
    *,
    deadline: datetime | None = None,
) -> Attempt:
    return Attempt(
        job=JOB,
        scheduled_at=SCHEDULED,
        started_at=STARTED,
        correlation_id="id-7",
        signal=(controller or AbortController()).signal,
        deadline=deadline,
        tenants=tenants,
    )


class Recorder:
    """A job that notes what it was told and what scope it ran in."""

    def __init__(self, scope: FixedExecutionScope, fail_for: dict[str, Exception] | None = None):
        self.scope = scope
        self.fail_for = fail_for or {}
        self.executions: list[JobExecution] = []
        self.contexts: list[ExecutionContext | None] = []

    def run(self, execution: JobExecution) -> None:
        self.executions.append(execution)
        self.contexts.append(self.scope.current())
        if execution.tenant_id in self.fail_for:
            raise self.fail_for[execution.tenant_id]


async def test_a_global_job_runs_once_in_no_tenant() -> None:
    scope = FixedExecutionScope()
    job = Recorder(scope)

    result = await run_attempt(an_attempt([None]), job.run, scope)

    assert result == AttemptResult(None, None)
    assert [execution.tenant_id for execution in job.executions] == [None]


async def test_the_job_is_told_its_occurrence() -> None:
    scope = FixedExecutionScope()
    job = Recorder(scope)
    controller = AbortController()

    await run_attempt(an_attempt([None], controller), job.run, scope)

    [execution] = job.executions
    assert execution.scheduled_at == SCHEDULED
    assert execution.started_at == STARTED
    assert execution.attempt == 1
    assert execution.signal is controller.signal


async def test_each_run_happens_in_a_scope_of_origin_schedule_as_the_jobs_system_actor() -> None:
    scope = FixedExecutionScope()
    job = Recorder(scope)
    deadline = STARTED + timedelta(minutes=1)

    await run_attempt(an_attempt(["acme"], deadline=deadline), job.run, scope)

    assert job.contexts == [
        ExecutionContext(
            origin="schedule",
            actor=system_actor(JOB),
            correlation_id="id-7",
            scheduled_at=SCHEDULED,
            deadline=deadline,
            tenant_id="acme",
        )
    ]
    assert str(system_actor(JOB)) == "system:billing.close-month"
    assert scope.current() is None


async def test_a_per_tenant_job_runs_once_per_tenant_in_order_sharing_the_correlation_id() -> None:
    scope = FixedExecutionScope()
    job = Recorder(scope)

    await run_attempt(an_attempt(["acme", "globex"]), job.run, scope)

    assert [execution.tenant_id for execution in job.executions] == ["acme", "globex"]
    assert [(c.tenant_id, c.correlation_id) for c in scope.opened] == [
        ("acme", "id-7"),
        ("globex", "id-7"),
    ]


async def test_tenants_run_one_after_the_other_never_at_once() -> None:
    scope = FixedExecutionScope()
    steps: list[str] = []

    async def run(execution: JobExecution) -> None:
        steps.append(f"start {execution.tenant_id}")
        await asyncio.sleep(0)
        steps.append(f"end {execution.tenant_id}")

    await run_attempt(an_attempt(["acme", "globex"]), run, scope)

    assert steps == ["start acme", "end acme", "start globex", "end globex"]


async def test_a_failing_tenant_does_not_stop_the_others_and_the_first_error_wins() -> None:
    scope = FixedExecutionScope()
    first, second = RuntimeError("acme down"), DomainError("CLOSED", "closed")
    job = Recorder(scope, fail_for={"acme": first, "initech": second})

    result = await run_attempt(an_attempt(["acme", "globex", "initech"]), job.run, scope)

    assert [execution.tenant_id for execution in job.executions] == ["acme", "globex", "initech"]
    assert result == AttemptResult(first, "acme")


async def test_an_aborted_signal_stops_before_the_next_tenant_and_blames_no_tenant() -> None:
    scope = FixedExecutionScope()
    controller = AbortController()
    timeout = JobTimeoutError("timed out", job=JOB)
    ran_for: list[str | None] = []

    def run(execution: JobExecution) -> None:
        ran_for.append(execution.tenant_id)
        controller.abort(timeout)

    result = await run_attempt(an_attempt(["acme", "globex"], controller), run, scope)

    assert ran_for == ["acme"]
    assert result == AttemptResult(timeout, None)


async def test_a_signal_aborted_before_the_occurrence_runs_no_tenant() -> None:
    scope = FixedExecutionScope()
    controller = AbortController()
    controller.abort(JobTimeoutError("timed out", job=JOB))
    job = Recorder(scope)

    result = await run_attempt(an_attempt(["acme"], controller), job.run, scope)

    assert job.executions == []
    assert isinstance(result.error, JobTimeoutError)
    assert result.tenant_id is None


async def test_a_job_that_throws_its_aborted_reason_fails_with_it() -> None:
    scope = FixedExecutionScope()
    controller = AbortController()
    reason = JobTimeoutError("timed out", job=JOB)

    def run(execution: JobExecution) -> None:
        controller.abort(reason)
        execution.signal.throw_if_aborted()

    result = await run_attempt(an_attempt([None], controller), run, scope)

    assert result == AttemptResult(reason, None)


async def test_an_async_job_is_awaited_in_its_scope() -> None:
    scope = FixedExecutionScope()
    seen: list[str | None] = []

    async def run(execution: JobExecution) -> None:
        await asyncio.sleep(0)
        current = scope.current()
        seen.append(None if current is None else current.tenant_id)

    await run_attempt(an_attempt(["acme"]), run, scope)

    assert seen == ["acme"]


async def test_an_async_run_method_of_a_job_class_is_awaited() -> None:
    scope = FixedExecutionScope()

    class Job:
        def __init__(self) -> None:
            self.ran = False

        async def run(self, execution: JobExecution) -> None:
            await asyncio.sleep(0)
            self.ran = True

    job = Job()
    await run_attempt(an_attempt([None]), job.run, scope)

    assert job.ran


async def test_a_sync_job_runs_inline_by_default() -> None:
    scope = FixedExecutionScope()
    threads: list[threading.Thread] = []

    await run_attempt(
        an_attempt([None]), lambda _: threads.append(threading.current_thread()), scope
    )

    assert threads == [threading.current_thread()]


async def test_a_sync_job_runs_through_the_drivers_caller_and_sees_its_scope_in_a_thread() -> None:
    scope = FixedExecutionScope()
    seen: list[tuple[bool, str | None]] = []

    def run(execution: JobExecution) -> None:
        current = scope.current()
        seen.append(
            (
                threading.current_thread() is threading.main_thread(),
                None if current is None else current.tenant_id,
            )
        )

    async def to_thread(job: Any, execution: JobExecution) -> Any:
        return await asyncio.to_thread(job, execution)

    await run_attempt(an_attempt(["acme", "globex"]), run, scope, call_sync=to_thread)

    assert seen == [(False, "acme"), (False, "globex")]


async def test_a_sync_callable_that_returns_an_awaitable_is_awaited() -> None:
    scope = FixedExecutionScope()
    done: list[str] = []

    async def later() -> None:
        done.append("awaited")

    class ReturnsAwaitable:
        def __call__(self, execution: JobExecution) -> Any:
            return later()

    await run_attempt(an_attempt([None]), ReturnsAwaitable(), scope)

    assert done == ["awaited"]


async def test_a_failing_async_job_fails_the_attempt_with_its_error() -> None:
    scope = FixedExecutionScope()
    error = ValueError("bad")

    async def run(execution: JobExecution) -> None:
        raise error

    assert await run_attempt(an_attempt([None]), run, scope) == AttemptResult(error, None)


# -- tenants, deadlines and records ---------------------------------------------------------


def test_a_global_job_runs_for_nobody_in_particular() -> None:
    assert tenants_of(JOB, JobOptions(), InMemoryTenantDirectory(["acme"])) == [None]


def test_a_per_tenant_job_runs_for_each_tenant_of_the_directory() -> None:
    directory = InMemoryTenantDirectory(["acme", "globex"])

    assert tenants_of(JOB, PER_TENANT, directory) == ["acme", "globex"]


def test_a_per_tenant_job_asks_the_directory_at_each_occurrence() -> None:
    directory = InMemoryTenantDirectory(["acme"])
    tenants_of(JOB, PER_TENANT, directory)
    directory.add("globex")

    assert tenants_of(JOB, PER_TENANT, directory) == ["acme", "globex"]


def test_a_per_tenant_job_without_a_directory_is_refused_naming_the_job() -> None:
    with pytest.raises(InvalidJobScheduleError, match=JOB):
        tenants_of(JOB, PER_TENANT, None)
    with pytest.raises(InvalidJobScheduleError, match="tenants="):
        require_tenants(JOB, PER_TENANT, None)


def test_a_global_job_needs_no_directory_and_runs_once_in_no_tenant() -> None:
    require_tenants(JOB, JobOptions(), None)  # refused for a per-tenant job, above

    assert tenants_of(JOB, JobOptions(), None) == [None]
    assert tenants_of(JOB, JobOptions(), InMemoryTenantDirectory(["acme"])) == [None]


def test_the_deadline_is_the_start_plus_the_timeout_when_there_is_one() -> None:
    assert deadline_of(STARTED, JobOptions(timeout_ms=60_000)) == STARTED + timedelta(minutes=1)
    assert deadline_of(STARTED, JobOptions()) is None


def test_context_for_names_the_tenant_of_the_run() -> None:
    context = context_for(an_attempt(["acme"]), "acme")

    assert (context.origin, context.actor, context.tenant_id) == (
        "schedule",
        system_actor(JOB),
        "acme",
    )


def test_a_run_that_succeeded_is_recorded_with_its_duration() -> None:
    record = ran(an_attempt([None]), STARTED + timedelta(milliseconds=1_500), None, None)

    assert record.outcome is Outcome.SUCCEEDED
    assert record.context == "billing"
    assert record.duration_ms == 1_500.0
    assert record.started_at == STARTED
    assert record.correlation_id == "id-7"
    assert (record.error_code, record.error_type) == (None, None)
    assert record.ran


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (JobTimeoutError("t", job=JOB), "JOB_TIMEOUT"),
        (DomainError("MONTH_CLOSED", "closed"), "MONTH_CLOSED"),
        (KeyError("x"), "UNEXPECTED_ERROR"),
    ],
)
def test_a_run_that_failed_is_recorded_with_the_code_and_type_of_its_error(
    error: Exception, code: str
) -> None:
    record = ran(an_attempt(["acme"]), STARTED, error, "acme")

    assert record.outcome is Outcome.FAILED
    assert (record.error_code, record.error_type) == (code, type(error).__name__)
    assert record.tenant_id == "acme"


def test_an_occurrence_that_did_not_run_has_no_run_fields() -> None:
    record = not_run(JOB, SCHEDULED, Outcome.MISSED)

    assert (record.outcome, record.scheduled_at, record.context) == (
        Outcome.MISSED,
        SCHEDULED,
        "billing",
    )
    assert (record.started_at, record.duration_ms, record.error_code) == (None, None, None)
    assert not record.ran


def test_an_occurrence_whose_lock_could_not_be_asked_fails_with_its_code() -> None:
    record = not_run(
        JOB,
        SCHEDULED,
        Outcome.FAILED,
        error=JobLockUnavailableError("down", job=JOB),
        correlation_id="id-9",
    )

    assert (record.error_code, record.error_type, record.correlation_id) == (
        "JOB_LOCK_UNAVAILABLE",
        "JobLockUnavailableError",
        "id-9",
    )
