"""The errors of background jobs, each with the stable ``code`` a run record and a log keep.

They grow from the kernel's ``JobError``, as scheduled jobs' errors do, so ``error_code_of`` reads
their code like a timeout's; ``JobTimeoutError`` and ``JobAbortedError`` are the kernel's, shared
with scheduled jobs, and ``JobInterruptedError`` joins them under ``JobStoppedError``.
"""

from __future__ import annotations

from ddd_celery.kernel.errors import UNKNOWN_JOB, JobError, JobStoppedError

INVALID_ENQUEUE = "INVALID_ENQUEUE"
ATTEMPTS_EXHAUSTED = "ATTEMPTS_EXHAUSTED"
JOB_INTERRUPTED = "JOB_INTERRUPTED"
JOB_NOT_ADDED = "JOB_NOT_ADDED"


class InvalidEnqueueError(JobError, ValueError):
    """A job that cannot be enqueued as asked: a payload its type refuses, JSON cannot carry
    or a store cannot keep (too large, too deep, a NUL character), a tenant id or idempotency key
    a store cannot keep, or a ``delay_ms``/``run_at`` out of its values.

    The message names the job and the field (``field``, a path without dict keys), never the
    value: it may quote data. A job of ``enqueue_many`` is named by its place in the batch too
    (``index``, from 0); ``reason`` is the message without the job's name.
    """

    code = INVALID_ENQUEUE

    def __init__(
        self,
        message: str,
        *,
        job: str | None = None,
        field: str | None = None,
        index: int | None = None,
    ) -> None:
        named = bool(job) or index is not None
        super().__init__(f"{_named(job, index)}: {message}" if named else message, job=job)
        self.field = field
        self.index = index
        self.reason = message

    def in_batch(self, index: int) -> InvalidEnqueueError:
        """The same refusal, said of the job at ``index`` of a batch."""
        return InvalidEnqueueError(self.reason, job=self.job, field=self.field, index=index)


class UnknownBackgroundJobError(JobError, LookupError):
    """A class that is not declared with ``@background``, or a name no declared job has.

    Of a job of ``enqueue_many``, ``index`` is its place in the batch (from 0).
    """

    code = UNKNOWN_JOB

    def __init__(self, message: str, *, job: str | None = None, index: int | None = None) -> None:
        said = message if index is None else f"job {index} of the batch: {message}"
        super().__init__(said, job=job)
        self.index = index
        self.reason = message

    def in_batch(self, index: int) -> UnknownBackgroundJobError:
        """The same refusal, said of the job at ``index`` of a batch."""
        return UnknownBackgroundJobError(self.reason, job=self.job, index=index)


def _named(job: str | None, index: int | None) -> str:
    """How a refusal names its job: ``job 'x'``, or ``job 3 of the batch ('x')``."""
    if index is None:
        return f"job {job!r}"
    return f"job {index} of the batch" + ("" if job is None else f" ({job!r})")


class AttemptsExhaustedError(JobError):
    """A job's last attempt failed: it is dead. Its ``__cause__`` is what the last one raised."""

    code = ATTEMPTS_EXHAUSTED


class JobInterruptedError(JobStoppedError):
    """The attempt lost its lease (cancelled, or expired and claimed again) while it ran."""

    code = JOB_INTERRUPTED


class JobNotAddedAfterCommitError(JobError, RuntimeError):
    """The unit of work committed, but the store could not add its job after the commit.

    Not a rollback: the work is kept, and its job ``job_id`` is not known to be. A store that
    stopped answering may still add it once it answers (an add with the same id is harmless):
    enqueue it again with the same idempotency key, never by redoing the work. ``__cause__`` is
    the store's last error.
    """

    code = JOB_NOT_ADDED

    def __init__(self, message: str, *, job: str, job_id: str, attempts: int) -> None:
        super().__init__(f"job {job!r}: {message}", job=job)
        self.job_id = job_id
        self.attempts = attempts
