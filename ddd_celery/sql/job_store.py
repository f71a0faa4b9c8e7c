"""``SqlJobStore``: the background jobs' store on a table, and in a unit of work the outbox.

Table ``<prefix>jobs``, one row per job (the columns are those of ``StoredJob``, instants in
microseconds; the DDL is in ``docs/sql.md``). Each method is one transaction, and most one
statement: a claim is ``UPDATE ... WHERE status IN ('queued', 'failed') AND run_at <= :now
RETURNING *``, so two workers never both win it; ``claim_due``, ``take_due`` and
``expire_leases`` pick their rows with ``FOR UPDATE SKIP LOCKED`` on PostgreSQL, so pollers and
relays never wait on each other's rows (SQLite serialises writers instead).

Every statement that changes a job is safe to send twice, so a statement whose reply was lost
(the connection dropped after the COMMIT was sent) is sent again, bounded (``Connector.run``),
and a short drop gives the answer of one call. ``lease_token`` is the token of the job's last
lease, kept once it ended: a claim carries the caller's token, so a claim sent again answers the
same lease while it runs and never starts another attempt; ``lease_ended`` says which report
ended it (``complete``, ``fail``, ``release``; NULL while it runs, or when it expired or was
cancelled), so that report sent again answers as the first did and any other is refused.
``relay_token`` names the ``take_due`` call that last published the job, so that call sent again
(the same ``now``, as a lost reply's is) answers the same dispatches, read on the relay's index.

The relay. ``relay_at`` is the first instant the relay publishes the job (again): its ``run_at``
when it is not dispatched (delayed, retried, released, retried when dead), ``redispatch_after_ms``
after a relay's publish, then twice, four and eight times that for each further re-send
(``rules.redispatch_wait_ms``, ``redispatches`` counting them), so a backlog no worker claims is
not published at every pass. A job whose wake-up ``add`` published has no ``relay_at``: the
relay publishes it ``redispatch_after_ms`` after its ``dispatched_at``. A claim clears both, so
``take_due`` reads on the index of ``(relay_at, dispatched_at)`` the jobs to publish only.

The outbox. Built with ``unit_of_work=``, the store writes on the connection of the unit of
work in progress (``transactional``): ``add`` inside a use case commits with its data or not at
all, and ``StoredJobQueue`` publishes the wake-up after the commit. Whether that publish
happened is never written (a write per job to say so would double the cost of every enqueue):
the row's ``relay_at`` is ``outbox_grace_ms`` after it was added, and the claim that follows a
publish clears it. A row still claimable at that instant is published by the relay's
``take_due``, once; then the relay's ``redispatch_after_ms`` applies as to any job. So a process
killed between its commit and its publish delays its jobs by the grace plus one relay period
(about 1.5 s by default), and a healthy job costs no extra write; a job that waits in the
broker longer than the grace is published twice at most, and runs once (the claim decides).
Outside a unit of work, every method is a short transaction of the store's own.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Connection,
    Engine,
    Row,
    Text,
    and_,
    bindparam,
    case,
    cast,
    delete,
    func,
    literal,
    or_,
    select,
    update,
)

from ddd_celery.background.errors import JOB_INTERRUPTED, InvalidEnqueueError, JobInterruptedError
from ddd_celery.background.rules import redispatch_wait_ms, tenant_filter, tenant_key_of
from ddd_celery.background.store import (
    CLAIMABLE,
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
from ddd_celery.sql.connection import Connector, from_micros, to_micros
from ddd_celery.sql.dialects import upsert
from ddd_celery.sql.errors import StoreUnavailableError, UnstorableValueError
from ddd_celery.sql.tables import DEFAULT_PREFIX, tables
from ddd_celery.sql.unit_of_work import SqlAlchemyUnitOfWork

DEFAULT_OUTBOX_GRACE_MS = 500
"""How long a job added in a unit of work may wait for the claim its publish after commit
brings, before the relay publishes it: short, since a lost publish is a killed process."""
PURGE_BATCH = 1_000
"""Rows one purge statement deletes at most: a longer one would hold its locks longer."""

_CLAIMABLE = sorted(status.value for status in CLAIMABLE)
_FINISHED = sorted(status.value for status in JobStatus if status.finished)
_RUNNING = JobStatus.RUNNING.value
_ENDING = ("complete", "fail", "release")
"""The reports that end a lease, as ``lease_ended`` names them."""


class SqlJobStore(JobStore):
    """Every background job a row of ``<prefix>jobs``, on PostgreSQL or SQLite.

    ``engine`` is the database; ``unit_of_work`` (optional) the ``SqlAlchemyUnitOfWork`` whose
    Session connection the store writes on while one of its units is in progress (the engine
    and the unit of work's sessions must reach the same database). ``outbox_grace_ms`` is the
    outbox's wait described above. Time comes from the caller (``now``); instants are kept to
    the microsecond. Raises ``StoreUnavailableError`` when the database cannot be asked (after
    the bounded sends again), ``LostLeaseError`` for a report whose lease is no longer the
    job's, ``InvalidEnqueueError`` for a job the database cannot keep (a NUL character on
    PostgreSQL, a key past what its index holds), naming the field, never the value.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        unit_of_work: SqlAlchemyUnitOfWork | None = None,
        prefix: str = DEFAULT_PREFIX,
        outbox_grace_ms: int = DEFAULT_OUTBOX_GRACE_MS,
    ) -> None:
        if isinstance(outbox_grace_ms, bool) or outbox_grace_ms <= 0:
            raise ValueError(f"outbox_grace_ms is a positive number of ms, not {outbox_grace_ms}")
        self._connector = Connector(
            engine, unavailable=StoreUnavailableError, unit_of_work=unit_of_work
        )
        self._table = tables(prefix).jobs
        self._grace_us = outbox_grace_ms * 1000
        self._postgresql = engine.dialect.name == "postgresql"
        self.transactional = unit_of_work is not None
        # the worker's statements, built once: building and keying one costs more CPU than
        # sending it (about 0.2 ms a claim)
        table = self._table
        self._insert = upsert(engine, table).on_conflict_do_nothing().returning(table.c.id)
        self._keyed = select(table.c.id).where(
            table.c.tenant == bindparam("tenant"), table.c.idempotency_key == bindparam("key")
        )
        self._claim_one = _claim_one(table)
        self._reports: dict[tuple[str, tuple[str, ...]], tuple[Any, Any]] = {}

    def store_time(self) -> datetime | None:
        """PostgreSQL's ``clock_timestamp()``; None on SQLite, whose clock is the caller's."""
        if not self._postgresql:
            return None
        with self._connector.transaction("read the database's clock", single=True) as connection:
            instant = connection.scalar(select(func.clock_timestamp()))
        assert isinstance(instant, datetime)
        return instant.astimezone(UTC)

    def add(self, job: NewJob, *, dispatched: bool) -> str:
        enqueued_at = to_micros(job.enqueued_at, "enqueued_at")
        run_at = to_micros(job.run_at, "run_at")
        tenant = tenant_key_of(job.enqueued_by)
        payload = _dump(job.payload)

        def work(connection: Connection, again: bool) -> str:
            outbox = dispatched and self._connector.in_unit_of_work()
            if outbox:
                dispatched_at, relay_at = None, enqueued_at + self._grace_us
            elif dispatched:
                dispatched_at, relay_at = enqueued_at, None
            else:
                dispatched_at, relay_at = None, run_at
            row = {
                "id": job.id,
                "name": job.name,
                "queue": job.queue,
                "status": JobStatus.QUEUED.value,
                "payload": payload,
                "enqueued_at": enqueued_at,
                "run_at": run_at,
                "attempts": 0,
                "max_attempts": job.max_attempts,
                "correlation_id": job.enqueued_by.correlation_id,
                "actor": job.enqueued_by.actor,
                "tenant_id": job.enqueued_by.tenant_id,
                "traceparent": job.enqueued_by.traceparent,
                "tenant": tenant,
                "idempotency_key": job.idempotency_key,
                "dispatched_at": dispatched_at,
                "relay_at": relay_at,
                "redispatches": 0,
            }
            if connection.execute(self._insert, row).first() is not None:
                return job.id
            if job.idempotency_key is None:
                return job.id
            key = {"tenant": tenant, "key": job.idempotency_key}
            earlier = connection.scalar(self._keyed, key)
            return job.id if earlier is None else str(earlier)

        try:
            return self._connector.run(f"add the job {_named(job.id)}", work)
        except UnstorableValueError as error:
            field = self._unstorable_field(job)
            raise InvalidEnqueueError(
                f"the database cannot keep its {field} (a NUL character, a text that is not "
                "UTF-8, or longer than an index holds)",
                job=job.name,
                field=field,
            ) from error

    def claim_job(
        self, job_id: str, *, now: datetime, lease_ms: int, token: str | None = None
    ) -> ClaimedJob | None:
        at = to_micros(now, "now")
        expires = at + _positive(lease_ms) * 1000
        token = uuid.uuid4().hex if token is None else token
        if not self._storable(job_id, token):
            return None
        values = {"job_id": job_id, "at": at, "token": token, "expires": expires}

        def work(connection: Connection, again: bool) -> Row[Any] | None:
            return connection.execute(self._claim_one, values).first()

        row = self._connector.run(f"claim the job {_named(job_id)}", work)
        return None if row is None else _claimed(row)

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
        at = to_micros(now, "now")
        expires = at + _positive(lease_ms) * 1000
        given = token is not None
        stem = f"{uuid.uuid4().hex if token is None else token}:"
        table = self._table
        picked = (
            select(table.c.id, table.c.run_at)
            .where(
                table.c.queue.in_(list(queues)),
                table.c.status.in_(_CLAIMABLE),
                table.c.run_at <= at,
            )
            .order_by(table.c.run_at, table.c.id)
            .limit(limit)
            .with_for_update(skip_locked=True)
            .cte("picked")
            .prefix_with("MATERIALIZED")
        )
        order = func.row_number().over(order_by=(picked.c.run_at, picked.c.id)) - 1
        numbered = select(picked.c.id, order.label("n")).cte("numbered")
        lease_token = literal(stem, Text) + cast(numbered.c.n, Text)
        claim = (
            update(table)
            .where(table.c.id == numbered.c.id, table.c.status.in_(_CLAIMABLE))
            .values(**_claim_values(table, lease_token, expires))
            .returning(*table.c)
        )
        again_claim = (
            update(table)
            .where(
                table.c.queue.in_(list(queues)),
                table.c.status == _RUNNING,
                func.substr(table.c.lease_token, 1, len(stem)) == stem,
            )
            .values(lease_expires_at=expires)
            .returning(*table.c)
        )

        def work(connection: Connection, again: bool) -> list[Row[Any]]:
            if given or again:
                claimed = connection.execute(again_claim).all()
                if claimed:
                    return list(claimed)
            return list(connection.execute(claim).all())

        rows = self._connector.run(f"claim the due jobs of {list(queues)}", work)
        rows.sort(key=lambda row: int(row.lease_token[len(stem) :]))
        return [_claimed(row) for row in rows]

    def heartbeat(self, lease: JobLease, *, now: datetime, lease_ms: int) -> JobLease:
        expires = to_micros(now, "now") + _positive(lease_ms) * 1000
        self._report(lease, "extend", {"lease_expires_at": expires})
        return JobLease(lease.job_id, lease.attempt, lease.token, from_micros(expires))

    def update(
        self,
        lease: JobLease,
        *,
        progress: JsonValue = None,
        checkpoint: JsonValue = None,
        set_progress: bool = False,
        set_checkpoint: bool = False,
    ) -> None:
        values: dict[str, Any] = {}
        if set_progress:
            values["progress"] = _dump(progress)
        if set_checkpoint:
            values["checkpoint"] = _dump(checkpoint)
        if not values:
            values["lease_token"] = lease.token  # changes nothing, still checks the lease
        self._report(lease, "update", values)

    def complete(self, lease: JobLease, *, now: datetime) -> None:
        at = to_micros(now, "now")
        no_error = {"last_error_code": None, "last_error_type": None}  # none of an earlier attempt
        self._report(lease, "complete", {**_finished(JobStatus.SUCCEEDED, at), **no_error})

    def fail(
        self,
        lease: JobLease,
        *,
        now: datetime,
        error_code: str,
        error_type: str,
        retry_at: datetime | None,
    ) -> None:
        at = to_micros(now, "now")
        errors = {"last_error_code": error_code, "last_error_type": error_type}
        if retry_at is None:
            values = {**_finished(JobStatus.DEAD, at), **errors}
        else:
            retry = to_micros(retry_at, "retry_at")
            values = {**_claimable(JobStatus.FAILED, retry), **errors}
        self._report(lease, "fail", values)

    def release(self, lease: JobLease, *, now: datetime) -> None:
        at = to_micros(now, "now")
        values = {**_claimable(JobStatus.QUEUED, at), "attempts": self._table.c.attempts - 1}
        self._report(lease, "release", values)

    def cancel(self, job_id: str, *, tenant_id: str | None, now: datetime) -> bool:
        at = to_micros(now, "now")
        reach = self._reach(tenant_id)
        if not self._storable(job_id, tenant_id):
            return False
        table = self._table
        cancellable = [*_CLAIMABLE, _RUNNING]
        cancel = (
            update(table)
            .where(table.c.id == job_id, table.c.status.in_(cancellable), reach)
            .values(**_finished(JobStatus.CANCELLED, at), lease_ended=None)
            .returning(table.c.id)
        )
        cancelled = select(table.c.id).where(
            table.c.id == job_id, table.c.status == JobStatus.CANCELLED.value, reach
        )

        def work(connection: Connection, again: bool) -> bool:
            if connection.execute(cancel).first() is not None:
                return True
            return connection.execute(cancelled).first() is not None  # a cancel sent again

        return self._connector.run(f"cancel the job {_named(job_id)}", work)

    def find(self, job_id: str, *, tenant_id: str | None) -> StoredJob | None:
        reach = self._reach(tenant_id)
        if not self._storable(job_id, tenant_id):
            return None
        table = self._table
        query = select(table).where(table.c.id == job_id, reach)
        row = self._connector.run(
            f"find the job {_named(job_id)}",
            lambda connection, again: connection.execute(query).first(),
        )
        return None if row is None else _job(row)

    def retry_dead(self, job_id: str, *, tenant_id: str | None, now: datetime) -> bool:
        at = to_micros(now, "now")
        reach = self._reach(tenant_id)
        if not self._storable(job_id, tenant_id):
            return False
        table = self._table
        retry = (
            update(table)
            .where(table.c.id == job_id, table.c.status == JobStatus.DEAD.value, reach)
            .values(**_claimable(JobStatus.QUEUED, at), attempts=0, finished_at=None)
            .values(lease_ended=None)  # queued anew: no report of the attempt that died is one
            .returning(table.c.id)
        )
        retried = select(table.c.id).where(  # what this call left, if an earlier send of it
            table.c.id == job_id,  # committed: queued at ``now``, no attempt, the error kept
            table.c.status == JobStatus.QUEUED.value,
            table.c.attempts == 0,
            table.c.run_at == at,
            table.c.last_error_code.is_not(None),
            reach,
        )

        def work(connection: Connection, again: bool) -> bool:
            if connection.execute(retry).first() is not None:
                return True
            return again and connection.execute(retried).first() is not None

        return self._connector.run(f"retry the dead job {_named(job_id)}", work)

    def list_jobs(
        self, *, status: JobStatus | None = None, tenant_id: str | None = None, limit: int = 100
    ) -> list[StoredJob]:
        reach = self._reach(tenant_id)
        if limit <= 0 or not self._storable(tenant_id):
            return []
        table = self._table
        query = select(table).where(reach)
        if status is not None:
            query = query.where(table.c.status == JobStatus(status).value)
        query = query.order_by(table.c.enqueued_at.desc(), table.c.id.desc()).limit(limit)
        rows = self._connector.run(
            "list the jobs", lambda connection, again: connection.execute(query).all()
        )
        return [_job(row) for row in rows]

    def purge_finished(self, *, before: datetime) -> int:
        at = to_micros(before, "before")
        table = self._table
        batch = (
            select(table.c.id)
            .where(table.c.status.in_(_FINISHED), table.c.finished_at < at)
            .limit(PURGE_BATCH)
        )
        purged = 0
        while True:
            with self._connector.transaction("purge the finished jobs", single=True) as connection:
                deleted = connection.execute(
                    delete(table).where(table.c.id.in_(batch.scalar_subquery()))
                ).rowcount
            purged += deleted
            if deleted < PURGE_BATCH:
                return purged

    def stats(self) -> JobStats:
        table = self._table
        query = select(table.c.queue, table.c.status, func.count()).group_by(
            table.c.queue, table.c.status
        )
        rows = self._connector.run(
            "count the jobs", lambda connection, again: connection.execute(query).all()
        )
        counts: dict[str, dict[JobStatus, int]] = {}
        for queue, status, count in rows:
            counts.setdefault(queue, {})[JobStatus(status)] = int(count)
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
        at = to_micros(now, "now")
        given = token is not None
        token = uuid.uuid4().hex if token is None else token
        table = self._table
        due = (
            select(table.c.id)
            .where(
                table.c.status.in_(_CLAIMABLE),
                table.c.run_at <= at,
                or_(
                    table.c.relay_at <= at,
                    and_(
                        table.c.relay_at.is_(None),
                        table.c.dispatched_at < at - redispatch_after_ms * 1000,
                    ),
                ),
            )
            .order_by(table.c.run_at, table.c.id)
            .limit(limit)
            .with_for_update(skip_locked=True)
            .cte()
            .prefix_with("MATERIALIZED")
        )
        resends = case(
            (table.c.dispatched_at.is_(None), table.c.redispatches),
            else_=table.c.redispatches + 1,
        )
        # strictly after its wait (+ 1 µs); BIGINT: a bound int is cast to INTEGER, too small
        waits_us = [redispatch_wait_ms(redispatch_after_ms, n) * 1000 + 1 for n in range(4)]
        waits = [literal(wait_us, BigInteger) for wait_us in waits_us]
        wait = case(
            (resends >= 3, waits[3]),
            (resends == 2, waits[2]),
            (resends == 1, waits[1]),
            else_=waits[0],
        )
        take = (
            update(table)
            .where(table.c.id.in_(select(due.c.id)))
            .values(
                dispatched_at=at,
                relay_at=literal(at, BigInteger) + wait,
                redispatches=resends,
                relay_token=token,
            )
            .returning(table.c.id, table.c.name, table.c.queue, table.c.run_at)
        )
        taken = select(table.c.id, table.c.name, table.c.queue, table.c.run_at).where(
            # what a send of this call marked, read on the relay's index: one of its four
            # relay_at, its dispatched_at, its token
            table.c.relay_at.in_([at + wait_us for wait_us in waits_us]),
            table.c.dispatched_at == at,
            table.c.relay_token == token,
        )

        def work(connection: Connection, again: bool) -> list[Row[Any, Any, Any, Any]]:
            if given or again:
                answered = list(connection.execute(taken).all())
                if answered:
                    return answered
            return list(connection.execute(take).all())

        rows = self._connector.run("take the due jobs", work)
        rows.sort(key=lambda row: (row.run_at, row.id))
        return [Dispatch(row.id, row.name, row.queue) for row in rows]

    def expire_leases(self, *, now: datetime, limit: int) -> list[StoredJob]:
        if limit <= 0:
            return []
        at = to_micros(now, "now")
        table = self._table
        expired = (
            select(table.c.id)
            .where(table.c.status == _RUNNING, table.c.lease_expires_at < at)
            .order_by(table.c.lease_expires_at, table.c.id)
            .limit(limit)
            .with_for_update(skip_locked=True)
            .cte()
            .prefix_with("MATERIALIZED")
        )
        exhausted = table.c.attempts >= table.c.max_attempts
        expire = (
            update(table)
            .where(table.c.id.in_(select(expired.c.id)), table.c.status == _RUNNING)
            .values(
                status=case((exhausted, JobStatus.DEAD.value), else_=JobStatus.FAILED.value),
                run_at=case((exhausted, table.c.run_at), else_=at),
                finished_at=case((exhausted, at), else_=None),
                last_error_code=JOB_INTERRUPTED,
                last_error_type=JobInterruptedError.__name__,
                lease_expires_at=None,
                dispatched_at=None,
                relay_at=case((exhausted, None), else_=at),
                redispatches=0,
            )
            .returning(*table.c)
        )
        handed_back = select(table).where(  # what an earlier send of this call left
            or_(
                and_(table.c.relay_at == at, table.c.status == JobStatus.FAILED.value),
                and_(table.c.finished_at == at, table.c.status == JobStatus.DEAD.value),
            ),
            table.c.last_error_code == JOB_INTERRUPTED,
            table.c.lease_ended.is_(None),  # not a report's: the lease ran out
        )

        def work(connection: Connection, again: bool) -> list[Row[Any]]:
            earlier = list(connection.execute(handed_back).all()) if again else []
            return earlier + list(connection.execute(expire).all())

        rows = self._connector.run("expire the leases", work)
        return [_job(row) for row in rows]

    def _report(self, lease: JobLease, doing: str, values: dict[str, Any]) -> None:
        """Apply ``values`` to the job if ``lease`` is still its own, else ``LostLeaseError``.

        A report that ends the lease (``_ENDING``) sent again answers as the first did.
        """
        ends = doing in _ENDING
        shape = (doing, tuple(sorted(values)))
        if shape not in self._reports:
            self._reports[shape] = _report_statements(self._table, doing, values, ends)
        report, made = self._reports[shape]
        given = {f"set_{name}": value for name, value in values.items() if _bound(value)}
        ids = {"job_id": lease.job_id, "token": lease.token}

        def work(connection: Connection, again: bool) -> bool:
            if connection.execute(report, {**ids, **given}).first() is not None:
                return True
            return ends and connection.execute(made, ids).first() is not None

        held = self._storable(lease.job_id, lease.token) and self._connector.run(
            f"{doing} the job {_named(lease.job_id)}", work
        )
        if not held:
            raise LostLeaseError(
                f"cannot {doing} job {_named(lease.job_id)}: the lease of attempt "
                f"{lease.attempt} is no longer the job's (it expired and was handed back, or "
                "the job was cancelled)"
            )

    def _reach(self, tenant_id: str | None) -> Any:
        """Every job when ``tenant_id`` is None, else that tenant's only (never ``""``)."""
        if tenant_filter(tenant_id) is None:
            return literal(True)
        return self._table.c.tenant_id == tenant_id

    def _storable(self, *texts: str | None) -> bool:
        """Whether the database can hold each of ``texts``: one it cannot names no job, so a
        lookup by it finds none without asking."""
        return all(_keepable(text, self._postgresql) for text in texts if text)

    def _unstorable_field(self, job: NewJob) -> str:
        """The field of ``job`` the database could not keep: one it cannot hold as text, else
        the longest of the indexed ones (a key past what an index holds)."""
        texts = {
            "id": job.id,
            "name": job.name,
            "queue": job.queue,
            "tenant_id": job.enqueued_by.tenant_id,
            "idempotency_key": job.idempotency_key,
            "actor": job.enqueued_by.actor,
            "correlation_id": job.enqueued_by.correlation_id,
            "traceparent": job.enqueued_by.traceparent,
        }
        for field, text in texts.items():
            if text and not _keepable(text, self._postgresql):
                return field
        indexed = ("idempotency_key", "tenant_id", "id")
        return max(indexed, key=lambda field: len((texts[field] or "").encode()))


