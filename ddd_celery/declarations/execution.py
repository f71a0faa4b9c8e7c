"""What a run of a scheduled job is told about itself."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ddd_celery.kernel.abort import AbortSignal
from ddd_celery.kernel.instants import require_aware


@dataclass(frozen=True, slots=True)
class JobExecution:
    """The occurrence a run belongs to, handed to ``run(execution)``.

    Pass ``scheduled_at`` to the command, never the clock: "the reminders of that morning" is
    the same work whenever the run really starts (``started_at``, later by the jitter, a queue
    or a catch-up). A long job checks ``signal`` between two steps; it is aborted on timeout or
    stop. ``attempt`` is 1 for a scheduled job, which is never retried; ``tenant_id`` is set for
    each run of a ``per-tenant`` job.
    """

    scheduled_at: datetime
    started_at: datetime
    signal: AbortSignal
    attempt: int = 1
    tenant_id: str | None = None

    def __post_init__(self) -> None:
        require_aware(self.scheduled_at, "scheduled_at")
        require_aware(self.started_at, "started_at")
        if self.attempt < 1:
            raise ValueError(f"attempt counts from 1, got {self.attempt}")
