"""The background jobs' store on Redis: each operation one round trip, atomic for its job.

Listing reads sorted sets kept in the order of the listing, (enqueued_at, id) (their members
say both, see ``lua/job_lib.lua``): a page is one ZREVRANGEBYLEX from its cursor, the same cost
among a thousand jobs as among a million. There is one such index of every job, one per status,
per job name and per tenant; a filter reads the smallest of those that apply and checks its
other fields on what it reads, a bounded number of entries per script call. The stats are
counters the scripts that move a job keep in the same call; a purge reads an index of
``finished_at`` per finished status.

Upgrading a store written by an earlier version (its jobs in ``enqueued``, ``status:<status>``
and ``finished``, counted by queue only): stop every process of the earlier version, then call
``RedisJobStore.reindex()`` once (bounded batches, safe to run again, to interrupt and resume);
until then a job of the earlier layout is listed, counted by name and purged only once a script
has moved it (each script adopts the job it moves), and ``stats().counts`` is right throughout.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from ddd_celery.background.errors import JOB_INTERRUPTED, JobInterruptedError
from ddd_celery.background.rules import (
    check_listing,
    purged_statuses,
    scoped_idempotency_key,
    tenant_filter,
    tenant_key_of,
)
from ddd_celery.background.store import (
    ADD_MANY_BATCH,
    FINISHED_STATUSES,
    AttemptRecord,
    AttemptState,
    Batch,
    ClaimedJob,
    Dispatch,
    EnqueuedBy,
    JobFilter,
    JobLease,
    JobPage,
    JobState,
    JobStats,
    JobStatus,
    JobStore,
    JsonValue,
    LostLeaseError,
    NewJob,
    StoredJob,
    dispatched_now,
)
from ddd_celery.kernel.instants import epoch_ms, from_epoch_ms, to_utc
from ddd_celery.redis.connection import RedisClient
from ddd_celery.redis.errors import StoreUnavailableError, unavailable_as
from ddd_celery.redis.scripts import LuaScript, register
from ddd_celery.redis.slots import require_one_slot

PURGE_BATCH = 1_000
"""Jobs one purge script deletes at most: a longer script would hold Redis for every client."""

LIST_READ = 1_000
"""Index entries one listing script reads at most; a page whose filter the index does not
answer alone (a queue, a state beside a name) takes one more call per this many."""

REINDEX_BATCH = 1_000
"""Jobs of the earlier layout one ``reindex`` script adopts at most."""

TAKEN_KEPT_MS = 60_000
"""How long a ``take_due``'s (or a purge batch's) reply is kept by its token, to answer that
call sent again (redis-py sends a script again on a new connection after a timeout, within
seconds)."""

_STATUS_OF_STATE = {
    JobState.SCHEDULED: JobStatus.QUEUED,
    JobState.READY: JobStatus.QUEUED,
    JobState.RUNNING: JobStatus.RUNNING,
    JobState.RETRYING: JobStatus.FAILED,
    JobState.DEAD: JobStatus.DEAD,
    JobState.SUCCEEDED: JobStatus.SUCCEEDED,
    JobState.CANCELLED: JobStatus.CANCELLED,
}
_DUE_OF_STATE = {JobState.SCHEDULED: "later", JobState.READY: "due"}

_MEMBER = re.compile(r"[0-9]{15}:.*", re.DOTALL)
"""A listing index's member, ``<enqueued_at since 0001-01-01, 15 digits>:<id>``
(``member`` in ``lua/job_lib.lua``): what a page's cursor holds."""


