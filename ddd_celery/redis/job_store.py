"""The background jobs' store on Redis: each operation one round trip, atomic for its job."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from redis import Redis

from ddd_celery.background.errors import JOB_INTERRUPTED, JobInterruptedError
from ddd_celery.background.rules import scoped_idempotency_key, tenant_filter, tenant_key_of
from ddd_celery.background.store import (
    Batch,
    ClaimedJob,
    Dispatch,
    EnqueuedBy,
    JobLease,
    JobStats,
    JobStatus,
    JobStore,
    JsonValue,
    LostLeaseError,
    NewJob,
    StoredJob,
)
from ddd_celery.kernel.instants import epoch_ms, from_epoch_ms, to_utc
from ddd_celery.redis.errors import StoreUnavailableError, unavailable_as
from ddd_celery.redis.scripts import LuaScript, register

PURGE_BATCH = 1_000
"""Jobs one purge script deletes at most: a longer script would hold Redis for every client."""

TAKEN_KEPT_MS = 60_000
"""How long a ``take_due``'s reply is kept by its token, to answer that call sent again (redis-py
sends a script again on a new connection after a timeout, within seconds)."""


class RedisJobStore(JobStore):
    """Every job a hash, ``<prefix>job:<id>``, indexed by sorted sets; scripts in ``lua/job_*``.

    Each method is one round trip: an EVALSHA of a Lua script (which Redis runs atomically), or
    one HGETALL for ``find`` and ``stats``; ``purge_finished`` takes one more per
    ``PURGE_BATCH`` jobs it deletes. ``list_jobs`` of a tenant reads its index until it has
    ``limit`` jobs; jobs of the same instant (run_at, enqueued_at) come in the order of their
    ids, not of their adds. The key layout is documented in ``lua/job_lib.lua``, which every
    script starts with. Time comes from the caller (``now``); instants are kept to the
    millisecond. ``add`` is not transactional: the queue adds after the commit. Raises
    ``StoreUnavailableError`` when Redis cannot be asked, ``LostLeaseError`` for a report whose
    lease is no longer the job's.

    Every script is safe to run twice, as redis-py does after a timeout (``connect()``: one
    retry, on a new connection, of a script whose reply came late): each call's token (made
    once per call when the caller gives none) lets the second run answer what the first did.
    An index entry naming a job whose hash is gone (evicted under ``maxmemory``, deleted by
    hand) is dropped and counted in ``Batch.dropped``, never an error of the whole call.
    """

    transactional = False

    def __init__(self, client: Redis, *, prefix: str = "ddd_celery:bg:") -> None:
        self._client = client
        self._prefix = prefix

        def _register(name: str) -> LuaScript:
            """``lua/<name>`` after ``lua/job_lib.lua``, the helpers and key layout they share."""
            return register(client, name, after="job_lib.lua")

        self._add = _register("job_add.lua")
        self._claim = _register("job_claim.lua")
        self._claim_due = _register("job_claim_due.lua")
        self._heartbeat = _register("job_heartbeat.lua")
        self._update = _register("job_update.lua")
        self._complete = _register("job_complete.lua")
        self._fail = _register("job_fail.lua")
        self._release = _register("job_release.lua")
        self._cancel = _register("job_cancel.lua")
        self._retry_dead = _register("job_retry_dead.lua")
        self._list = _register("job_list.lua")
        self._purge = _register("job_purge.lua")
        self._take_due = _register("job_take_due.lua")
        self._expire_leases = _register("job_expire_leases.lua")

    def add(self, job: NewJob, *, dispatched: bool) -> str:
        tenant = tenant_key_of(job.enqueued_by)
        keys = [self._job_key(job.id)]
        if job.idempotency_key is not None:
            scoped = scoped_idempotency_key(job.tenant_id, job.idempotency_key)
            keys.append(f"{self._prefix}key:{scoped}")
        args: list[str | int] = [
            self._prefix,
            job.id,
            job.name,
            job.queue,
            _dump(job.payload),
            _ms(job.enqueued_at, "enqueued_at"),
            _ms(job.run_at, "run_at"),
            job.max_attempts,
            _dump(_enqueued_by_as_dict(job.enqueued_by)),
            tenant,
            job.idempotency_key or "",
            int(dispatched),
        ]
        with unavailable_as(StoreUnavailableError, f"add the job {job.id!r}"):
            kept = self._add(keys=keys, args=args)
        return _text(kept)

    def store_time(self) -> datetime:
        """Redis's ``TIME``, aware UTC, to the microsecond."""
        with unavailable_as(StoreUnavailableError, "read the time of Redis"):
            seconds, microseconds = self._client.time()
        return datetime.fromtimestamp(seconds, UTC) + timedelta(microseconds=microseconds)

    def claim_job(
        self, job_id: str, *, now: datetime, lease_ms: int, token: str | None = None
    ) -> ClaimedJob | None:
        at = _ms(now, "now")
        expires = at + _positive(lease_ms)
        with unavailable_as(StoreUnavailableError, f"claim the job {job_id!r}"):
            reply = self._claim(
                keys=[self._job_key(job_id)],
                args=[self._prefix, job_id, at, token or _token(), expires],
            )
        return None if reply is None else _claimed(reply)

    def claim_due(
        self,
        queues: Sequence[str],
        *,
        now: datetime,
        lease_ms: int,
        limit: int,
        token: str | None = None,
    ) -> list[ClaimedJob]:
        if not queues or limit <= 0:
            return []
        at = _ms(now, "now")
        expires = at + _positive(lease_ms)
        stem = token or _token()
        keys = [f"{self._prefix}claimed:{stem}"]
        keys += [f"{self._prefix}queue:{queue}" for queue in queues]
        args: list[str | int] = [self._prefix, at, expires, limit, stem, lease_ms]
        with unavailable_as(StoreUnavailableError, f"claim the due jobs of {list(queues)}"):
            replies, dropped = self._claim_due(keys=keys, args=args)
        return Batch((_claimed(reply) for reply in replies), dropped=int(dropped))

    def heartbeat(self, lease: JobLease, *, now: datetime, lease_ms: int) -> JobLease:
        expires = _ms(now, "now") + _positive(lease_ms)
        with unavailable_as(StoreUnavailableError, f"extend the lease of {lease.job_id!r}"):
            kept = self._heartbeat(
                keys=[self._job_key(lease.job_id)],
                args=[self._prefix, lease.job_id, lease.token, expires],
            )
        _require_lease(kept, lease, "extend")
        return JobLease(lease.job_id, lease.attempt, lease.token, from_epoch_ms(expires))

    def update(
        self,
        lease: JobLease,
        *,
        progress: JsonValue = None,
        checkpoint: JsonValue = None,
        set_progress: bool = False,
        set_checkpoint: bool = False,
    ) -> None:
        args: list[str | int] = [
            self._prefix,
            lease.job_id,
            lease.token,
            int(set_progress),
            _dump(progress) if set_progress else "",
            int(set_checkpoint),
            _dump(checkpoint) if set_checkpoint else "",
        ]
        with unavailable_as(StoreUnavailableError, f"update the job {lease.job_id!r}"):
            kept = self._update(keys=[self._job_key(lease.job_id)], args=args)
        _require_lease(kept, lease, "update")

    def complete(self, lease: JobLease, *, now: datetime) -> None:
        with unavailable_as(StoreUnavailableError, f"complete the job {lease.job_id!r}"):
            kept = self._complete(
                keys=[self._job_key(lease.job_id)],
                args=[self._prefix, lease.job_id, lease.token, _ms(now, "now")],
            )
        _require_lease(kept, lease, "complete")

    def fail(
        self,
        lease: JobLease,
        *,
        now: datetime,
        error_code: str,
        error_type: str,
        retry_at: datetime | None,
    ) -> None:
        retry = "" if retry_at is None else _ms(retry_at, "retry_at")
        args: list[str | int] = [self._prefix, lease.job_id, lease.token, _ms(now, "now")]
        with unavailable_as(StoreUnavailableError, f"fail the job {lease.job_id!r}"):
            kept = self._fail(
                keys=[self._job_key(lease.job_id)], args=[*args, error_code, error_type, retry]
            )
        _require_lease(kept, lease, "fail")

    def release(self, lease: JobLease, *, now: datetime) -> None:
        with unavailable_as(StoreUnavailableError, f"release the job {lease.job_id!r}"):
            kept = self._release(
                keys=[self._job_key(lease.job_id)],
                args=[self._prefix, lease.job_id, lease.token, _ms(now, "now")],
            )
        _require_lease(kept, lease, "release")

    def cancel(self, job_id: str, *, tenant_id: str | None, now: datetime) -> bool:
        tenant_filter(tenant_id)
        args: list[str | int] = [self._prefix, job_id, _reach(tenant_id), _ms(now, "now")]
        with unavailable_as(StoreUnavailableError, f"cancel the job {job_id!r}"):
            return bool(self._cancel(keys=[self._job_key(job_id)], args=args))

    def find(self, job_id: str, *, tenant_id: str | None) -> StoredJob | None:
        tenant_filter(tenant_id)
        with unavailable_as(StoreUnavailableError, f"find the job {job_id!r}"):
            fields = self._client.hgetall(self._job_key(job_id))
        if not fields:
            return None
        record = _decoded(fields)
        if tenant_id is not None and record["tenant"] != tenant_id:
            return None
        return _job(record)

    def retry_dead(self, job_id: str, *, tenant_id: str | None, now: datetime) -> bool:
        tenant_filter(tenant_id)
        args: list[str | int] = [self._prefix, job_id, _reach(tenant_id), _ms(now, "now")]
        with unavailable_as(StoreUnavailableError, f"retry the dead job {job_id!r}"):
            return bool(self._retry_dead(keys=[self._job_key(job_id)], args=args))

    def list_jobs(
        self, *, status: JobStatus | None = None, tenant_id: str | None = None, limit: int = 100
    ) -> list[StoredJob]:
        tenant_filter(tenant_id)
        if limit <= 0:
            return []
        index = "enqueued" if status is None else f"status:{JobStatus(status).value}"
        with unavailable_as(StoreUnavailableError, "list the jobs"):
            replies = self._list(
                keys=[self._prefix + index], args=[self._prefix, limit, _reach(tenant_id)]
            )
        return [_job(_pairs(reply)) for reply in replies]

    def purge_finished(self, *, before: datetime) -> int:
        args: list[str | int] = [self._prefix, _ms(before, "before"), PURGE_BATCH]
        purged = 0
        with unavailable_as(StoreUnavailableError, "purge the finished jobs"):
            while True:
                deleted = int(self._purge(keys=[self._prefix + "finished"], args=args))
                purged += deleted
                if deleted < PURGE_BATCH:
                    return purged

    def stats(self) -> JobStats:
        with unavailable_as(StoreUnavailableError, "count the jobs"):
            fields = self._client.hgetall(self._prefix + "stats")
        counts: dict[str, dict[JobStatus, int]] = {}
        for field, value in _decoded(fields).items():
            queue, _, status = field.rpartition("|")
            if int(value) > 0:
                counts.setdefault(queue, {})[JobStatus(status)] = int(value)
        return JobStats(counts)

    def take_due(
        self,
        *,
        now: datetime,
        limit: int,
        redispatch_after_ms: int,
        token: str | None = None,
    ) -> list[Dispatch]:
        if limit <= 0:
            return []
        at = _ms(now, "now")
        keys = [
            self._prefix + "pending",
            self._prefix + "dispatched",
            f"{self._prefix}taken:{token or _token()}",
        ]
        args: list[str | int] = [
            self._prefix,
            at,
            at - redispatch_after_ms,
            limit,
            redispatch_after_ms,
            TAKEN_KEPT_MS,
        ]
        with unavailable_as(StoreUnavailableError, "take the due jobs"):
            reply, dropped = self._take_due(keys=keys, args=args)
        fields = [_text(value) for value in reply]
        dispatches = (Dispatch(*fields[i : i + 3]) for i in range(0, len(fields), 3))
        return Batch(dispatches, dropped=int(dropped))

    def expire_leases(self, *, now: datetime, limit: int) -> list[StoredJob]:
        if limit <= 0:
            return []
        args: list[str | int] = [
            self._prefix,
            _ms(now, "now"),
            limit,
            JOB_INTERRUPTED,
            JobInterruptedError.__name__,
        ]
        with unavailable_as(StoreUnavailableError, "expire the leases"):
            replies, dropped = self._expire_leases(keys=[self._prefix + "leases"], args=args)
        return Batch((_job(_pairs(reply)) for reply in replies), dropped=int(dropped))

    def _job_key(self, job_id: str) -> str:
        return f"{self._prefix}job:{job_id}"


