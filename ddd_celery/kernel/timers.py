"""How a scheduler or a worker waits: the only place either meets real time and real threads.

Neither calls ``asyncio.sleep`` or ``asyncio.to_thread`` itself; each asks its ``JobTimers``.
Production uses ``SystemJobTimers``; a spec uses ``ManualJobTimers`` (in ``ddd_celery.testing``),
which fires timers on a fixed clock and runs sync jobs inline, so a spec never waits for real
time nor races a thread.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any


class JobTimers(ABC):
    """Sleeping and waiting on blocking work, for a driver on an asyncio loop."""

    @abstractmethod
    async def sleep(self, ms: int) -> None:
        """Return once ``ms`` milliseconds (>= 0) have passed on the driver's clock.

        May return a little late, never early by more than the clock's own drift. Cancelling the
        awaiting task cancels the timer. Raises ``ValueError`` for a negative ``ms``.
        """

    @abstractmethod
    async def run_sync(self, run: Callable[[Any], Any], execution: Any) -> Any:
        """Call a sync job with its ``execution`` and return or raise what it did.

        The call sees the caller's ``contextvars`` (the execution scope), and other jobs keep
        running meanwhile unless the implementation says otherwise.
        """


class SystemJobTimers(JobTimers):
    """Real time on the loop's timers; sync jobs in a worker thread of the default executor."""

    async def sleep(self, ms: int) -> None:
        if ms < 0:
            raise ValueError(f"a timer waits a positive number of ms, not {ms}")
        await asyncio.sleep(ms / 1000)

    async def run_sync(self, run: Callable[[Any], Any], execution: Any) -> Any:
        return await asyncio.to_thread(run, execution)
