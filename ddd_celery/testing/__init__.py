"""Test doubles shipped with the library: the manual scheduler, its timers, contract suites.

The names are imported on first use, so loading the pytest plugin (a module of this package,
loaded by every pytest run where ddd_celery is installed) imports no scheduler.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ddd_celery.testing.manual import ManualJobScheduler, ManualJobTimers

__all__ = ["ManualJobScheduler", "ManualJobTimers"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("ddd_celery.testing.manual"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
