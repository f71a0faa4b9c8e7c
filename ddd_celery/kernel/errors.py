"""The roots of the errors the library raises, and the errors scheduled and background jobs share.

One tree, so a caller catches by what went wrong (docs/design.md, "The error tree"):
``DddCeleryError`` is the library's root; ``StoreUnavailableError`` (a ``ConnectionError``) is
raised by every store that cannot be asked; ``JobError`` carries the ``code`` a run record
keeps, and ``JobStoppedError`` gathers the runs stopped before they returned (timed out,
aborted, interrupted). ``DomainError`` is the application's own refusal, apart from the tree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

JOB_TIMEOUT = "JOB_TIMEOUT"
JOB_ABORTED = "JOB_ABORTED"
UNEXPECTED_ERROR = "UNEXPECTED_ERROR"
UNKNOWN_JOB = "UNKNOWN_JOB"


class DomainError(Exception):
    """A refusal of the model, with a stable ``code``: expected, never sent to error reporters.

    Raised by the application's code, so it is not a ``DddCeleryError``: catching the library's
    errors never swallows the model's refusals.
    """

    def __init__(self, code: str, message: str, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details: Mapping[str, Any] = dict(details or {})

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


class DddCeleryError(Exception):
    """The root of every error the library raises on purpose."""


class StoreUnavailableError(DddCeleryError, ConnectionError):
    """A store could not be asked, so what it holds is unknown; ``__cause__`` says why.

    Raised by every store (Redis and SQL alike; the lock's ``LockUnavailableError`` is one). A
    ``ConnectionError``, so ``except ConnectionError`` keeps catching it.
    """


class JobError(DddCeleryError):
    """The root of the errors about a job; ``code`` is what a run record and a log keep.

    ``SchedulingError`` is this class under its former name.
    """

    code = UNEXPECTED_ERROR

    def __init__(self, message: str, *, job: str | None = None) -> None:
        super().__init__(message)
        self.job = job


class JobStoppedError(JobError):
    """The run was stopped before it returned: it timed out, was aborted or was interrupted."""


class JobTimeoutError(JobStoppedError, TimeoutError):
    """The run outlived ``timeout_ms``: its signal is aborted and the scheduler stops waiting."""

    code = JOB_TIMEOUT


class JobAbortedError(JobStoppedError):
    """The scheduler or worker stopped while the run was in progress and its grace ran out."""

    code = JOB_ABORTED


def error_code_of(error: BaseException) -> str:
    """The code a run record keeps: the domain's, the job's, or ``UNEXPECTED_ERROR``.

    Never the message: it quotes data.
    """
    if isinstance(error, DomainError | JobError):
        return error.code
    return UNEXPECTED_ERROR
