"""SystemJobTimers: real time and worker threads, for production (no test waits on real time)."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from datetime import UTC, datetime

import pytest

from ddd_celery.declarations.execution import JobExecution
from ddd_celery.kernel import AbortController
from ddd_celery.scheduling.timers import SystemJobTimers

_REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("request", default="none")
NOW = datetime(2026, 3, 2, 10, tzinfo=UTC)


async def test_a_sync_job_runs_in_a_worker_thread_and_sees_the_callers_context() -> None:
    _REQUEST.set("req-7")
    execution = JobExecution(scheduled_at=NOW, started_at=NOW, signal=AbortController().signal)

    def run(given: JobExecution) -> tuple[int, str, bool]:
        return threading.get_ident(), _REQUEST.get(), given is execution

    thread, request, same = await SystemJobTimers().run_sync(run, execution)

    assert thread != threading.get_ident()
    assert (request, same) == ("req-7", True)


async def test_a_zero_sleep_hands_the_loop_to_the_tasks_that_are_ready() -> None:
    ran: list[str] = []
    other = asyncio.get_running_loop().create_task(_append(ran, "other"))

    await SystemJobTimers().sleep(0)

    assert ran == ["other"]
    await other


async def _append(into: list[str], item: str) -> None:
    into.append(item)


async def test_a_negative_sleep_is_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        await SystemJobTimers().sleep(-5)
