"""Keeping the leases of the attempts in progress: one heartbeat thread per worker process.

The lease is what lets the relay hand back the job of a worker that died: it is kept short
(``lease_ms``, 30 s by default) and extended by each beat. A beat that finds a lease gone (the
job was cancelled, or the lease expired and the job was claimed again) aborts that attempt's
signal with ``JobInterruptedError``, which is how a cancel reaches the worker that runs the job:
beats come every ``heartbeat_ms`` (a second by default), so the signal is aborted within about
that.

One thread serves every attempt of the process, started at the first and again in a process
forked since (a prefork pool's child): a thread per attempt would cost more than a no-op job.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from types import TracebackType

from ddd_celery.background.attempt import renew_lease
from ddd_celery.background.store import JobLease, JobStore
from ddd_celery.kernel.abort import AbortController
from ddd_celery.kernel.clock import Clock

_NEW_PROCESS = threading.Lock()
"""Held while a process's first attempt sets its heartbeats up: threads may start at once."""

OnError = Callable[[str, str, Exception], None]
"""Told ``(job, job_id, error)`` of a beat the store could not answer."""


class KeptLease:
    """One attempt's lease while it runs, between ``with`` and its end.

    ``lease`` is the lease as last extended; once the block ends no beat extends it any more
    (a beat in flight is waited for), so the attempt's conclusion names the latest one.
    """

    def __init__(
        self, heartbeats: Heartbeats, lease: JobLease, job: str, controller: AbortController
    ) -> None:
        self.lease = lease
        self.job = job
        self.controller = controller
        self.mutex = threading.Lock()
        self.ended = False
        self._heartbeats = heartbeats

    def __enter__(self) -> KeptLease:
        self._heartbeats.add(self)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        with self.mutex:
            self.ended = True
        self._heartbeats.remove(self)


class Heartbeats:
    """Extends every kept lease each ``every_ms``, from one daemon thread of this process.

    A lease the store says is lost aborts its attempt (``renew_lease``) and is beaten no more;
    any other failure (the store cannot be asked) goes to ``on_error`` and the next beat tries
    again: the lease may yet expire, and the relay then hands the job back.
    """

    def __init__(
        self, store: JobStore, clock: Clock, *, lease_ms: int, every_ms: int, on_error: OnError
    ) -> None:
        self._store = store
        self._clock = clock
        self._lease_ms = lease_ms
        self._every_s = every_ms / 1000
        self._on_error = on_error
        self._pid = -1
        self._kept: set[KeptLease] = set()
        self._mutex = threading.Lock()
        self._thread: threading.Thread | None = None

    def keep(self, lease: JobLease, *, job: str, controller: AbortController) -> KeptLease:
        return KeptLease(self, lease, job, controller)

    def add(self, kept: KeptLease) -> None:
        if self._pid != os.getpid():  # a new process (forked): its own set and thread
            with _NEW_PROCESS:
                if self._pid != os.getpid():
                    self._kept, self._mutex, self._thread = set(), threading.Lock(), None
                    self._pid = os.getpid()  # last: a thread seeing it finds the rest ready
        with self._mutex:
            self._kept.add(kept)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._beat, name="ddd-celery-heartbeats", daemon=True
                )
                self._thread.start()

    def abort_all(self, reason: Callable[[str], BaseException]) -> int:
        """Abort the signal of every attempt this process runs with ``reason(job)``; how many.

        For a worker that stops: its attempts end ``released``, their jobs given back uncounted.
        """
        if self._pid != os.getpid():
            return 0
        with self._mutex:
            kept = list(self._kept)
        for one in kept:
            one.controller.abort(reason(one.job))
        return len(kept)

    def remove(self, kept: KeptLease) -> None:
        with self._mutex:
            self._kept.discard(kept)

    def _beat(self) -> None:
        pause = threading.Event()
        while True:
            pause.wait(self._every_s)
            with self._mutex:
                kept = list(self._kept)
            for one in kept:
                self._extend(one)

    def _extend(self, kept: KeptLease) -> None:
        with kept.mutex:
            if kept.ended:
                return
            try:
                renewed = renew_lease(
                    self._store,
                    kept.lease,
                    now=self._clock.now(),
                    lease_ms=self._lease_ms,
                    controller=kept.controller,
                    job=kept.job,
                )
            except Exception as error:
                self._on_error(kept.job, kept.lease.job_id, error)
                return
            if renewed is None:
                kept.ended = True
                self.remove(kept)
                return
            kept.lease = renewed
