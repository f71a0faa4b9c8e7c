"""Fixtures of the background job specs: a fixed clock, a scope, ids and an in-memory store.

The scope is the shipped plugin's (``ddd_celery.testing.plugin``). The clock and the ids are
not the plugin's ``fixed_clock`` and ``sequential_ids``: the specs read their instants from
``START`` (08:00 on a Thursday, not the plugin's Monday midnight) and their job ids as ``job-N``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ddd_celery.background import InMemoryJobStore, StoredJobQueue
from ddd_celery.kernel import (
    Actor,
    ExecutionContext,
    FixedClock,
    FixedExecutionScope,
    SequentialIdGenerator,
)

START = datetime(2026, 10, 1, 8, 0, tzinfo=UTC)
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def plus(ms: int) -> datetime:
    return START + timedelta(milliseconds=ms)


def work(tenant: str | None = "t-1", correlation_id: str = "corr-1") -> ExecutionContext:
    """The context of a use case in progress, as a request handler opens it."""
    return ExecutionContext(
        origin="http",
        actor=Actor("user", "u-1"),
        correlation_id=correlation_id,
        tenant_id=tenant,
        traceparent=TRACEPARENT,
    )


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(START)


@pytest.fixture
def scope(fixed_execution_scope: FixedExecutionScope) -> FixedExecutionScope:
    """The plugin's ``fixed_execution_scope`` under the name the specs use."""
    return fixed_execution_scope


@pytest.fixture
def ids() -> SequentialIdGenerator:
    return SequentialIdGenerator("job-")


@pytest.fixture
def store() -> InMemoryJobStore:
    return InMemoryJobStore()


@pytest.fixture
def jobs(
    store: InMemoryJobStore,
    clock: FixedClock,
    ids: SequentialIdGenerator,
    scope: FixedExecutionScope,
) -> StoredJobQueue:
    return StoredJobQueue(store=store, clock=clock, ids=ids, scope=scope)
