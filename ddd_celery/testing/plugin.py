"""The pytest plugin of ddd_celery (registered through the pytest11 entry point).

Fixtures for specs about time: ``fixed_clock`` (at ``DEFAULT_INSTANT``, or at the instant of
``@pytest.mark.fixed_clock("2026-03-02T09:58:30Z")``), ``in_memory_lock``,
``fixed_execution_scope``, ``sequential_ids``, and ``manual_scheduler`` built on them. The
scheduler is returned unstarted: the spec registers its jobs, then ``await start()``.

For background jobs, on the same clock, scope and ids: ``in_memory_job_store``,
``stored_job_queue`` (enqueues into that store), ``manual_job_timers`` and ``queue_worker``
(polls that store on those timers: the spec registers its jobs, ``await start()``, then moves
time with ``await manual_job_timers.advance(ms)``; nothing sleeps).
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
    from ddd_celery.background import InMemoryJobStore, QueueWorker, StoredJobQueue
    from ddd_celery.testing.manual import ManualJobScheduler, ManualJobTimers

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


# the background fixtures import ddd_celery.background when a spec asks for them, for the
# same reason as manual_scheduler


@pytest.fixture
def in_memory_job_store() -> InMemoryJobStore:
    """An empty job store of the spec's own, written at once (in no unit of work)."""
    from ddd_celery.background import InMemoryJobStore  # noqa: PLC0415

    return InMemoryJobStore()


@pytest.fixture
def stored_job_queue(
    in_memory_job_store: InMemoryJobStore,
    fixed_clock: FixedClock,
    sequential_ids: SequentialIdGenerator,
    fixed_execution_scope: FixedExecutionScope,
) -> StoredJobQueue:
    """The ``JobQueue`` a use case enqueues through, into ``in_memory_job_store``: the job's
    ids are ``sequential_ids``', its ``run_at`` read on ``fixed_clock``."""
    from ddd_celery.background import StoredJobQueue  # noqa: PLC0415

    return StoredJobQueue(
        store=in_memory_job_store,
        clock=fixed_clock,
        ids=sequential_ids,
        scope=fixed_execution_scope,
    )


@pytest.fixture
def manual_job_timers(fixed_clock: FixedClock) -> ManualJobTimers:
    """Timers that fire only when the spec advances them, moving ``fixed_clock``."""
    from ddd_celery.testing.manual import ManualJobTimers  # noqa: PLC0415

    return ManualJobTimers(fixed_clock)


@pytest.fixture
def queue_worker(
    in_memory_job_store: InMemoryJobStore,
    fixed_clock: FixedClock,
    fixed_execution_scope: FixedExecutionScope,
    manual_job_timers: ManualJobTimers,
) -> QueueWorker:
    """A ``QueueWorker`` polling ``in_memory_job_store`` on ``manual_job_timers``, not started."""
    from ddd_celery.background import QueueWorker  # noqa: PLC0415

    return QueueWorker(
        store=in_memory_job_store,
        clock=fixed_clock,
        scope=fixed_execution_scope,
        timers=manual_job_timers,
    )
