"""A worker that stops gives each run in progress its grace, then aborts it: ``JOB_ABORTED``.

Celery's warm shutdown (SIGTERM) waits for the tasks in progress without limit, while a
platform kills the process after its own termination grace, and a run killed then has no
outcome. As the seeds' ``stop()`` does, each run of this process gets ``grace_ms``
(``ddd_celery_grace_ms``, 30 s by default) from the shutdown on; past it, its signal is aborted
with a ``JobAbortedError`` and the run is recorded ``failed``, ``JOB_ABORTED``, and ended in the
run state, at once, before the process exits. A job that honours its signal returns then and
the worker exits; one that ignores it goes on behind, unrecorded, as long as Celery waits.

Celery sends ``worker_shutting_down`` in the worker's main process, where the runs of the solo
and threads pools are. The children of a prefork pool are not told of a warm shutdown, so the
main process tells each of them with ``SIGUSR2`` (``GRACE_SIGNAL``), which starts the grace of
the runs there; Celery uses that signal in neither process. Billiard, once a child's
initialiser has run, points every signal it finds handled at its own exit handler, so a child
ignores ``SIGUSR2`` until its first task and takes it only then: a child that handled it from
``worker_process_init`` on died of it while idle, and one holding the pool's queue lock as it
died left the main process waiting for that lock for ever.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Any, Protocol

from celery.signals import task_prerun, worker_init, worker_process_init, worker_shutting_down

GRACE_SIGNAL = signal.SIGUSR2
"""What the main process of a prefork worker sends its children as it stops."""


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
        self._mutex = threading.RLock()
        """Reentrant: in a prefork child, ``stop`` runs in a signal handler of the thread that
        may be inside ``add`` or ``discard``."""

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
"""The runs of scheduled jobs and the attempts of background jobs in this process."""


_workers: list[Any] = []
"""The worker of this process (``worker_init``), whose pool lists the prefork children."""


def on_worker_init(sender: Any = None, **_: Any) -> None:
    """Keep the worker, and ignore ``GRACE_SIGNAL`` in its main process: a prefork child
    inherits that from the fork, so a stop sent before the child's own set-up ran
    (``on_worker_process_init``) does not kill it (``exited with 'signal 12'``)."""
    _workers[:] = [sender]
    with contextlib.suppress(ValueError):  # not the main thread: no child forks from there
        signal.signal(GRACE_SIGNAL, signal.SIG_IGN)


def on_worker_shutting_down(**_: Any) -> None:
    """Celery's ``worker_shutting_down``: start the grace of every run of this process, and of
    the pool's children (prefork)."""
    RUNS.stop()
    for pid in _pool_processes():
        with contextlib.suppress(OSError):  # a child that just ended
            os.kill(pid, GRACE_SIGNAL)


def _pool_processes() -> list[int]:
    """The pids of a prefork pool's children (Celery's ``pool.info``); none on other pools."""
    pool = getattr(_workers[0], "pool", None) if _workers else None
    try:
        processes = pool.info.get("processes", []) if pool is not None else []
    except Exception:  # a pool that cannot tell: its runs are in this process
        return []
    return [pid for pid in processes if isinstance(pid, int) and pid != os.getpid()]


_in_child: list[bool] = []
"""True in a prefork child, whose first task takes ``GRACE_SIGNAL``."""


def on_worker_process_init(**_: Any) -> None:
    """In a prefork child: ignore ``GRACE_SIGNAL`` until a task runs, so billiard keeps it."""
    signal.signal(GRACE_SIGNAL, signal.SIG_IGN)
    _in_child[:] = [True]


def _start_grace(signum: int, frame: object) -> None:
    RUNS.stop()


def on_task_prerun(**_: Any) -> None:
    """In a prefork child (main thread): ``GRACE_SIGNAL`` from the main process starts the grace.

    A solo pool sends ``worker_process_init`` as well, in the worker's own process, and the
    worker of ``celery.contrib.testing`` runs its tasks on a thread, where no handler can be set
    (Celery would log each task's ``ValueError``): there ``worker_shutting_down`` reaches the
    runs itself."""
    if (
        _in_child
        and threading.current_thread() is threading.main_thread()
        and signal.getsignal(GRACE_SIGNAL) is not _start_grace
    ):
        signal.signal(GRACE_SIGNAL, _start_grace)


_UID = "ddd_celery.celery.shutdown"
worker_init.connect(on_worker_init, weak=False, dispatch_uid=_UID)
worker_shutting_down.connect(on_worker_shutting_down, weak=False, dispatch_uid=_UID)
worker_process_init.connect(on_worker_process_init, weak=False, dispatch_uid=_UID)
task_prerun.connect(on_task_prerun, weak=False, dispatch_uid=_UID)
