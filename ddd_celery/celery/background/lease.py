"""Keeping the leases of the attempts in progress: one heartbeat thread per worker process.

The lease is what lets the relay hand back the job of a worker that died: it is kept short
(``lease_ms``, 30 s by default) and extended by each beat. A beat that finds a lease gone (the
job was cancelled, or the lease expired and the job was claimed again) aborts that attempt's
signal with ``JobInterruptedError``, which is how a cancel reaches the worker that runs the job:
beats come every ``heartbeat_ms`` (a second by default), so the signal is aborted within about
that. An attempt none of whose beats reached the store for ``lease_ms`` (the store is cut off or
hung) aborts its signal by itself, with ``JobInterruptedError`` too: its lease has expired in
the store, and the relay may hand the job to another worker at any moment. That time is
measured on this process's monotonic clock, from the sending of the claim or of the last beat
that was answered, so the two attempts overlap by at most one beat whatever the clocks say.

One thread serves every attempt of the process, started at the first and again in a process
forked since (a prefork pool's child): a thread per attempt would cost more than a no-op job.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from types import TracebackType

from ddd_celery.background.attempt import lease_outlived, renew_lease
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
    ``renewed_at`` is when the claim or the last answered beat was sent (``time.monotonic``).
    """

    def __init__(
        self,
        heartbeats: Heartbeats,
        lease: JobLease,
        job: str,
        controller: AbortController,
        renewed_at: float,
    ) -> None:
        self.lease = lease
        self.job = job
        self.controller = controller
        self.renewed_at = renewed_at
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
    again, until ``lease_ms`` has passed since the last answered one: the attempt then aborts
    itself (``lease_outlived``) and is beaten no more.
    """

    def __init__(
        self,
        store: JobStore,
        clock: Clock,
        *,
        lease_ms: int,
        every_ms: int,
        on_error: OnError,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._clock = clock
        self._lease_ms = lease_ms
        self._lease_s = lease_ms / 1000
        self._every_s = every_ms / 1000
        self._on_error = on_error
        self._monotonic = monotonic
        self._pid = -1
        self._kept: set[KeptLease] = set()
        self._mutex = threading.Lock()
        self._thread: threading.Thread | None = None

    def keep(
        self,
        lease: JobLease,
        *,
        job: str,
        controller: AbortController,
        claimed_at: float | None = None,
    ) -> KeptLease:
        """The lease to keep while a ``with`` block runs the attempt; ``claimed_at``: when the
        claim that answered ``lease`` was sent (``time.monotonic``; now when None)."""
        sent = self._monotonic() if claimed_at is None else claimed_at
        return KeptLease(self, lease, job, controller, sent)

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

    def remove(self, kept: KeptLease) -> None:
        with self._mutex:
            self._kept.discard(kept)

    def _beat(self) -> None:
        pause = threading.Event()
        while True:
            pause.wait(self._pause_s())
            with self._mutex:
                kept = list(self._kept)
            for one in kept:
                self._extend(one)

    def _pause_s(self) -> float:
        """A beat's period, shorter when a lease not renewed since would run out before it."""
        with self._mutex:
            oldest = min((one.renewed_at for one in self._kept), default=None)
        if oldest is None:
            return self._every_s
        left = oldest + self._lease_s - self._monotonic()
        return max(0.0, min(self._every_s, left))

    def _extend(self, kept: KeptLease) -> None:
        with kept.mutex:
            if kept.ended:
                return
            if self._outlived(kept):
                return
            sent = self._monotonic()
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
                self._outlived(kept)
                return
            if renewed is None:
                self._end(kept)
                return
            kept.lease, kept.renewed_at = renewed, sent

    def _outlived(self, kept: KeptLease) -> bool:
        """Abort the attempt whose lease ran out unrenewed; True when it did (or had)."""
        if self._monotonic() < kept.renewed_at + self._lease_s:
            return False
        kept.controller.abort(lease_outlived(kept.job, kept.lease, self._lease_ms))
        self._end(kept)
        return True

    def _end(self, kept: KeptLease) -> None:
        kept.ended = True
        self.remove(kept)
