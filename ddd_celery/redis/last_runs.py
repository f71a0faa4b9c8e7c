"""The last run of each job and its history on Redis, written by beat and the workers."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from ddd_celery.kernel.instants import epoch_ms
from ddd_celery.redis.batches import BATCH, read_many
from ddd_celery.redis.connection import RedisClient
from ddd_celery.redis.errors import StoreUnavailableError, unavailable_as
from ddd_celery.redis.scripts import register
from ddd_celery.redis.slots import require_one_slot
from ddd_celery.scheduling.last_runs import (
    HISTORY_LIMIT,
    JobLastRuns,
    check_limits,
    run_as_dict,
    run_from_dict,
)
from ddd_celery.scheduling.outcomes import JobRun


def _record(run: JobRun) -> str:
    """The text of ``run``'s record, the same whether ``write`` or ``write_many`` sends it, so
    a record sent twice is known as the newest of its history."""
    return json.dumps(run_as_dict(run), separators=(",", ":"))


class RedisJobLastRuns(JobLastRuns):
    """One hash per job, ``<prefix><job>``: ``at``, the occurrence in epoch ms, and ``run``, JSON;
    and one list per job, ``<history_prefix><job>`` (by default ``<prefix>history:<job>``), its
    records as JSON, newest first, capped at ``history_limit``.

    A write is one EVALSHA of ``lua/last_run_write.lua``, which compares and sets the hash and
    pushes and trims the list atomically, so writers racing keep the latest occurrence and every
    record; occurrences are compared to the millisecond. ``write_many`` is one script per
    thousand records (``lua/last_run_write_many.lua``), the same rule applied in their order.
    A read is one HGET, ``read_many`` one
    script per thousand jobs (``lua/json_many.lua``), ``history`` one LRANGE. No key expires.
    Raises ``StoreUnavailableError`` when Redis cannot be asked.
    """

    def __init__(
        self,
        client: RedisClient,
        *,
        prefix: str = "ddd_celery:last-run:",
        history_prefix: str | None = None,
        history_limit: int = HISTORY_LIMIT,
    ) -> None:
        check_limits(history_limit)
        self._client = client
        self._prefix = prefix
        self._history_prefix = f"{prefix}history:" if history_prefix is None else history_prefix
        require_one_slot(
            client, "RedisJobLastRuns", prefix=prefix, history_prefix=self._history_prefix
        )
        self._history_limit = history_limit
        self._write = register(client, "last_run_write.lua", after="occurrence_lib.lua")
        self._write_many = register(client, "last_run_write_many.lua", after="occurrence_lib.lua")
        self._read_many = register(client, "json_many.lua")

    @property
    def client(self) -> RedisClient:
        """The client this store asks, for a store that joins its keys in one script."""
        return self._client

    @property
    def prefix(self) -> str:
        """What this store puts before each key name."""
        return self._prefix

    @property
    def history_prefix(self) -> str:
        """What this store puts before the name of each job's history list."""
        return self._history_prefix

    @property
    def history_limit(self) -> int:
        """How many records each job's history keeps."""
        return self._history_limit

    def write(self, run: JobRun) -> None:
        record = _record(run)
        at = epoch_ms(run.scheduled_at)
        keys = [self._prefix + run.job, self._history_prefix + run.job]
        with unavailable_as(StoreUnavailableError, f"write the last run of {run.job!r}"):
            self._write(keys=keys, args=[at, record, self._history_limit])

    def write_many(self, runs: Sequence[JobRun]) -> None:
        records = [[run.job, str(epoch_ms(run.scheduled_at)), _record(run)] for run in runs]
        prefixes = [self._prefix, self._history_prefix, str(self._history_limit)]
        with unavailable_as(StoreUnavailableError, "write the last runs"):
            for start in range(0, len(records), BATCH):
                batch = json.dumps(records[start : start + BATCH], ensure_ascii=False)
                self._write_many(keys=[self._prefix], args=[*prefixes, batch])

    def read(self, job: str) -> JobRun | None:
        with unavailable_as(StoreUnavailableError, f"read the last run of {job!r}"):
            value = self._client.hget(self._prefix + job, "run")
        return None if value is None else run_from_dict(json.loads(value))

    def read_many(self, jobs: Iterable[str]) -> dict[str, JobRun | None]:
        with unavailable_as(StoreUnavailableError, "read the last runs"):
            records = read_many(self._read_many, self._prefix, jobs, field="run")
        return {
            job: None if record is None else run_from_dict(record)
            for job, record in records.items()
        }

    def history(self, job: str, limit: int = HISTORY_LIMIT) -> list[JobRun]:
        check_limits(limit)
        with unavailable_as(StoreUnavailableError, f"read the run history of {job!r}"):
            values = self._client.lrange(self._history_prefix + job, 0, limit - 1)
        return [run_from_dict(json.loads(value)) for value in values]
