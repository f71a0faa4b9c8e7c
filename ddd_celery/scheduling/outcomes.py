"""What became of an occurrence: its outcome and the record kept of it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from ddd_celery.declarations.names import context_of
from ddd_celery.kernel.errors import error_code_of


class Outcome(StrEnum):
    """Every occurrence handled has exactly one of these, equal to the seeds' strings."""

    SUCCEEDED = "succeeded"
    """The job ran and returned."""
    FAILED = "failed"
    """The job raised, timed out, was aborted, or its lock could not be asked."""
    SKIPPED_OVERLAP = "skipped-overlap"
    """The previous run was still in progress."""
    SKIPPED_LOCKED = "skipped-locked"
    """Another instance runs this occurrence."""
    MISSED = "missed"
    """The occurrence passed and was not run (once per gap, with its first instant)."""
    SKIPPED_PAUSED = "skipped-paused"
    """An operator paused the job (``celery jobs pause``): not of the seeds, ddd_celery's own."""


@dataclass(frozen=True, slots=True)
class JobRun:
    """The record of one occurrence handled, as logged, counted and passed to ``on_run``.

    ``tenant_id`` is the tenant whose run decided a per-tenant failure; ``duration_ms`` and
    ``started_at`` exist only for occurrences that ran.
    """

    job: str
    scheduled_at: datetime
    outcome: Outcome
    context: str
    started_at: datetime | None = None
    duration_ms: float | None = None
    error_code: str | None = None
    error_type: str | None = None
    correlation_id: str | None = None
    tenant_id: str | None = None

    @property
    def ran(self) -> bool:
        return self.started_at is not None


__all__ = ["JobRun", "Outcome", "context_of", "error_code_of"]
