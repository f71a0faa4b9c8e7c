"""The error of a declaration that cannot be accepted."""

from __future__ import annotations

from ddd_celery.kernel.errors import DddCeleryError


class DeclarationError(DddCeleryError, ValueError):
    """A job declared or configured wrongly; the message names the job and what is wrong.

    Raised when the module that declares the job is imported, so a bad job never deploys.
    """

    def __init__(self, problem: str, *, job: str | None = None) -> None:
        super().__init__(f"job {job!r}: {problem}" if job else problem)
        self.job = job
        self.problem = problem
