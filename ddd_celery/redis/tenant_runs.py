"""The joins of spread occurrences on Redis: one hash per occurrence, ended by one script."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ddd_celery.kernel.instants import epoch_ms, iso_ms, to_utc
from ddd_celery.redis.connection import RedisClient
from ddd_celery.redis.errors import StoreUnavailableError, unavailable_as
from ddd_celery.redis.scripts import register
from ddd_celery.scheduling.tenant_runs import (
    JobTenantRuns,
    TenantFailure,
    TenantTally,
    check_tenants,
)


class RedisJobTenantRuns(JobTenantRuns):
    """One hash per spread occurrence, ``<prefix><job>:<epoch ms>``, expiring with the run.

    The layout is in ``lua/tenant_runs_start.lua``; ``start`` and ``complete`` are one EVALSHA
    each, so tenant runs ending at once on several workers are struck off one at a time and
    exactly one gets the tally. ``pending`` is one HGET. Raises ``StoreUnavailableError`` when
    Redis cannot be asked.
    """

    def __init__(self, client: RedisClient, *, prefix: str = "ddd_celery:tenant-runs:") -> None:
        self._client = client
        self._prefix = prefix
        self._start = register(client, "tenant_runs_start.lua")
        self._complete = register(client, "tenant_runs_complete.lua")

    def start(
        self, job: str, scheduled_at: datetime, tenants: Sequence[str], *, ttl_ms: int
    ) -> bool:
        key = self._key(job, scheduled_at)
        check_tenants(tenants, ttl_ms)
        with unavailable_as(StoreUnavailableError, f"open the tenant runs of {job!r}"):
            return bool(self._start(keys=[key], args=[ttl_ms, *tenants]))

    def complete(
        self, job: str, scheduled_at: datetime, tenant: str, *, failure: TenantFailure | None
    ) -> TenantTally | None:
        key = self._key(job, scheduled_at)
        failed = ["0", "", ""] if failure is None else ["1", failure.error_code, failure.error_type]
        with unavailable_as(
            StoreUnavailableError, f"complete a tenant run of {job!r} at {iso_ms(scheduled_at)}"
        ):
            reply = self._complete(keys=[key], args=[tenant, *failed])
        if reply is None:
            return None
        total, first, code, kind = (_text(part) for part in reply)
        return TenantTally(int(total), TenantFailure(first, code, kind) if first else None)

    def pending(self, job: str, scheduled_at: datetime) -> int | None:
        with unavailable_as(StoreUnavailableError, f"read the tenant runs of {job!r}"):
            left = self._client.hget(self._key(job, scheduled_at), "left")
        return None if left is None else int(left)

    def _key(self, job: str, scheduled_at: datetime) -> str:
        return f"{self._prefix}{job}:{epoch_ms(to_utc(scheduled_at, 'scheduled_at'))}"


def _text(value: bytes | str | int) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