class RedisJobStore(JobStore):
    """Every job a hash, ``<prefix>job:<id>``, indexed by sorted sets; scripts in ``lua/job_*``.

    Each method is one round trip: an EVALSHA of a Lua script (which Redis runs atomically), or
    one HGETALL for ``find``; ``purge_finished`` takes one per ``PURGE_BATCH`` jobs it deletes,
    ``list_page`` one per ``LIST_READ`` index entries it reads (one, unless the filter is
    narrower than its index), ``reindex`` one per ``REINDEX_BATCH`` jobs. Jobs of the same
    instant (run_at, enqueued_at) come in the order of their ids, not of their adds. The key
    layout is documented in ``lua/job_lib.lua``, which every script starts with. Time comes
    from the caller (``now``); instants are kept to the millisecond. ``add`` is not
    transactional: the queue adds after the commit. Raises ``StoreUnavailableError`` when Redis
    cannot be asked, ``LostLeaseError`` for a report whose lease is no longer the job's.

    Every script is safe to run twice, as redis-py does after a timeout (``connect()``: one
    retry, on a new connection, of a script whose reply came late): each call's token (made
    once per call when the caller gives none) lets the second run answer what the first did.
    An index entry naming a job whose hash is gone (evicted under ``maxmemory``, deleted by
    hand) is dropped and counted in ``Batch.dropped``, never an error of the whole call.
    """

    transactional = False

    def __init__(self, client: RedisClient, *, prefix: str = "ddd_celery:bg:") -> None:
        require_one_slot(client, "RedisJobStore", prefix=prefix)
        self._client = client
        self._prefix = prefix

        def _register(name: str) -> LuaScript:
            """``lua/<name>`` after ``lua/job_lib.lua``, the helpers and key layout they share."""
            return register(client, name, after="job_lib.lua")

        self._add = _register("job_add.lua")
        self._add_many = _register("job_add_many.lua")
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
        self._stats = _register("job_stats.lua")
        self._reindex = _register("job_reindex.lua")
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

    def add_many(self, jobs: Sequence[NewJob], *, dispatched: bool) -> list[str]:
        """One script call per ``ADD_MANY_BATCH`` jobs (``lua/job_add_many.lua``), each sent as
        soon as it is written, so Redis adds one while the next is written
        (``LuaScript.each``): what the jobs of a call share (name, queue, enqueued_at,
        max_attempts, tenant) is sent once, as a head each job names, and each job as 8
        strings of one flat JSON array; the script writes each record, then every index in one
        ``ZADD`` and every count in one ``HINCRBY`` for the call. Every instant is read before
        the first call is sent: a naive one adds nothing."""
        instants: dict[datetime, str] = {}
        for job in jobs:
            for instant, name in ((job.enqueued_at, "enqueued_at"), (job.run_at, "run_at")):
                if instant not in instants:
                    instants[instant] = str(_ms(instant, name))
        keys = [self._prefix + "list:all"]
        calls = (
            (
                keys,
                [
                    self._prefix,
                    *self._add_many_args(
                        jobs[start : start + ADD_MANY_BATCH], dispatched, instants
                    ),
                ],
            )
            for start in range(0, len(jobs), ADD_MANY_BATCH)
        )
        with unavailable_as(StoreUnavailableError, f"add {len(jobs)} jobs"):
            replies = self._add_many.each(calls)
        return [job_id for reply in replies for job_id in json.loads(reply)]

    def _add_many_args(
        self, jobs: Sequence[NewJob], dispatched: bool, instants: Mapping[datetime, str]
    ) -> tuple[str, str]:
        """The rows and heads of one ``job_add_many.lua`` call, as JSON (see the script);
        ``instants`` holds each instant of the jobs in epoch ms."""
        heads: dict[tuple[str, str, datetime, int, str | None], int] = {}
        by_texts = _EnqueuedByTexts()
        rows: list[object] = []
        key_prefix = self._prefix + "key:"
        for job in jobs:
            tenant = job.enqueued_by.tenant_id
            head_of = (job.name, job.queue, job.enqueued_at, job.max_attempts, tenant)
            head = heads.get(head_of)
            if head is None:
                head = heads[head_of] = len(heads) + 1
            key = job.idempotency_key
            rows += (
                job.id,
                head,
                _dump(job.payload),
                instants[job.run_at],
                by_texts.of(job.enqueued_by),
                key or "",
                "" if key is None else key_prefix + scoped_idempotency_key(tenant, key),
                "1" if dispatched_now(job, dispatched) else "0",
            )
        head_rows = [
            [name, queue, instants[enqueued_at], str(max_attempts), tenant or ""]
            for name, queue, enqueued_at, max_attempts, tenant in heads
        ]
        return _dump_text(rows), _dump_text(head_rows)

    def store_time(self) -> datetime:
        """Redis's ``TIME``, aware UTC, to the microsecond."""
        with unavailable_as(StoreUnavailableError, "read the time of Redis"):
            seconds, microseconds = self._client.time()
        return datetime.fromtimestamp(seconds, UTC) + timedelta(microseconds=microseconds)

    def claim_job(
        self,
        job_id: str,
        *,
        now: datetime,
        lease_ms: int,
        token: str | None = None,
        worker: str | None = None,
    ) -> ClaimedJob | None:
        at = _ms(now, "now")
        expires = at + _positive(lease_ms)
        args: list[str | int] = [
            self._prefix,
            job_id,
            at,
            token or _token(),
            expires,
            _named(worker),
        ]
        with unavailable_as(StoreUnavailableError, f"claim the job {job_id!r}"):
            reply = self._claim(keys=[self._job_key(job_id)], args=args)
        return None if reply is None else _claimed(reply)

    def claim_due(
        self,
        queues: Sequence[str],
        *,
        now: datetime,
        lease_ms: int,
        limit: int,
        token: str | None = None,
        worker: str | None = None,
    ) -> list[ClaimedJob]:
        if not queues or limit <= 0:
            return []
        at = _ms(now, "now")
        expires = at + _positive(lease_ms)
        stem = token or _token()
        keys = [f"{self._prefix}claimed:{stem}"]
        keys += [f"{self._prefix}queue:{queue}" for queue in queues]
        args: list[str | int] = [self._prefix, at, expires, limit, stem, lease_ms, _named(worker)]
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

    def list_page(
        self, where: JobFilter, *, now: datetime, limit: int = 50, cursor: str | None = None
    ) -> JobPage:
        check_listing(where, now, limit)
        start = "+" if cursor is None else "(" + _member_of(cursor)
        status = None if where.state is None else _STATUS_OF_STATE[where.state]
        keys = [self._prefix + "list:all"]
        if status is not None:
            keys.append(f"{self._prefix}list:status:{status.value}")
        if where.name is not None:
            keys.append(f"{self._prefix}list:name:{where.name}")
        if where.tenant_id is not None:
            keys.append(f"{self._prefix}list:tenant:{where.tenant_id}")
        args: list[str | int] = [
            self._prefix,
            start,
            _ms_or_empty(where.enqueued_since, "enqueued_since"),
            limit + 1,  # one more than the page: whether there is a next page
            LIST_READ,
            _ms(now, "now"),
            "" if status is None else status.value,
            "" if where.state is None else _DUE_OF_STATE.get(where.state, ""),
            _equal(where.name),
            _equal(where.queue),
            _reach(where.tenant_id),
            _ms_or_empty(where.finished_since, "finished_since"),
        ]
        found: list[tuple[str, StoredJob]] = []
        with unavailable_as(StoreUnavailableError, "list the jobs"):
            while True:
                args[3] = limit + 1 - len(found)
                flat, last, over = self._list(keys=keys, args=args)
                found += [
                    (_text(flat[i]), _job(_pairs(flat[i + 1]))) for i in range(0, len(flat), 2)
                ]
                if len(found) > limit or int(over):
                    break
                args[1] = "(" + _text(last)
        if len(found) <= limit:
            return JobPage([job for _, job in found], None)
        page = found[:limit]
        return JobPage([job for _, job in page], _cursor(page[-1][0]))

    def purge_finished(
        self,
        *,
        before: datetime,
        statuses: Collection[JobStatus] = FINISHED_STATUSES,
        limit: int | None = None,
    ) -> int:
        at = _ms(before, "before")
        chosen = purged_statuses(statuses, limit)
        indexes = [f"{self._prefix}finished:{status.value}" for status in chosen]
        if not indexes:
            return 0
        purged = 0
        with unavailable_as(StoreUnavailableError, "purge the finished jobs"):
            while limit is None or purged < limit:
                batch = PURGE_BATCH if limit is None else min(PURGE_BATCH, limit - purged)
                keys = [f"{self._prefix}purged:{_token()}", *indexes]
                deleted, read = self._purge(
                    keys=keys, args=[self._prefix, at, batch, TAKEN_KEPT_MS]
                )
                purged += int(deleted)
                if int(read) < batch:
                    break
        return purged

    def stats(self) -> JobStats:
        with unavailable_as(StoreUnavailableError, "count the jobs"):
            by_queue, by_name = self._stats(keys=[self._prefix + "stats"], args=[self._prefix])
        return JobStats(_counts(_pairs(by_queue)), by_name=_counts(_pairs(by_name)))

    def reindex(self) -> int:
        """Adopt every job an earlier version wrote (see the module's docstring); how many.

        In batches of ``REINDEX_BATCH``, each one script call; safe to run again or beside the
        workers of this version (a job is adopted once), never beside an earlier version's.

        Raises:
            ConnectionError: Redis cannot be asked (``StoreUnavailableError``).
        """
        adopted = 0
        with unavailable_as(StoreUnavailableError, "reindex the jobs"):
            while True:
                done, left = self._reindex(
                    keys=[self._prefix + "enqueued"], args=[self._prefix, REINDEX_BATCH]
                )
                adopted += int(done)
                if not int(left):
                    return adopted

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
        taken = json.loads(reply)
        dispatches = (
            Dispatch(taken[i], taken[i + 1], taken[i + 2], int(taken[i + 3]))
            for i in range(0, len(taken), 4)
        )
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
    return _equal(tenant_id)


