"""A worker that stops gives each run in progress its grace, then aborts it: ``JOB_ABORTED``.

Celery's warm shutdown (SIGTERM) waits for the tasks in progress without limit, while a
platform kills the process after its own termination grace, and a run killed then has no
outcome. As the seeds' ``stop()`` does, each run of this process gets ``grace_ms``
(``ddd_celery_grace_ms``, 30 s by default) from the shutdown on; past it, its signal is aborted
with a ``JobAbortedError`` and the run is recorded ``failed``, ``JOB_ABORTED``, and ended in the
run state, at once, before the process exits. A job that honours its signal returns then and
the worker exits; one that ignores it goes on behind, unrecorded, as long as Celery waits.

Celery sends ``worker_shutting_down`` in the worker's main process, where the runs of the solo
and threads pools (and gevent's, eventlet's) are; the children of a prefork pool are not told.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from celery.signals import worker_shutting_down


class Abortable(Protocol):
    """A run in progress that a stopping worker can abort."""

    @property
    def grace_ms(self) -> int: ...

    def abort_for_stop(self) -> None:
        """Abort the run's signal with a ``JobAbortedError`` and record it ``JOB_ABORTED``."""


class RunsInProgress:
    """The runs of this process, and once it stops, the timer that ends each one's grace."""

    def __init__(self) -> None:
        self._runs: set[Abortable] = set()
        self._timers: dict[Abortable, threading.Timer] = {}
        self._stopping = False
        self._mutex = threading.Lock()

    def add(self, run: Abortable) -> None:
        """Follow ``run``; one that starts once the worker stops gets its grace from now."""
        with self._mutex:
            self._runs.add(run)
            if self._stopping:
                self._arm(run)

    def discard(self, run: Abortable) -> None:
        with self._mutex:
            self._runs.discard(run)
            timer = self._timers.pop(run, None)
        if timer is not None:
            timer.cancel()

    def stop(self) -> None:
        """The worker stops: each run in progress is aborted once its grace has passed."""
        with self._mutex:
            self._stopping = True
            for run in self._runs:
                self._arm(run)

    def _arm(self, run: Abortable) -> None:
        if run in self._timers:
            return
        timer = threading.Timer(run.grace_ms / 1000, run.abort_for_stop)
        timer.daemon = True
        self._timers[run] = timer
        timer.start()


RUNS = RunsInProgress()
"""The runs of scheduled jobs in this process."""


def on_worker_shutting_down(**_: Any) -> None:
    """Celery's ``worker_shutting_down``: start the grace of every run of this process."""
    RUNS.stop()


worker_shutting_down.connect(
    on_worker_shutting_down, weak=False, dispatch_uid="ddd_celery.celery.shutdown"
)
