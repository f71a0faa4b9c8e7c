"""One timer thread per process for every run's deadline, instead of a thread per run.

A ``threading.Timer`` per run costs a thread start and stop per message, which a worker running
hundreds of short jobs a second pays on each. The watchdog keeps the deadlines in a heap and one
daemon thread that sleeps until the soonest; a run that ends first cancels its watch, which
costs a flag. After a fork (a prefork child) the parent's thread does not exist: the first watch
in the child starts the child's own.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

COMPACT_AT = 1_024
"""Cancelled watches kept before the heap is rebuilt without them: runs that end long before
their deadline (the usual case) would otherwise pile up until their deadlines pass."""


@dataclass(order=True, slots=True)
class Watch:
    """One deadline on the watchdog; ``Watchdog.cancel`` before it passes and nothing is called."""

    due: float
    seq: int
    action: Callable[[], object] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)


class Watchdog:
    """Calls each action at its deadline on one daemon thread, started at the first watch.

    An action runs on the watchdog's thread, one after the other: it must be short (a run's
    deadline records the timeout and ends the run), and one that raises is dropped without
    stopping the others.
    """

    def __init__(self) -> None:
        self._heap: list[Watch] = []
        self._seq = itertools.count()
        self._wake = threading.Condition()
        self._pid: int | None = None
        self._cancelled = 0

    def watch(self, delay_s: float, action: Callable[[], object]) -> Watch:
        """Call ``action`` in ``delay_s`` seconds (at once when not positive), unless cancelled."""
        entry = Watch(time.monotonic() + max(0.0, delay_s), next(self._seq), action)
        with self._wake:
            if self._pid != os.getpid():
                self._start()
            heapq.heappush(self._heap, entry)
            if self._heap[0] is entry:
                self._wake.notify()
        return entry

    def cancel(self, entry: Watch) -> None:
        """Forget ``entry``: its action is not called (unless it is being called already)."""
        with self._wake:
            if entry.cancelled:
                return
            entry.cancelled = True
            self._cancelled += 1
            if self._cancelled >= COMPACT_AT and self._cancelled * 2 > len(self._heap):
                self._heap = [kept for kept in self._heap if not kept.cancelled]
                heapq.heapify(self._heap)
                self._cancelled = 0

    def _start(self) -> None:
        """A thread for this process; inherited entries belong to the parent's runs."""
        self._heap = []
        self._cancelled = 0
        self._pid = os.getpid()
        threading.Thread(target=self._loop, name="ddd_celery-watchdog", daemon=True).start()

    def _loop(self) -> None:
        pid = os.getpid()
        while True:
            with self._wake:
                if self._pid != pid:
                    return
                while self._heap and self._heap[0].cancelled:
                    heapq.heappop(self._heap)
                    self._cancelled = max(0, self._cancelled - 1)
                if not self._heap:
                    self._wake.wait()
                    continue
                left = self._heap[0].due - time.monotonic()
                if left > 0:
                    self._wake.wait(left)
                    continue
                entry = heapq.heappop(self._heap)
            try:
                entry.action()
            except Exception:  # an action records its own failures; the others still run
                logger.exception("ddd_celery: a deadline's action failed")


WATCHDOG = Watchdog()
"""The process's watchdog, shared by every run of a worker."""
