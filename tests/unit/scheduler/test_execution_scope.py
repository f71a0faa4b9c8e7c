"""Seed 004, "The execution scope": the scheduler opens it around each run."""

from __future__ import annotations

from ddd_celery.declarations.execution import JobExecution
from ddd_celery.kernel import ExecutionContext, FixedExecutionScope, system_actor
from ddd_celery.testing import ManualJobScheduler

from .conftest import JOB, MINUTE, SECOND, Recorder, at, plus


async def test_each_run_has_origin_schedule_and_the_system_actor_of_the_job(
    scheduler: ManualJobScheduler, fixed_execution_scope: FixedExecutionScope
) -> None:
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=Recorder())
    await scheduler.start()

    await scheduler.advance(2 * MINUTE)

    [context] = fixed_execution_scope.opened
    assert (context.origin, context.actor) == ("schedule", system_actor(JOB))


async def test_each_run_has_a_fresh_correlation_id_from_the_id_generator(
    scheduler: ManualJobScheduler, fixed_execution_scope: FixedExecutionScope
) -> None:
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=Recorder())
    await scheduler.start()

    await scheduler.advance(32 * MINUTE)

    assert [c.correlation_id for c in fixed_execution_scope.opened] == ["id-1", "id-2", "id-3"]
    assert [run.correlation_id for run in scheduler.runs] == ["id-1", "id-2", "id-3"]


async def test_the_scope_carries_the_instant_the_run_was_due(
    scheduler: ManualJobScheduler, fixed_execution_scope: FixedExecutionScope
) -> None:
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=Recorder())
    await scheduler.start()

    await scheduler.advance(17 * MINUTE)

    assert [c.scheduled_at for c in fixed_execution_scope.opened] == [at(10, 0), at(10, 15)]


async def test_the_deadline_is_the_start_plus_timeout_ms_when_the_job_has_one(
    scheduler: ManualJobScheduler, fixed_execution_scope: FixedExecutionScope
) -> None:
    scheduler.register(
        name=JOB, schedule={"every": "15m", "timeout_ms": 90 * SECOND}, run=Recorder()
    )
    scheduler.register(name="billing.export-ledger", schedule={"every": "15m"}, run=Recorder())
    await scheduler.start()

    await scheduler.advance(2 * MINUTE)

    deadlines = {c.actor.id: c.deadline for c in fixed_execution_scope.opened}
    assert deadlines == {JOB: plus(at(10, 0), 90 * SECOND), "billing.export-ledger": None}


async def test_the_job_reads_its_scope_while_it_runs_and_it_is_closed_after(
    scheduler: ManualJobScheduler, fixed_execution_scope: FixedExecutionScope
) -> None:
    seen: list[ExecutionContext | None] = []

    async def run(execution: JobExecution) -> None:
        seen.append(fixed_execution_scope.current())

    scheduler.register(name=JOB, schedule={"every": "15m"}, run=run)
    await scheduler.start()

    await scheduler.advance(2 * MINUTE)

    assert seen == fixed_execution_scope.opened
    assert fixed_execution_scope.current() is None


async def test_a_sync_job_reads_its_scope_too(
    scheduler: ManualJobScheduler, fixed_execution_scope: FixedExecutionScope
) -> None:
    seen: list[ExecutionContext | None] = []
    scheduler.register(
        name=JOB,
        schedule={"every": "15m"},
        run=lambda execution: seen.append(fixed_execution_scope.current()),
    )
    await scheduler.start()

    await scheduler.advance(2 * MINUTE)

    assert seen == fixed_execution_scope.opened
    assert len(seen) == 1
