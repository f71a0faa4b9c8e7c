"""Cooperative cancellation: nothing can stop a running job, so it is asked to stop."""

from __future__ import annotations

import asyncio
import threading


class AbortSignal:
    """Read by the job; aborted by the scheduler on timeout or stop. Safe across threads."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._reason: BaseException | None = None

    @property
    def aborted(self) -> bool:
        return self._event.is_set()

    @property
    def reason(self) -> BaseException | None:
        """What aborted the run (a ``JobTimeoutError``, a ``JobAbortedError``), or None."""
        return self._reason

    def throw_if_aborted(self) -> None:
        """Raise the reason once aborted: a long job calls it between two steps."""
        if self._event.is_set() and self._reason is not None:
            raise self._reason

    def wait(self, timeout: float | None = None) -> bool:
        """Block a sync job until aborted or ``timeout`` seconds; True when aborted."""
        return self._event.wait(timeout)


class AbortController:
    """The side that aborts: kept by the driver, its ``signal`` given to the job."""

    def __init__(self) -> None:
        self.signal = AbortSignal()
        self._once = threading.Lock()

    def abort(self, reason: BaseException) -> bool:
        """Abort with ``reason``; the first reason wins. True when this call aborted it.

        Taking a lock without blocking is one atomic step, so two threads aborting at once
        cannot both win (a check of the event, then a set, could interleave).
        """
        if not self._once.acquire(blocking=False):
            return False
        self.signal._reason = reason
        self.signal._event.set()
        return True


def settle(
    settled: asyncio.Future[BaseException | None],
    controller: AbortController,
    reason: BaseException | None,
) -> None:
    """Stop a driver's wait for a run, once: None when it ended by itself, else why it stopped.

    ``reason`` aborts the run's signal; the first reason wins, for the signal and the waiter
    alike, so what a run record keeps is what the job was told, even when the signal was
    aborted before this call.
    """
    if settled.done():
        return
    if reason is not None:
        controller.abort(reason)
        reason = controller.signal.reason or reason
    settled.set_result(reason)