def _keepable(text: str, postgresql: bool) -> bool:
    """UTF-8 (no lone surrogate), and no NUL character on PostgreSQL."""
    if postgresql and "\x00" in text:
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _named(job_id: str) -> str:
    """A job id as a message quotes it: whole when short (ids are generated), else its start."""
    return repr(job_id) if len(job_id) <= _QUOTED else f"{job_id[:_QUOTED]!r}..."


_QUOTED = 100


def _claim_one(table: Any) -> Any:
    """``claim_job``: the job claimable and due, or running under the same token (a claim
    sent again); parameters ``job_id``, ``at``, ``token`` and ``expires``."""
    token = bindparam("token", type_=Text)
    claimable = and_(
        table.c.status.in_(_CLAIMABLE),
        table.c.run_at <= bindparam("at", type_=BigInteger),
        table.c.lease_token.is_distinct_from(token),  # a token names one attempt only
    )
    ours = and_(table.c.status == _RUNNING, table.c.lease_token == token)
    return (
        update(table)
        .where(table.c.id == bindparam("job_id", type_=Text), or_(claimable, ours))
        .values(**_claim_values(table, token, bindparam("expires", type_=BigInteger)))
        .returning(*table.c)
    )


def _report_statements(table: Any, doing: str, values: dict[str, Any], ends: bool) -> Any:
    """A report's update (the job running under ``token``) and, for one that ends the lease,
    the look for the same report made before; parameters ``job_id``, ``token``, ``set_*``."""
    token = bindparam("token", type_=Text)
    job_id = bindparam("job_id", type_=Text)
    sets = {
        name: bindparam(f"set_{name}", type_=table.c[name].type) if _bound(value) else value
        for name, value in values.items()
    }
    report = (
        update(table)
        .where(table.c.id == job_id, table.c.status == _RUNNING, table.c.lease_token == token)
        .values(**sets, **({"lease_ended": doing} if ends else {}))
        .returning(table.c.id)
    )
    made = select(table.c.id).where(
        table.c.id == job_id, table.c.lease_token == token, table.c.lease_ended == doing
    )
    return report, made


