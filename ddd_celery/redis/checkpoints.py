"""Job checkpoints on Redis, shared by every beat and surviving their restarts."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from ddd_celery.kernel.instants import epoch_ms, from_epoch_ms, to_utc
from ddd_celery.redis.batches import read_many
from ddd_celery.redis.connection import RedisClient
from ddd_celery.redis.errors import StoreUnavailableError, unavailable_as
from ddd_celery.redis.scripts import register
from ddd_celery.redis.slots import require_one_slot
from ddd_celery.scheduling.checkpoints import JobCheckpoints


class RedisJobCheckpoints(JobCheckpoints):
    """One key per job, ``<prefix><job>``, holding the last occurrence handled in epoch ms.

    The key never expires: it is what crosses a restart. A read is one GET; a write is one
    EVALSHA of ``lua/checkpoint_write.lua``, which compares and sets atomically, so two beats
    writing at once keep the later instant. ``read_many`` is one EVALSHA per thousand jobs
    (``lua/json_many.lua``).
    Instants are kept to the millisecond. Raises ``StoreUnavailableError`` when Redis cannot be
    asked.
    """

    def __init__(self, client: RedisClient, *, prefix: str = "ddd_celery:checkpoint:") -> None:
        require_one_slot(client, "RedisJobCheckpoints", prefix=prefix)
        self._client = client
        self._prefix = prefix
        self._write = register(client, "checkpoint_write.lua", after="occurrence_lib.lua")
        self._read_many = register(client, "json_many.lua")

    @property
    def client(self) -> RedisClient:
        """The client this store asks, for a store that joins its keys in one script."""
        return self._client

    @property
    def prefix(self) -> str:
        """What this store puts before each key name."""
        return self._prefix

    def read(self, job: str) -> datetime | None:
        with unavailable_as(StoreUnavailableError, f"read the checkpoint of {job!r}"):
            value = self._client.get(self._prefix + job)
        return None if value is None else from_epoch_ms(int(value))

    def read_many(self, jobs: Iterable[str]) -> dict[str, datetime | None]:
        with unavailable_as(StoreUnavailableError, "read the checkpoints"):
            values = read_many(self._read_many, self._prefix, jobs)
        return {
            job: None if value is None else from_epoch_ms(value) for job, value in values.items()
        }

    def write(self, job: str, handled: datetime) -> None:
        at = epoch_ms(to_utc(handled, "handled"))
        with unavailable_as(StoreUnavailableError, f"write the checkpoint of {job!r}"):
            self._write(keys=[self._prefix + job], args=[at])
