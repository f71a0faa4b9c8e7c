"""The system jobs beat runs itself (the relay of background jobs), each on a thread of its own.

A system job has no task: its occurrence is locked like any job's, then its pass runs in beat.
Never on the tick's path, since its store may hang: beat's tick hands the pass over and never
waits for it, so a store that hangs under the pass holds that job's thread only, never the
occurrences of the other jobs. The lines are beat's, on the ``ddd_celery.celery.beat`` logger.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from datetime import datetime

from ddd_celery.celery.beat_outages import one_line
from ddd_celery.celery.registry import CeleryJob, CeleryJobs
from ddd_celery.kernel.abort import AbortSignal
from ddd_celery.kernel.instants import iso_ms
from ddd_celery.scheduling.execution import Attempt, ran
from ddd_celery.scheduling.occurrence import Event, Occurrence
from ddd_celery.scheduling.run_state import Claim

logger = logging.getLogger("ddd_celery.celery.beat")


class SystemJobs:
    """The passes of each system job, handed over by beat's tick and recorded on their thread."""

    def __init__(self) -> None:
        self._passes: dict[str, _Passes] = {}

    def claim(self, job: CeleryJob, at: datetime) -> Claim:
        """A system job runs one pass at a time: busy while its previous pass is in progress;
        any other undeclared job (a ``beat_schedule`` entry) is not claimed."""
        if job.inline is None:
            return Claim.STARTED
        passes = self._passes.get(job.name)
        if passes is None or passes.in_progress() is None:
            return Claim.STARTED
        passes.skip(at)
        return Claim.BUSY

    def hand_over(
        self,
        jobs: CeleryJobs,
        job: CeleryJob,
        run: Callable[[datetime], object],
        occurrence: Occurrence,
    ) -> None:
        """Start a pass of a system job on its thread, recorded there once it ends."""
        passes = self._passes.get(job.name)
        if passes is None:
            passes = self._passes[job.name] = _Passes(job.name)
        correlation_id = jobs.ids.next_id()
        passes.hand_over(
            occurrence.scheduled_at,
            lambda: _run_pass(jobs, passes, job, run, occurrence, correlation_id=correlation_id),
        )

    def stop(self) -> None:
        """End each job's thread once its pass in progress, if any, is over."""
        for passes in self._passes.values():
            passes.stop()

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every pass in progress; whether none is left."""
        deadline = time.monotonic() + timeout
        return all(
            passes.wait(max(0.0, deadline - time.monotonic())) for passes in self._passes.values()
        )


def _run_pass(
    jobs: CeleryJobs,
    passes: _Passes,
    job: CeleryJob,
    run: Callable[[datetime], object],
    occurrence: Occurrence,
    *,
    correlation_id: str,
) -> None:
    """Run a system job in beat (the relay, on its thread) and record its outcome as a
    worker would: a pass that raises is ``failed`` with its error.

    Its lock was taken like any job's, so one beat runs each occurrence.
    """
    at = occurrence.scheduled_at
    started_at = jobs.clock.now()
    error: Exception | None = None
    quiet = False
    try:
        quiet = run(at) is False  # the job logged what it did: its success line is DEBUG
    except Exception as raised:
        error = raised
    passes.ended(at, error)
    occurrence.move(Event.FAILED if error is not None else Event.SUCCEEDED)
    attempt = Attempt(
        job=job.name,
        scheduled_at=at,
        started_at=started_at,
        correlation_id=correlation_id,
        signal=AbortSignal(),
        deadline=None,
        tenants=(),
    )
    jobs.recorder.record(ran(attempt, jobs.clock.now(), error, None), error, quiet=quiet)


class _Passes:
    """A system job's passes (the relay's), one at a time, on a thread of beat's own.

    An occurrence of the job due while its previous pass is still in progress is
    ``skipped-overlap``, as with ``overlap=skip``: the first of a pass says so at WARNING, and
    so does the pass when it ends.
    """

    def __init__(self, job: str) -> None:
        self._job = job
        self._work: queue.SimpleQueue[tuple[datetime, Callable[[], None]] | None] = (
            queue.SimpleQueue()
        )
        self._idle = threading.Event()
        self._idle.set()
        self._mutex = threading.Lock()
        self._at: datetime | None = None
        self._skipped = 0
        self._thread: threading.Thread | None = None
        self._failed = 0
        self._failing: tuple[datetime, str] | None = None
        """Since when the passes fail, and the type of the last error: the pass thread's own."""

    def in_progress(self) -> datetime | None:
        """The instant of the pass still in progress, else None."""
        return None if self._idle.is_set() else self._at

    def skip(self, at: datetime) -> None:
        """Count the occurrence ``at`` skipped behind the pass in progress."""
        with self._mutex:
            self._skipped += 1
            first = self._skipped == 1
        if first:
            logger.warning(
                "beat: the pass of %s due at %s is still running at %s; its occurrences are "
                "skipped until it ends",
                self._job,
                iso_ms(self._at or at),
                iso_ms(at),
                extra={"job": self._job, "pass_at": iso_ms(self._at or at)},
            )

    def hand_over(self, at: datetime, run: Callable[[], None]) -> None:
        """Run ``run`` on the thread; the caller checked ``in_progress`` first."""
        with self._mutex:
            self._at, self._skipped = at, 0
        self._idle.clear()
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._loop, name=f"beat {self._job}", daemon=True
            )
            self._thread.start()
        self._work.put((at, run))

    def ended(self, at: datetime, error: Exception | None) -> None:
        """Say at ERROR why a pass failed, once per run of failures (again when the error
        changes): each is recorded ``failed`` anyway; and at WARNING when one succeeds again."""
        if error is None:
            if self._failing is not None:
                logger.warning(
                    "beat: the pass of %s due at %s succeeded; %d passes failed since %s",
                    self._job,
                    iso_ms(at),
                    self._failed,
                    iso_ms(self._failing[0]),
                    extra={"job": self._job, "failed": self._failed},
                )
            self._failed, self._failing = 0, None
            return
        self._failed += 1
        kind = type(error).__name__
        if self._failing is None or self._failing[1] != kind:
            logger.error(
                "beat: the pass of %s due at %s failed: %s; the next that fail the same way are "
                "recorded failed without this line, until one succeeds",
                self._job,
                iso_ms(at),
                one_line(error),
                extra={"job": self._job, "error_type": kind},
            )
        self._failing = (self._failing[0] if self._failing else at, kind)

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the pass in progress; whether none is left."""
        return self._idle.wait(timeout)

    def stop(self) -> None:
        """End the thread once the pass in progress, if any, is over."""
        if self._thread is not None:
            self._work.put(None)

    def _loop(self) -> None:
        while (work := self._work.get()) is not None:
            at, run = work
            started = time.monotonic()
            try:
                run()
            finally:
                with self._mutex:
                    skipped = self._skipped
                self._idle.set()
            if skipped:
                logger.warning(
                    "beat: the pass of %s due at %s ended after %d ms; %d occurrences were "
                    "skipped behind it",
                    self._job,
                    iso_ms(at),
                    (time.monotonic() - started) * 1000,
                    skipped,
                    extra={"job": self._job, "skipped": skipped},
                )