def _token() -> str:
    """A lease's token: 128 random bits in hex (a uuid4's hex without its object)."""
    return os.urandom(16).hex()


def _reach(tenant_id: str | None) -> str:
    """The scripts' tenant filter: ``*`` reaches every job, ``=<tenant>`` that tenant's."""
    return "*" if tenant_id is None else f"={tenant_id}"


def _ms(value: datetime, name: str = "instant") -> int:
    return epoch_ms(to_utc(value, name))


def _positive(lease_ms: int) -> int:
    if lease_ms <= 0:
        raise ValueError(f"a lease lasts a positive number of ms, not {lease_ms}")
    return lease_ms


def _dump(value: JsonValue) -> str:
    return json.dumps(value, separators=(",", ":"))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _decoded(fields: Mapping[Any, Any]) -> dict[str, str]:
    return {_text(key): _text(value) for key, value in fields.items()}


def _pairs(flat: Sequence[bytes | str]) -> dict[str, str]:
    """An HGETALL reply as a script returns it, a flat list, as a mapping."""
    return {_text(flat[i]): _text(flat[i + 1]) for i in range(0, len(flat), 2)}


def _require_lease(kept: int, lease: JobLease, doing: str) -> None:
    if not kept:
        raise LostLeaseError(
            f"cannot {doing} job {lease.job_id!r}: the lease of attempt {lease.attempt} "
            "is no longer the job's (it expired and was handed back, or the job was cancelled)"
        )


