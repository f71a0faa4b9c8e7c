"""ExecutionScope on contextvars: nesting restores, and the context follows tasks and threads."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime

import pytest

from ddd_celery.kernel import (
    ContextVarExecutionScope,
    ExecutionContext,
    FixedExecutionScope,
    system_actor,
)


def context(correlation_id: str, tenant_id: str | None = None) -> ExecutionContext:
    return ExecutionContext(
        origin="schedule",
        actor=system_actor("billing.send-payment-reminders"),
        correlation_id=correlation_id,
        scheduled_at=datetime(2026, 3, 2, 6, 0, tzinfo=UTC),
        tenant_id=tenant_id,
    )


def test_outside_any_scope_there_is_no_current_context() -> None:
    assert ContextVarExecutionScope().current() is None


def test_a_nested_scope_restores_the_outer_one_when_it_ends() -> None:
    scope = ContextVarExecutionScope()
    outer, inner = context("outer"), context("inner")

    with scope.open(outer):
        with scope.open(inner):
            assert scope.current() is inner
        assert scope.current() is outer
    assert scope.current() is None


def test_a_scope_is_closed_even_when_the_work_raises() -> None:
    scope = ContextVarExecutionScope()

    with pytest.raises(RuntimeError), scope.open(context("c-1")):
        raise RuntimeError("boom")

    assert scope.current() is None


def test_every_scope_instance_reads_the_same_context() -> None:
    with ContextVarExecutionScope().open(context("c-1")) as opened:
        assert ContextVarExecutionScope().current() is opened


async def test_the_context_follows_asyncio_tasks_each_keeping_its_own() -> None:
    scope = ContextVarExecutionScope()

    async def work(correlation_id: str) -> str | None:
        with scope.open(context(correlation_id)):
            await asyncio.sleep(0)
            current = scope.current()
            return None if current is None else current.correlation_id

    assert list(await asyncio.gather(work("a"), work("b"))) == ["a", "b"]
    assert scope.current() is None


async def test_a_task_started_inside_a_scope_inherits_it() -> None:
    scope = ContextVarExecutionScope()

    async def read() -> ExecutionContext | None:
        return scope.current()

    with scope.open(context("c-1")) as opened:
        task = asyncio.create_task(read())
    assert await task is opened


async def test_the_context_is_copied_into_a_worker_thread_by_to_thread() -> None:
    scope = ContextVarExecutionScope()
    seen: list[tuple[ExecutionContext | None, bool]] = []

    def read() -> None:
        seen.append((scope.current(), threading.current_thread() is threading.main_thread()))

    with scope.open(context("c-1")) as opened:
        await asyncio.to_thread(read)

    assert seen == [(opened, False)]


def test_a_plain_thread_does_not_see_the_scope_of_its_starter() -> None:
    scope = ContextVarExecutionScope()
    seen: list[ExecutionContext | None] = []

    with scope.open(context("c-1")):
        thread = threading.Thread(target=lambda: seen.append(scope.current()))
        thread.start()
        thread.join()

    assert seen == [None]


def test_the_fixed_scope_works_as_in_production_and_keeps_what_it_opened() -> None:
    scope = FixedExecutionScope()
    first, second = context("c-1", "acme"), context("c-1", "globex")

    with scope.open(first):
        assert scope.current() is first
    with scope.open(second):
        assert scope.current() is second

    assert scope.current() is None
    assert scope.opened == [first, second]
