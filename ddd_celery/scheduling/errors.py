"""The errors of scheduling, each with the stable ``code`` recorded on a failed run."""

from __future__ import annotations

from ddd_celery.declarations.errors import DeclarationError

JOB_TIMEOUT = "JOB_TIMEOUT"
JOB_ABORTED = "JOB_ABORTED"
JOB_LOCK_UNAVAILABLE = "JOB_LOCK_UNAVAILABLE"
UNEXPECTED_ERROR = "UNEXPECTED_ERROR"
UNKNOWN_JOB = "UNKNOWN_JOB"
INVALID_JOB_SETTINGS = "INVALID_JOB_SETTINGS"


class SchedulingError(Exception):
    """Root of the errors a scheduler raises; ``code`` is what a run record keeps."""

    code = UNEXPECTED_ERROR

    def __init__(self, message: str, *, job: str | None = None) -> None:
        super().__init__(message)
        self.job = job


class JobTimeoutError(SchedulingError, TimeoutError):
    """The run outlived ``timeout_ms``: its signal is aborted and the scheduler stops waiting."""

    code = JOB_TIMEOUT


class JobAbortedError(SchedulingError):
    """The scheduler stopped while the run was in progress and its grace period ran out."""

    code = JOB_ABORTED


class JobLockUnavailableError(SchedulingError, ConnectionError):
    """The lock store could not be asked, so the occurrence was not run anywhere."""

    code = JOB_LOCK_UNAVAILABLE


class UnknownJobError(SchedulingError, LookupError):
    """A name no registered job has: settings for it, or ``run_now`` of it."""

    code = UNKNOWN_JOB


class InvalidJobSettingsError(DeclarationError):
    """Settings of a job that cannot be read; refused before anything starts."""

    code = INVALID_JOB_SETTINGS


class InvalidJobScheduleError(DeclarationError):
    """A job that cannot be registered as given (a per-tenant job without a tenant directory)."""