def _bound(value: Any) -> bool:
    """Whether a value of a report is a parameter (a SQL expression is part of the statement)."""
    return not isinstance(value, ColumnElement)


def _claim_values(table: Any, token: Any, expires: Any) -> dict[str, Any]:
    """A claim, or the same claim sent again by its attempt (not counted again)."""
    return {
        "status": _RUNNING,
        "attempts": case(
            (table.c.status == _RUNNING, table.c.attempts), else_=table.c.attempts + 1
        ),
        "lease_token": token,
        "lease_ended": None,
        "lease_expires_at": expires,
        "dispatched_at": None,
        "relay_at": None,
        "redispatches": 0,
    }


def _finished(status: JobStatus, at: int) -> dict[str, Any]:
    """Finished at ``at``; ``lease_token`` stays the last attempt's, if any."""
    return {
        "status": status.value,
        "finished_at": at,
        "lease_expires_at": None,
        "dispatched_at": None,
        "relay_at": None,
        "redispatches": 0,
    }


def _claimable(status: JobStatus, run_at: int) -> dict[str, Any]:
    """Claimable from ``run_at``, waiting for the relay to publish it."""
    return {
        "status": status.value,
        "run_at": run_at,
        "lease_expires_at": None,
        "dispatched_at": None,
        "relay_at": run_at,
        "redispatches": 0,
    }


