"""What beat sends a worker for one occurrence: kwargs of the job's task, JSON only."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ddd_celery.declarations.cron_evaluator import next_occurrence
from ddd_celery.declarations.options import Tenancy
from ddd_celery.declarations.schedule import ParsedJobSchedule
from ddd_celery.kernel.errors import DddCeleryError
from ddd_celery.kernel.instants import iso_ms, to_utc
from ddd_celery.kernel.tenants import TenantDirectory
from ddd_celery.scheduling.occurrence import SchedulerRules

_TICK = timedelta(microseconds=1)


class UnreadableMessageError(DddCeleryError, ValueError):
    """A task message that is not an occurrence of this job: refused, never run.

    ``field`` names the part of the message that is wrong and ``reason`` says why; neither
    quotes the value (a message is data, and may be anyone's). What a worker logs of it.
    """

    def __init__(self, reason: str, *, field: str | None = None) -> None:
        super().__init__(reason if field is None else f"{field}: {reason}")
        self.field = field
        self.reason = reason


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
        refuse_unknown_fields(
            kwargs, ("scheduled_at", "correlation_id", "tenant_id"), "an occurrence"
        )
        raw_at, correlation_id = kwargs.get("scheduled_at"), kwargs.get("correlation_id")
        tenant_id = kwargs.get("tenant_id")
        if not isinstance(raw_at, str):
            raise UnreadableMessageError(
                f"must be an ISO 8601 instant string, not {type(raw_at).__name__}",
                field="scheduled_at",
            )
        try:
            scheduled_at = to_utc(datetime.fromisoformat(raw_at), "scheduled_at")
        except ValueError:
            raise UnreadableMessageError(
                "is not an ISO 8601 instant with its UTC offset", field="scheduled_at"
            ) from None
        if not isinstance(correlation_id, str) or not correlation_id:
            raise UnreadableMessageError("must be a non-empty string", field="correlation_id")
        if tenant_id is not None and not isinstance(tenant_id, str):
            raise UnreadableMessageError(
                f"must be a string or null, not {type(tenant_id).__name__}", field="tenant_id"
            )
        return cls(scheduled_at, correlation_id, tenant_id)


def refuse_unknown_fields(kwargs: Mapping[str, Any], fields: tuple[str, ...], what: str) -> None:
    """Refuse kwargs naming a field the message does not have, listing those it has."""
    unknown = set(kwargs) - set(fields)
    if unknown:
        named = f"{', '.join(fields[:-1])} and {fields[-1]}"
        raise UnreadableMessageError(
            f"has {len(unknown)} unexpected field(s); {what} has {named}", field="kwargs"
        )


def refuse_unreal(
    message: OccurrenceMessage,
    schedule: ParsedJobSchedule,
    now: datetime,
    rules: SchedulerRules,
    tenants: TenantDirectory | None,
) -> None:
    """Raise ``UnreadableMessageError`` for a message that cannot be an occurrence of the job.

    A worker runs an occurrence, never an instant chosen by whoever can publish on the broker:

    - ``scheduled_at`` later than ``now`` plus ``late_after_ms`` is refused. Beat sends an
      instant once it is due, so only a clock that is wrong by more than the lateness, or a
      forged message, names one that far ahead; run, it would stay the job's last outcome (the
      latest instant wins) until that date.
    - ``scheduled_at`` that is not an instant of the job's schedule is refused: a manual send
      (``celery call``) names a real occurrence, and ``celery jobs run-now`` runs one now.
    - ``tenant_id`` is refused on a global job, and on a per-tenant job unless the tenant
      directory lists it (a directory that cannot answer cannot confirm it).
    """
    at = message.scheduled_at
    if at > now + timedelta(milliseconds=rules.late_after_ms):
        raise UnreadableMessageError(
            f"is more than late_after_ms={rules.late_after_ms} ahead of this worker's clock: "
            "beat sends an occurrence once it is due",
            field="scheduled_at",
        )
    try:
        real = next_occurrence(schedule, at - _TICK) == at
    except (ValueError, OverflowError):
        real = False
    if not real:
        raise UnreadableMessageError(
            f"is not an instant of the job's schedule ({schedule.description})",
            field="scheduled_at",
        )
    if message.tenant_id is None:
        return
    if schedule.options.tenancy is Tenancy.GLOBAL:
        raise UnreadableMessageError(
            "is set on a global job, which runs for no tenant", field="tenant_id"
        )
    try:
        known = tenants is not None and message.tenant_id in tenants.tenants()
    except Exception:
        raise UnreadableMessageError(
            "cannot be confirmed: the tenant directory did not answer", field="tenant_id"
        ) from None
    if not known:
        raise UnreadableMessageError("is not a tenant the directory lists", field="tenant_id")
