"""Test doubles shipped with the library: the manual scheduler, its timers, contract suites.

The names are imported on first use, so loading the pytest plugin (a module of this package,
loaded by every pytest run where ddd_celery is installed) imports no scheduler, and a project
without Celery never imports it: only ``manual_scheduler_for`` needs it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ddd_celery.testing.job_ports import assert_jobs_take_ports
    from ddd_celery.testing.manual import ManualJobScheduler, ManualJobTimers
    from ddd_celery.testing.wired import manual_scheduler_for

_MODULES = {
    "ManualJobScheduler": "ddd_celery.testing.manual",
    "ManualJobTimers": "ddd_celery.testing.manual",
    "assert_jobs_take_ports": "ddd_celery.testing.job_ports",
    "manual_scheduler_for": "ddd_celery.testing.wired",
}

__all__ = [
    "ManualJobScheduler",
    "ManualJobTimers",
    "assert_jobs_take_ports",
    "manual_scheduler_for",
]


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return getattr(importlib.import_module(_MODULES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