def _equal(value: str | None) -> str:
    """A listing's filter of a field: ``*`` for any value, ``=<value>`` for that one."""
    return "*" if value is None else f"={value}"


def _named(worker: str | None) -> str:
    """A claim's worker: ``''`` for none named, ``=<worker>`` for one (even the empty text)."""
    return "" if worker is None else f"={worker}"


def _cursor(member: str) -> str:
    """A page's cursor: the listing member of its last job, in URL-safe base64 (a shell word)."""
    return base64.urlsafe_b64encode(member.encode()).decode().rstrip("=")


def _member_of(cursor: str) -> str:
    try:
        member = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        member = ""
    if not _MEMBER.fullmatch(member):
        raise ValueError(f"not a cursor of a RedisJobStore page: {cursor!r}")
    return member


def _counts(fields: Mapping[str, str]) -> dict[str, dict[JobStatus, int]]:
    """``{<queue or name>: {status: count}}`` of a hash of ``<queue or name>|<status>`` counts."""
    counts: dict[str, dict[JobStatus, int]] = {}
    for field, value in fields.items():
        of, _, status = field.rpartition("|")
        if int(value) > 0:
            counts.setdefault(of, {})[JobStatus(status)] = int(value)
    return counts


def _ms(value: datetime, name: str = "instant") -> int:
    return epoch_ms(to_utc(value, name))


