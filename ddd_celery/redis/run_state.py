"""The run state of jobs on Redis: overlap decided across beats and workers."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from ddd_celery.kernel.instants import epoch_ms, from_epoch_ms, iso_ms, to_utc
from ddd_celery.kernel.lock import Lock
from ddd_celery.redis.batches import read_many
from ddd_celery.redis.checkpoints import RedisJobCheckpoints
from ddd_celery.redis.connection import RedisClient
from ddd_celery.redis.errors import StoreUnavailableError, unavailable_as
from ddd_celery.redis.last_runs import RedisJobLastRuns
from ddd_celery.redis.lock import RedisLock
from ddd_celery.redis.occurrence_store import RedisOccurrenceStore, same_server
from ddd_celery.redis.scripts import register
from ddd_celery.redis.slots import require_one_slot, same_slot
from ddd_celery.redis.tenant_runs import RedisJobTenantRuns
from ddd_celery.scheduling.checkpoints import JobCheckpoints
from ddd_celery.scheduling.last_runs import JobLastRuns
from ddd_celery.scheduling.occurrence_store import OccurrenceStore
from ddd_celery.scheduling.run_state import Claim, JobRunState
from ddd_celery.scheduling.tenant_runs import JobTenantRuns


class RedisJobRunState(JobRunState):
    """One hash per job, ``<prefix><job>``, that exists while a run is in progress.

    Its field ``running`` holds the occurrence in progress and ``queued`` the one waiting
    behind it, both in epoch ms; the hash expires (PEXPIRE) with the run's time to live, on
    Redis's clock. ``claim``, ``finish`` and ``drop_queued`` are each one EVALSHA of a script
    in ``lua/``, so each is atomic for the job; ``running`` is one HGET, ``running_many`` one
    script per thousand jobs (``lua/json_many.lua``). Instants are kept to the millisecond.
    Raises ``StoreUnavailableError`` when Redis cannot be asked.
    """

    def __init__(self, client: RedisClient, *, prefix: str = "ddd_celery:run:") -> None:
        require_one_slot(client, "RedisJobRunState", prefix=prefix)
        self._client = client
        self._prefix = prefix
        self._claim = register(client, "run_claim.lua", after="occurrence_lib.lua")
        self._finish = register(client, "run_finish.lua", after="occurrence_lib.lua")
        self._drop_queued = register(client, "run_drop_queued.lua", after="occurrence_lib.lua")
        self._read_many = register(client, "json_many.lua")
        self._tenant_runs = RedisJobTenantRuns(client, prefix=f"{prefix}tenants:")

    def claim(self, job: str, scheduled_at: datetime, *, queue: bool, ttl_ms: int) -> Claim:
        at = epoch_ms(to_utc(scheduled_at, "scheduled_at"))
        _require_ttl(ttl_ms)
        with unavailable_as(StoreUnavailableError, f"claim {job!r} at {iso_ms(scheduled_at)}"):
            reply = self._claim(keys=[self._prefix + job], args=[at, int(queue), ttl_ms])
        return Claim(reply.decode() if isinstance(reply, bytes) else reply)

    def finish(self, job: str, scheduled_at: datetime, *, ttl_ms: int) -> datetime | None:
        at = epoch_ms(to_utc(scheduled_at, "scheduled_at"))
        _require_ttl(ttl_ms)
        with unavailable_as(StoreUnavailableError, f"finish {job!r} at {iso_ms(scheduled_at)}"):
            promoted = self._finish(keys=[self._prefix + job], args=[at, ttl_ms])
        return None if promoted is None else from_epoch_ms(promoted)

    def drop_queued(self, job: str) -> datetime | None:
        with unavailable_as(StoreUnavailableError, f"drop the queued occurrence of {job!r}"):
            dropped = self._drop_queued(keys=[self._prefix + job])
        return None if dropped is None else from_epoch_ms(dropped)

    def running(self, job: str) -> datetime | None:
        with unavailable_as(StoreUnavailableError, f"read the run in progress of {job!r}"):
            value = self._client.hget(self._prefix + job, "running")
        return None if value is None else from_epoch_ms(int(value))

    def running_many(self, jobs: Iterable[str]) -> dict[str, datetime | None]:
        with unavailable_as(StoreUnavailableError, "read the runs in progress"):
            values = read_many(self._read_many, self._prefix, jobs, field="running")
        return {
            job: None if value is None else from_epoch_ms(value) for job, value in values.items()
        }

    def tenant_runs(self) -> JobTenantRuns:
        """The joins of spread occurrences on this client, under ``<prefix>tenants:``."""
        return self._tenant_runs

    def occurrence_store(
        self, lock: Lock, checkpoints: JobCheckpoints | None, last_runs: JobLastRuns | None
    ) -> OccurrenceStore | None:
        """One script per operation when the lock and the stores given are on this Redis.

        ``RedisLock`` and, when given, ``RedisJobCheckpoints`` and ``RedisJobLastRuns`` whose
        clients reach the same database; None for any other mix, which is then composed.
        """
        if not isinstance(lock, RedisLock) or not same_server(self._client, lock.client):
            return None
        if checkpoints is not None and not (
            isinstance(checkpoints, RedisJobCheckpoints)
            and same_server(self._client, checkpoints.client)
        ):
            return None
        if last_runs is not None and not (
            isinstance(last_runs, RedisJobLastRuns) and same_server(self._client, last_runs.client)
        ):
            return None
        prefixes = [lock.prefix, self._prefix]
        prefixes += [] if checkpoints is None else [checkpoints.prefix]
        prefixes += [] if last_runs is None else [last_runs.prefix, last_runs.history_prefix]
        if not same_slot(self._client, *prefixes):
            return None  # a cluster's slots apart: each store's own scripts, composed
        return RedisOccurrenceStore(
            self._client,
            clock=lock.clock,
            lock_prefix=lock.prefix,
            run_prefix=self._prefix,
            checkpoint_prefix=None if checkpoints is None else checkpoints.prefix,
            last_run_prefix=None if last_runs is None else last_runs.prefix,
            history=None
            if last_runs is None
            else (last_runs.history_prefix, last_runs.history_limit),
        )


def _require_ttl(ttl_ms: int) -> None:
    """Refuse a time to live Redis would turn into "delete now" or an error."""
    if ttl_ms <= 0:
        raise ValueError(f"a run's time to live is a positive number of ms, not {ttl_ms}")
