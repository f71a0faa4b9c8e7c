"""The errors of scheduling, each with the stable ``code`` recorded on a failed run.

The roots, the timeout and the abort live in the kernel, shared with background jobs; they are
importable from here as before.
"""

from __future__ import annotations

from ddd_celery.declarations.errors import DeclarationError
from ddd_celery.kernel.errors import (
    JOB_ABORTED,
    JOB_TIMEOUT,
    UNEXPECTED_ERROR,
    UNKNOWN_JOB,
    JobAbortedError,
    JobError,
    JobStoppedError,
    JobTimeoutError,
)

JOB_LOCK_UNAVAILABLE = "JOB_LOCK_UNAVAILABLE"
INVALID_JOB_SETTINGS = "INVALID_JOB_SETTINGS"

SchedulingError = JobError
"""The former name of ``JobError``, the root of the errors about a job."""


class JobLockUnavailableError(JobError, ConnectionError):
    """The lock store could not be asked, so the occurrence was not run anywhere."""

    code = JOB_LOCK_UNAVAILABLE


class UnknownJobError(JobError, LookupError):
    """A name no registered job has: settings for it, or ``run_now`` of it."""

    code = UNKNOWN_JOB


class InvalidJobSettingsError(DeclarationError):
    """Settings of a job that cannot be read; refused before anything starts."""

    code = INVALID_JOB_SETTINGS


class InvalidJobScheduleError(DeclarationError):
    """A job that cannot be registered as given (a per-tenant job without a tenant directory)."""


__all__ = [
    "INVALID_JOB_SETTINGS",
    "JOB_ABORTED",
    "JOB_LOCK_UNAVAILABLE",
    "JOB_TIMEOUT",
    "UNEXPECTED_ERROR",
    "UNKNOWN_JOB",
    "InvalidJobScheduleError",
    "InvalidJobSettingsError",
    "JobAbortedError",
    "JobError",
    "JobLockUnavailableError",
    "JobStoppedError",
    "JobTimeoutError",
    "SchedulingError",
    "UnknownJobError",
]