def _ms_or_empty(value: datetime | None, name: str) -> int | str:
    return "" if value is None else _ms(value, name)


def _positive(lease_ms: int) -> int:
    if lease_ms <= 0:
        raise ValueError(f"a lease lasts a positive number of ms, not {lease_ms}")
    return lease_ms


def _dump(value: JsonValue) -> str:
    return _JSON.encode(value)


_JSON = json.JSONEncoder(separators=(",", ":"))
"""What ``json.dumps(value, separators=(",", ":"))`` writes, without an encoder made per call."""
_TEXT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def _dump_text(value: object) -> str:
    """JSON of strings as they are (UTF-8 on the wire), for a script's argument."""
    return _TEXT.encode(value)


class _EnqueuedByTexts:
    """``enqueued_by`` as JSON, for the jobs of a batch: written once per work, then per job
    only its correlation id (a job enqueued outside any work has its own id as one)."""

    def __init__(self) -> None:
        self._rests: dict[tuple[str | None, str | None, str | None], str] = {}

    def of(self, by: EnqueuedBy) -> str:
        shared = (by.actor, by.tenant_id, by.traceparent)
        rest = self._rests.get(shared)
        if rest is None:
            written = _dump(_enqueued_by_as_dict(EnqueuedBy(None, *shared)))
            rest = self._rests[shared] = written[len(_CORRELATION_ID) + len("null") :]
        correlation_id = by.correlation_id
        return (
            _CORRELATION_ID
            + ("null" if correlation_id is None else _json_string(correlation_id))
            + rest
        )


_CORRELATION_ID = '{"correlation_id":'
"""How ``_enqueued_by_as_dict``'s JSON begins: its first key."""
_json_string = json.encoder.encode_basestring_ascii
"""A str as ``json.dumps`` writes it (ASCII, the rest escaped)."""


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
        history=tuple(_attempt(attempt) for attempt in values.get("history", ())),
    )


def _attempt(kept: Mapping[str, Any]) -> AttemptRecord:
    """An attempt of a job's ``history`` field (``begin_attempt`` in ``lua/job_lib.lua``)."""
    ended_at = kept.get("ended_at")
    return AttemptRecord(
        number=int(kept["number"]),
        started_at=from_epoch_ms(int(kept["started_at"])),
        worker=kept.get("worker"),
        outcome=AttemptState(kept["outcome"]),
        ended_at=None if ended_at is None else from_epoch_ms(int(ended_at)),
        error_code=kept.get("error_code"),
        error_type=kept.get("error_type"),
    )


_JSON_FIELDS = ("payload", "enqueued_by", "progress", "checkpoint", "history")
"""The fields of a job's hash that hold JSON (``claim`` in ``lua/job_lib.lua`` splices them)."""
