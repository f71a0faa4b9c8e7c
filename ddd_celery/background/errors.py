"""The errors of background jobs, each with the stable ``code`` a run record and a log keep.

They join the scheduling error tree (``SchedulingError``), so ``error_code_of`` reads their code
like a timeout's; ``JobTimeoutError`` and ``JobAbortedError`` are shared with scheduled jobs.
"""

from __future__ import annotations

from ddd_celery.scheduling.errors import UNKNOWN_JOB, SchedulingError

INVALID_ENQUEUE = "INVALID_ENQUEUE"
ATTEMPTS_EXHAUSTED = "ATTEMPTS_EXHAUSTED"
JOB_INTERRUPTED = "JOB_INTERRUPTED"


class InvalidEnqueueError(SchedulingError, ValueError):
    """A job that cannot be enqueued as asked: a payload its type refuses or JSON cannot carry,
    or a ``delay_ms``/``run_at`` out of its values.

    The message names the job and the field (``field``), never the value: it may quote data.
    """

    code = INVALID_ENQUEUE

    def __init__(self, message: str, *, job: str | None = None, field: str | None = None) -> None:
        super().__init__(f"job {job!r}: {message}" if job else message, job=job)
        self.field = field


class UnknownBackgroundJobError(SchedulingError, LookupError):
    """A class that is not declared with ``@background``, or a name no declared job has."""

    code = UNKNOWN_JOB


class AttemptsExhaustedError(SchedulingError):
    """A job's last attempt failed: it is dead. Its ``__cause__`` is what the last one raised."""

    code = ATTEMPTS_EXHAUSTED


class JobInterruptedError(SchedulingError):
    """The attempt lost its lease (cancelled, or expired and claimed again) while it ran."""

    code = JOB_INTERRUPTED
