"""The pauses of the scheduled jobs on Redis, read by every beat in one round trip."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime

from ddd_celery.redis.connection import RedisClient
from ddd_celery.redis.errors import StoreUnavailableError, unavailable_as
from ddd_celery.redis.scripts import register
from ddd_celery.scheduling.pauses import (
    JobPauses,
    Pause,
    new_pause,
    pause_as_dict,
    pause_from_dict,
)


class RedisJobPauses(JobPauses):
    """One hash, ``<prefix>pauses``: a field per paused job, its pause as JSON; no expiry.

    ``paused`` is one HGETALL, whatever the number of jobs. A pause is HSETNX then HGET in one
    MULTI (one round trip, atomic), so a pause sent again, or racing another, keeps the first;
    a resume is HGET then HDEL in one MULTI. Raises ``StoreUnavailableError`` when Redis cannot
    be asked.
    """

    def __init__(self, client: RedisClient, *, prefix: str = "ddd_celery:") -> None:
        self._client = client
        self._key = f"{prefix}pauses"
        self._pause = register(client, "pause.lua")
        self._resume = register(client, "resume.lua")

    @property
    def client(self) -> RedisClient:
        """The client this store asks, for the line that says it cannot be reached."""
        return self._client

    def pause(self, job: str, *, by: str, at: datetime, reason: str | None = None) -> Pause:
        record = json.dumps(pause_as_dict(new_pause(job, by=by, at=at, reason=reason)))
        with unavailable_as(StoreUnavailableError, f"pause {job!r}"):
            kept = self._pause(keys=[self._key], args=[job, record])
        return pause_from_dict(json.loads(kept))

    def resume(self, job: str) -> Pause | None:
        with unavailable_as(StoreUnavailableError, f"resume {job!r}"):
            removed = self._resume(keys=[self._key], args=[job])
        return None if removed is None else pause_from_dict(json.loads(removed))

    def paused(self) -> Mapping[str, Pause]:
        with unavailable_as(StoreUnavailableError, "read the pauses"):
            fields = self._client.hgetall(self._key)
        return {
            pause.job: pause
            for pause in (pause_from_dict(json.loads(value)) for value in fields.values())
        }
