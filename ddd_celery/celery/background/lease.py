"""Keeping an attempt's lease while the job runs: a heartbeat thread beside the task.

The lease is what lets the relay hand back the job of a worker that died: it is kept short
(``lease_ms``, 30 s by default) and extended by each beat. A beat that finds the lease gone (the
job was cancelled, or the lease expired and the job was claimed again) aborts the attempt's
signal with ``JobInterruptedError`` and stops, which is how a cancel reaches the worker that
runs the job: beats come every ``heartbeat_ms`` (a second by default), so the signal is aborted
within about that.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType

from ddd_celery.background.attempt import renew_lease
from ddd_celery.background.store import JobLease, JobStore
from ddd_celery.kernel.abort import AbortController
from ddd_celery.kernel.clock import Clock


class LeaseKeeper:
    """Extends ``lease`` every ``every_ms`` from a daemon thread, between ``with`` and its end.

    Once the store says the lease is lost, ``controller`` is aborted (``renew_lease``) and the
    thread stops. ``on_error`` is told of any other failure (the store cannot be asked): the
    thread goes on, and the lease may yet expire, in which case the relay hands the job back.
    """

    def __init__(
        self,
        store: JobStore,
        clock: Clock,
        lease: JobLease,
        *,
        job: str,
        lease_ms: int,
        every_ms: int,
        controller: AbortController,
        on_error: Callable[[Exception], None],
    ) -> None:
        self._store = store
        self._clock = clock
        self._lease = lease
        self._job = job
        self._lease_ms = lease_ms
        self._every_s = every_ms / 1000
        self._controller = controller
        self._on_error = on_error
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, name=f"lease-{lease.job_id}", daemon=True
        )

    @property
    def lease(self) -> JobLease:
        """The lease as last extended: the one the attempt's conclusion names."""
        return self._lease

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stopped.set()
        self._thread.join()

    def _beat(self) -> None:
        while not self._stopped.wait(self._every_s):
            try:
                renewed = renew_lease(
                    self._store,
                    self._lease,
                    now=self._clock.now(),
                    lease_ms=self._lease_ms,
                    controller=self._controller,
                    job=self._job,
                )
            except Exception as error:
                self._on_error(error)
                continue
            if renewed is None:
                return
            self._lease = renewed