def _positive(lease_ms: int) -> int:
    if lease_ms <= 0:
        raise ValueError(f"a lease lasts a positive number of ms, not {lease_ms}")
    return lease_ms


def _dump(value: JsonValue) -> str:
    return json.dumps(value, separators=(",", ":"))


def _json(value: str | None) -> JsonValue:
    return None if value is None else json.loads(value)


def _instant(value: int | None) -> datetime | None:
    return None if value is None else from_micros(value)


def _claimed(row: Row[Any]) -> ClaimedJob:
    job = _job(row)
    expires_at = from_micros(row.lease_expires_at)
    return ClaimedJob(job, JobLease(job.id, job.attempts, row.lease_token, expires_at))


def _job(row: Row[Any]) -> StoredJob:
    return StoredJob(
        id=row.id,
        name=row.name,
        queue=row.queue,
        status=JobStatus(row.status),
        payload=json.loads(row.payload),
        enqueued_at=from_micros(row.enqueued_at),
        run_at=from_micros(row.run_at),
        attempts=row.attempts,
        max_attempts=row.max_attempts,
        enqueued_by=EnqueuedBy(
            correlation_id=row.correlation_id,
            actor=row.actor,
            tenant_id=row.tenant_id,
            traceparent=row.traceparent,
        ),
        idempotency_key=row.idempotency_key,
        progress=_json(row.progress),
        checkpoint=_json(row.checkpoint),
        last_error_code=row.last_error_code,
        last_error_type=row.last_error_type,
        lease_expires_at=_instant(row.lease_expires_at),
        finished_at=_instant(row.finished_at),
    )
