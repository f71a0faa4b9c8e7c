"""How a scheduler waits: the kernel's timers port, importable from here as before."""

from __future__ import annotations

from ddd_celery.kernel.timers import JobTimers, SystemJobTimers

__all__ = ["JobTimers", "SystemJobTimers"]
