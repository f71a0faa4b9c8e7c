"""The pytest plugin of ddd_celery (registered through the pytest11 entry point).

Fixtures for specs about time: ``fixed_clock`` (at ``DEFAULT_INSTANT``, or at the instant of
``@pytest.mark.fixed_clock("2026-03-02T09:58:30Z")``), ``in_memory_lock``,
``fixed_execution_scope``, ``sequential_ids``, and ``manual_scheduler`` built on them. The
scheduler is returned unstarted: the spec registers its jobs, then ``await start()``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest

from ddd_celery.kernel.clock import FixedClock
from ddd_celery.kernel.ids import SequentialIdGenerator
from ddd_celery.kernel.lock import InMemoryLock
from ddd_celery.kernel.scope import FixedExecutionScope

if TYPE_CHECKING:
    from ddd_celery.testing.manual import ManualJobScheduler

DEFAULT_INSTANT = datetime(2026, 3, 2, tzinfo=UTC)
"""Where ``fixed_clock`` starts without a marker: a Monday, midnight UTC."""

MARKER = "fixed_clock"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(instant): start the fixed_clock fixture at an aware datetime or ISO 8601 text",
    )


@pytest.fixture
def fixed_clock(request: pytest.FixtureRequest) -> FixedClock:
    """A clock that moves only when the spec (or a manual scheduler) moves it."""
    marker = request.node.get_closest_marker(MARKER)
    if marker is None:
        return FixedClock(DEFAULT_INSTANT)
    (instant,) = marker.args
    if isinstance(instant, str):
        instant = datetime.fromisoformat(instant)
    return FixedClock(instant)


@pytest.fixture
def in_memory_lock(fixed_clock: FixedClock) -> InMemoryLock:
    """The lock of one instance; share it between two schedulers to make two instances."""
    return InMemoryLock(fixed_clock)


@pytest.fixture
def fixed_execution_scope() -> FixedExecutionScope:
    """The execution scope, keeping every context it opened in ``opened``."""
    return FixedExecutionScope()


@pytest.fixture
def sequential_ids() -> SequentialIdGenerator:
    """``id-1``, ``id-2``, ...: correlation ids a spec can predict."""
    return SequentialIdGenerator()


@pytest.fixture
def manual_scheduler(
    fixed_clock: FixedClock,
    in_memory_lock: InMemoryLock,
    fixed_execution_scope: FixedExecutionScope,
    sequential_ids: SequentialIdGenerator,
) -> ManualJobScheduler:
    """A ``ManualJobScheduler`` on the fixtures above, not started."""
    # imported here, not when pytest loads the plugin: importing the scheduler before coverage
    # starts would hide its lines from a project's coverage report
    from ddd_celery.testing.manual import ManualJobScheduler  # noqa: PLC0415

    return ManualJobScheduler(
        clock=fixed_clock,
        lock=in_memory_lock,
        scope=fixed_execution_scope,
        ids=sequential_ids,
    )
