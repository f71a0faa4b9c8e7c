"""Test doubles shipped with the library, in one place: the fixed clock, the in-memory adapter
of every port, the manual scheduler and its timers, ``manual_scheduler_for``,
``assert_jobs_take_ports``; the contract suites are in ``ddd_celery.testing.contracts``.

Each double is also importable from the package of its port (``ddd_celery.kernel``,
``ddd_celery.background``, ...): these are the same classes. The names are imported on first
use, so loading the pytest plugin (a module of this package, loaded by every pytest run where
ddd_celery is installed) imports no scheduler, and a project without Celery never imports it:
only ``manual_scheduler_for`` needs it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ddd_celery.background.memory import InMemoryJobStore
    from ddd_celery.kernel.clock import FixedClock
    from ddd_celery.kernel.commands import InMemoryCommandBus
    from ddd_celery.kernel.ids import SequentialIdGenerator
    from ddd_celery.kernel.lock import InMemoryLock
    from ddd_celery.kernel.metrics import InMemoryMetrics
    from ddd_celery.kernel.reporting import InMemoryErrorReporter
    from ddd_celery.kernel.scope import FixedExecutionScope
    from ddd_celery.kernel.tenants import InMemoryTenantDirectory
    from ddd_celery.kernel.unit_of_work import InMemoryUnitOfWork
    from ddd_celery.processes.memory import InMemoryProcessStore
    from ddd_celery.scheduling.checkpoints import InMemoryJobCheckpoints
    from ddd_celery.scheduling.last_runs import InMemoryJobLastRuns
    from ddd_celery.scheduling.pauses import InMemoryJobPauses
    from ddd_celery.scheduling.run_state import InMemoryJobRunState
    from ddd_celery.scheduling.tenant_runs import InMemoryJobTenantRuns
    from ddd_celery.testing.job_ports import assert_jobs_take_ports
    from ddd_celery.testing.manual import ManualJobScheduler, ManualJobTimers
    from ddd_celery.testing.wired import manual_scheduler_for

_MODULES = {
    "FixedClock": "ddd_celery.kernel.clock",
    "FixedExecutionScope": "ddd_celery.kernel.scope",
    "InMemoryCommandBus": "ddd_celery.kernel.commands",
    "InMemoryErrorReporter": "ddd_celery.kernel.reporting",
    "InMemoryJobCheckpoints": "ddd_celery.scheduling.checkpoints",
    "InMemoryJobLastRuns": "ddd_celery.scheduling.last_runs",
    "InMemoryJobPauses": "ddd_celery.scheduling.pauses",
    "InMemoryJobRunState": "ddd_celery.scheduling.run_state",
    "InMemoryJobStore": "ddd_celery.background.memory",
    "InMemoryJobTenantRuns": "ddd_celery.scheduling.tenant_runs",
    "InMemoryLock": "ddd_celery.kernel.lock",
    "InMemoryMetrics": "ddd_celery.kernel.metrics",
    "InMemoryProcessStore": "ddd_celery.processes.memory",
    "InMemoryTenantDirectory": "ddd_celery.kernel.tenants",
    "InMemoryUnitOfWork": "ddd_celery.kernel.unit_of_work",
    "ManualJobScheduler": "ddd_celery.testing.manual",
    "ManualJobTimers": "ddd_celery.testing.manual",
    "SequentialIdGenerator": "ddd_celery.kernel.ids",
    "assert_jobs_take_ports": "ddd_celery.testing.job_ports",
    "manual_scheduler_for": "ddd_celery.testing.wired",
}

__all__ = [
    "FixedClock",
    "FixedExecutionScope",
    "InMemoryCommandBus",
    "InMemoryErrorReporter",
    "InMemoryJobCheckpoints",
    "InMemoryJobLastRuns",
    "InMemoryJobPauses",
    "InMemoryJobRunState",
    "InMemoryJobStore",
    "InMemoryJobTenantRuns",
    "InMemoryLock",
    "InMemoryMetrics",
    "InMemoryProcessStore",
    "InMemoryTenantDirectory",
    "InMemoryUnitOfWork",
    "ManualJobScheduler",
    "ManualJobTimers",
    "SequentialIdGenerator",
    "assert_jobs_take_ports",
    "manual_scheduler_for",
]


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return getattr(importlib.import_module(_MODULES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
