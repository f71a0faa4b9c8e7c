"""What beat sends a worker for one occurrence: kwargs of the job's task, JSON only."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ddd_celery.kernel.instants import iso_ms, to_utc


class UnreadableMessageError(ValueError):
    """A task message that is not an occurrence of this job: refused, never run."""


@dataclass(frozen=True, slots=True)
class OccurrenceMessage:
    """The occurrence a task runs: its instant, its correlation id, and the tenant if one."""

    scheduled_at: datetime
    correlation_id: str
    tenant_id: str | None = None

    def to_kwargs(self) -> dict[str, str | None]:
        return {
            "scheduled_at": iso_ms(self.scheduled_at),
            "correlation_id": self.correlation_id,
            "tenant_id": self.tenant_id,
        }

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any]) -> OccurrenceMessage:
        """Read the kwargs of a task; raise ``UnreadableMessageError`` naming what is wrong."""
        unknown = set(kwargs) - {"scheduled_at", "correlation_id", "tenant_id"}
        if unknown:
            raise UnreadableMessageError(f"unexpected fields {sorted(unknown)}")
        raw_at, correlation_id = kwargs.get("scheduled_at"), kwargs.get("correlation_id")
        tenant_id = kwargs.get("tenant_id")
        if not isinstance(raw_at, str):
            raise UnreadableMessageError("scheduled_at must be an ISO 8601 instant")
        try:
            scheduled_at = to_utc(datetime.fromisoformat(raw_at), "scheduled_at")
        except ValueError as error:
            raise UnreadableMessageError(
                f"scheduled_at {raw_at!r} is not an aware instant"
            ) from error
        if not isinstance(correlation_id, str) or not correlation_id:
            raise UnreadableMessageError("correlation_id must be a non-empty string")
        if tenant_id is not None and not isinstance(tenant_id, str):
            raise UnreadableMessageError("tenant_id must be a string or null")
        return cls(scheduled_at, correlation_id, tenant_id)
