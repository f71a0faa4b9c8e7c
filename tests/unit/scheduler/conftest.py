"""Helpers of the engine specs: schedulers on the plugin's fixed clock, and jobs a test holds."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ddd_celery.declarations.execution import JobExecution
from ddd_celery.kernel import (
    FixedClock,
    FixedExecutionScope,
    InMemoryLock,
    InMemoryMetrics,
    InMemoryTenantDirectory,
    Lease,
    Lock,
    SequentialIdGenerator,
)
from ddd_celery.scheduling.observability import DEFAULT_LOGGER
from ddd_celery.testing import ManualJobScheduler

START = datetime(2026, 3, 2, 9, 58, 30, tzinfo=UTC)
"""Where the engine specs start: 90 s before 10:00 UTC, on a Monday."""
JOB = "billing.send-payment-reminders"
SECOND = 1_000
MINUTE = 60_000


def at(hour: int, minute: int, second: int = 0) -> datetime:
    """An instant of 2026-03-02, UTC."""
    return datetime(2026, 3, 2, hour, minute, second, tzinfo=UTC)


def plus(instant: datetime, ms: int) -> datetime:
    return instant + timedelta(milliseconds=ms)


class Gate:
    """An async job the test holds: each run waits until the test opens the gate.

    ``checks_signal`` makes it a good citizen that calls ``throw_if_aborted`` after its step.
    """

    def __init__(self, *, checks_signal: bool = False) -> None:
        self.started: list[JobExecution] = []
        self.ended: list[JobExecution] = []
        self._open = asyncio.Event()
        self._checks_signal = checks_signal

    async def __call__(self, execution: JobExecution) -> None:
        self.started.append(execution)
        await self._open.wait()
        if self._checks_signal:
            execution.signal.throw_if_aborted()
        self.ended.append(execution)

    def open(self) -> None:
        self._open.set()


class Recorder:
    """An async job that keeps each execution it was given."""

    def __init__(self) -> None:
        self.executions: list[JobExecution] = []

    async def __call__(self, execution: JobExecution) -> None:
        self.executions.append(execution)

    @property
    def due(self) -> list[datetime]:
        return [execution.scheduled_at for execution in self.executions]


class SpyLock(Lock):
    """A lock that keeps every call it was given, answering as ``InMemoryLock`` does."""

    def __init__(self, clock: FixedClock) -> None:
        self._inner = InMemoryLock(clock)
        self.acquired: list[tuple[str, int]] = []
        self.released: list[str] = []

    def acquire(self, key: str, ttl_ms: int) -> Lease | None:
        self.acquired.append((key, ttl_ms))
        return self._inner.acquire(key, ttl_ms)

    def release(self, lease: Lease) -> bool:
        self.released.append(lease.key)
        return self._inner.release(lease)


class DownLock(Lock):
    """A lock whose store cannot be reached."""

    def acquire(self, key: str, ttl_ms: int) -> Lease | None:
        raise ConnectionError("redis://10.0.0.7:6379 refused the connection")

    def release(self, lease: Lease) -> bool:
        raise ConnectionError("redis://10.0.0.7:6379 refused the connection")


@pytest.fixture
def fixed_clock() -> FixedClock:
    """The plugin's fixture, started at ``START`` for every engine spec."""
    return FixedClock(START)


@pytest.fixture
def metrics() -> InMemoryMetrics:
    return InMemoryMetrics()


@pytest.fixture
def tenants() -> InMemoryTenantDirectory:
    return InMemoryTenantDirectory(["acme", "globex"])


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Every record of the scheduler's logger, debug included."""
    caplog.set_level(logging.DEBUG, logger=DEFAULT_LOGGER)
    return caplog


@pytest.fixture
def build(
    *,
    fixed_clock: FixedClock,
    in_memory_lock: InMemoryLock,
    fixed_execution_scope: FixedExecutionScope,
    sequential_ids: SequentialIdGenerator,
    metrics: InMemoryMetrics,
    tenants: InMemoryTenantDirectory,
) -> Callable[..., ManualJobScheduler]:
    """A manual scheduler on the shared fixtures; keyword arguments replace any of them."""

    def make(**options: Any) -> ManualJobScheduler:
        ports: dict[str, Any] = {
            "clock": fixed_clock,
            "lock": in_memory_lock,
            "scope": fixed_execution_scope,
            "ids": sequential_ids,
            "metrics": metrics,
            "tenants": tenants,
        }
        return ManualJobScheduler(**(ports | options))

    return make


@pytest.fixture
def scheduler(build: Callable[..., ManualJobScheduler]) -> ManualJobScheduler:
    return build()