def _claimed(reply: bytes | str) -> ClaimedJob:
    """A claim script's reply: the job's record, its JSON fields already values (``claim`` in
    ``lua/job_lib.lua``), read with one ``json.loads``."""
    values = json.loads(reply)
    record = values["record"]
    job = _job(record, values)
    expires_at = from_epoch_ms(int(record["lease_expires_at"]))
    return ClaimedJob(job, JobLease(job.id, job.attempts, record["lease_token"], expires_at))


def _enqueued_by_as_dict(enqueued_by: EnqueuedBy) -> dict[str, str | None]:
    return {
        "correlation_id": enqueued_by.correlation_id,
        "actor": enqueued_by.actor,
        "tenant_id": enqueued_by.tenant_id,
        "traceparent": enqueued_by.traceparent,
    }


def _instant(record: Mapping[str, str], field: str) -> datetime | None:
    value = record.get(field)
    return None if value is None else from_epoch_ms(int(value))


def _job(record: Mapping[str, str], values: Mapping[str, Any] | None = None) -> StoredJob:
    """The job of ``record`` (its hash); its JSON fields read from ``values`` when given (a
    claim's reply), else parsed from the record."""
    if values is None:
        values = {field: json.loads(record[field]) for field in _JSON_FIELDS if field in record}
    by = values["enqueued_by"]
    return StoredJob(
        id=record["id"],
        name=record["name"],
        queue=record["queue"],
        status=JobStatus(record["status"]),
        payload=values["payload"],
        enqueued_at=from_epoch_ms(int(record["enqueued_at"])),
        run_at=from_epoch_ms(int(record["run_at"])),
        attempts=int(record["attempts"]),
        max_attempts=int(record["max_attempts"]),
        enqueued_by=EnqueuedBy(
            correlation_id=by.get("correlation_id"),
            actor=by.get("actor"),
            tenant_id=by.get("tenant_id"),
            traceparent=by.get("traceparent"),
        ),
        idempotency_key=record.get("idempotency_key"),
        progress=values.get("progress"),
        checkpoint=values.get("checkpoint"),
        last_error_code=record.get("last_error_code"),
        last_error_type=record.get("last_error_type"),
        lease_expires_at=_instant(record, "lease_expires_at"),
        finished_at=_instant(record, "finished_at"),
    )


_JSON_FIELDS = ("payload", "enqueued_by", "progress", "checkpoint")
"""The fields of a job's hash that hold JSON (``claim`` in ``lua/job_lib.lua`` splices them)."""
