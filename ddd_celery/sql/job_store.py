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
``take_due`` reads the jobs to publish only, from the one waiting longest: on the index of
``(relay_at, dispatched_at)`` and on ``jobs_published`` (``dispatched_at`` of the claimable jobs
without a ``relay_at``).

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

The attempts. ``history`` is a JSON array of the job's last ``ATTEMPTS_KEPT`` attempts, changed
by the statement that claims or concludes the job (``dialects.json_append``,
``json_set_last``): a claim appends its record unless the job already runs under its token (a
claim sent again), and a conclusion sets the outcome of the last record only while it is still
running, so each statement stays one, and safe to send twice.

The operator. A listing (``list_page``) reads, per status, a range of an index that starts with
the status, the job name or the tenant, then the status, newest first, and merges the ranges:
a page costs about a page whatever the table holds. The cursor is the position of the page's
last job, ``(enqueued_at, id)``, compared as a row. ``stats`` groups on the indexes of
``(queue, status, ...)`` and ``(name, status, ...)``; ``purge_finished`` deletes, by primary
key, the oldest of each finished status found on ``(status, finished_at)``, a batch at a time.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Collection, Sequence
from datetime import UTC, datetime
from itertools import product
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Connection,
    Engine,
    Integer,
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
    tuple_,
    union_all,
    update,
)
from sqlalchemy import text as sql_text

from ddd_celery.background.errors import JOB_INTERRUPTED, InvalidEnqueueError, JobInterruptedError
from ddd_celery.background.rules import (
    check_listing,
    purged_statuses,
    redispatch_wait_ms,
    tenant_filter,
    tenant_key_of,
)
from ddd_celery.background.store import (
    ATTEMPTS_KEPT,
    CLAIMABLE,
    FINISHED_STATUSES,
    AttemptRecord,
    AttemptState,
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
from ddd_celery.sql.connection import Connector, from_micros, to_micros
from ddd_celery.sql.dialects import json_append, json_set_last, upsert
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
        self._claim_one = _claim_one(engine, table)
        self._insert_recordset = _insert_recordset(table)
        self._engine = engine
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
        tenant = tenant_key_of(job.enqueued_by)
        payload = _dump(job.payload)

        def work(connection: Connection, again: bool) -> str:
            instants = _Micros()
            enqueued_at = instants.of(job.enqueued_at, "enqueued_at")
            run_at = instants.of(job.run_at, "run_at")
            relay = self._relay_columns(dispatched, enqueued_at, run_at)
            row = _new_row(job, payload, tenant, (enqueued_at, run_at, *relay))
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

    def add_many(self, jobs: Sequence[NewJob], *, dispatched: bool) -> list[str]:
        """One ``INSERT ... ON CONFLICT DO NOTHING RETURNING id``: on PostgreSQL from
        ``json_to_recordset`` of one JSON parameter holding every row (written by Python's C
        encoder, read by PostgreSQL's, where an array a column cost psycopg's dumping of each
        element), on SQLite from SQLAlchemy's multi-row ``VALUES``, in one transaction. The jobs
        it did not insert (their key or id kept already) are then looked up by key, in
        batches. Each instant is converted once, however many jobs share it."""
        instants = _Micros()
        batch = [
            (
                job,
                tenant_key_of(job.enqueued_by),
                _dump(job.payload),
                instants.of(job.enqueued_at, "enqueued_at"),
                instants.of(job.run_at, "run_at"),
            )
            for job in jobs
        ]
        if not batch:
            return []

        def work(connection: Connection, again: bool) -> list[str]:
            rows = [
                _new_row(
                    job,
                    payload,
                    tenant,
                    (
                        enqueued_at,
                        run_at,
                        *self._relay_columns(dispatched_now(job, dispatched), enqueued_at, run_at),
                    ),
                )
                for job, tenant, payload, enqueued_at, run_at in batch
            ]
            if self._postgresql:
                inserted = set(
                    connection.scalars(self._insert_recordset, {"rows": _dump_rows(rows)}).all()
                )
            else:
                inserted = set(connection.scalars(self._insert, rows))
            keyed = [(t, job.idempotency_key) for job, t, *_ in batch if job.id not in inserted]
            earlier = self._earlier_of_keys(connection, [k for k in keyed if k[1] is not None])
            return [
                job.id
                if job.id in inserted or job.idempotency_key is None
                else earlier.get((tenant, job.idempotency_key), job.id)
                for job, tenant, *_ in batch
            ]

        try:
            return self._connector.run(f"add {len(batch)} jobs", work, single=self._postgresql)
        except UnstorableValueError as error:
            index, job, field = self._first_unstorable([job for job, *_ in batch])
            raise InvalidEnqueueError(
                f"job {index} of the batch: the database cannot keep its {field} (a NUL "
                "character, a text that is not UTF-8, or longer than an index holds)",
                job=job.name,
                field=field,
            ) from error

    def _earlier_of_keys(
        self, connection: Connection, keys: Sequence[tuple[str, str | None]]
    ) -> dict[tuple[str, str], str]:
        """The id of the job kept under each (tenant key, idempotency key), read by batches."""
        table = self._table
        found: dict[tuple[str, str], str] = {}
        pairs = list(dict.fromkeys(keys))
        for start in range(0, len(pairs), _KEYS_READ):
            wanted = tuple_(table.c.tenant, table.c.idempotency_key).in_(
                pairs[start : start + _KEYS_READ]
            )
            query = select(table.c.tenant, table.c.idempotency_key, table.c.id).where(wanted)
            for tenant, key, job_id in connection.execute(query):
                found[tenant, key] = job_id
        return found

    def _relay_columns(
        self, dispatched: bool, enqueued_at: int, run_at: int
    ) -> tuple[int | None, int | None]:
        """``dispatched_at`` and ``relay_at`` of a job added now, enqueued and due at those
        microseconds (see the outbox above)."""
        if dispatched and self._connector.in_unit_of_work():
            return None, enqueued_at + self._grace_us
        if dispatched:
            return enqueued_at, None
        return None, run_at

    def _first_unstorable(self, jobs: Sequence[NewJob]) -> tuple[int, NewJob, str]:
        """The first job of a batch with a text the database cannot hold, its index and field;
        else the one with the longest indexed text (a key past what an index holds)."""
        for index, job in enumerate(jobs):
            field = self._unstorable_field(job)
            if field not in _INDEXED:
                return index, job, field
        index = max(range(len(jobs)), key=lambda i: _indexed_bytes(jobs[i]))
        return index, jobs[index], self._unstorable_field(jobs[index])

    def claim_job(
        self,
        job_id: str,
        *,
        now: datetime,
        lease_ms: int,
        token: str | None = None,
        worker: str | None = None,
    ) -> ClaimedJob | None:
        at = to_micros(now, "now")
        expires = at + _positive(lease_ms) * 1000
        token = uuid.uuid4().hex if token is None else token
        if not self._storable(job_id, token):
            return None
        worker = worker if self._storable(worker) else None
        values = {
            "job_id": job_id,
            "at": at,
            "token": token,
            "expires": expires,
            "worker": worker,
        }

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
        worker: str | None = None,
    ) -> list[ClaimedJob]:
        if not queues or limit <= 0:
            return []
        at = to_micros(now, "now")
        worker = worker if self._storable(worker) else None
        expires = at + _positive(lease_ms) * 1000
        given = token is not None
        stem = f"{uuid.uuid4().hex if token is None else token}:"
        table = self._table
        # one range of the (queue, status, run_at) index per queue and claimable status, each
        # read from its earliest due job and locked, merged: a claim reads about ``limit`` rows
        # of each range, never every due job of a backlog (an IN of statuses cannot be read in
        # run_at order: it is sorted whole)
        ranges = [
            select(table.c.id, table.c.run_at)
            .where(table.c.queue == queue, table.c.status == status, table.c.run_at <= at)
            .order_by(table.c.run_at, table.c.id)
            .limit(limit)
            .with_for_update(skip_locked=True)
            .cte(f"due_{n}")
            .prefix_with("MATERIALIZED")
            for n, (queue, status) in enumerate(product(dict.fromkeys(queues), _CLAIMABLE))
        ]
        due = union_all(*(select(part.c.id, part.c.run_at) for part in ranges)).subquery()
        picked = (
            select(due.c.id, due.c.run_at)
            .order_by(due.c.run_at, due.c.id)
            .limit(limit)
            .cte("picked")
        )
        order = func.row_number().over(order_by=(picked.c.run_at, picked.c.id)) - 1
        numbered = select(picked.c.id, order.label("n")).cte("numbered")
        lease_token = literal(stem, Text) + cast(numbered.c.n, Text)
        started = _started(self._engine, table, literal(at, BigInteger), literal(worker, Text))
        claim = (
            update(table)
            .where(table.c.id == numbered.c.id, table.c.status.in_(_CLAIMABLE))
            .values(**_claim_values(table, lease_token, expires, started))
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

        # a send after a lost reply finds its own claims on the lease index (their expiry is
        # this call's); a caller's token may have claimed at another instant: it reads the
        # running jobs of the queues, as many as their workers run
        resent = again_claim.where(table.c.lease_expires_at == expires)

        def work(connection: Connection, again: bool) -> list[Row[Any]]:
            if given or again:
                claimed = connection.execute(again_claim if given else resent).all()
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
        values = {**_finished(JobStatus.SUCCEEDED, at), **no_error}
        self._report(lease, "complete", values, ended={"end_at": at})

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
        ended = {"end_at": at, "end_code": error_code, "end_type": error_type}
        self._report(lease, "fail", values, ended=ended)

    def release(self, lease: JobLease, *, now: datetime) -> None:
        at = to_micros(now, "now")
        values = {**_claimable(JobStatus.QUEUED, at), "attempts": self._table.c.attempts - 1}
        self._report(lease, "release", values, ended={"end_at": at})

    def cancel(self, job_id: str, *, tenant_id: str | None, now: datetime) -> bool:
        at = to_micros(now, "now")
        reach = self._reach(tenant_id)
        if not self._storable(job_id, tenant_id):
            return False
        table = self._table
        cancellable = [*_CLAIMABLE, _RUNNING]
        ended = _ended(self._engine, table, AttemptState.CANCELLED, literal(at, BigInteger))
        cancel = (
            update(table)
            .where(table.c.id == job_id, table.c.status.in_(cancellable), reach)
            .values(**_finished(JobStatus.CANCELLED, at), lease_ended=None)
            .values(history=case((table.c.status == _RUNNING, ended), else_=table.c.history))
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

    def list_page(
        self, where: JobFilter, *, now: datetime, limit: int = 50, cursor: str | None = None
    ) -> JobPage:
        check_listing(where, now, limit)
        at = to_micros(now, "now")
        reach = self._reach(where.tenant_id)
        after = self._position(cursor)
        table = self._table
        narrowed = [reach]
        if where.name is not None:
            narrowed.append(table.c.name == where.name)
        if where.queue is not None:
            narrowed.append(table.c.queue == where.queue)
        if where.enqueued_since is not None:
            narrowed.append(table.c.enqueued_at >= to_micros(where.enqueued_since, "since"))
        if where.finished_since is not None:
            narrowed.append(table.c.finished_at >= to_micros(where.finished_since, "since"))
        if after is not None:
            narrowed.append(tuple_(table.c.enqueued_at, table.c.id) < tuple_(*after))
        # only a finished job has a finished_at: a range of another status would read it all
        statuses = [s for s in JobStatus if where.finished_since is None or s.finished]
        if where.state is not None:
            states = [_in_state(table, where.state, at)]
            if _STATUS_OF_STATE[where.state] not in statuses:
                states = []
        else:
            states = [[table.c.status == status.value] for status in statuses]
        if not states or not self._storable(where.name, where.queue, where.tenant_id):
            return JobPage([], None)
        newest = (table.c.enqueued_at.desc(), table.c.id.desc())
        # one range per status, each read newest first on an index that starts with the
        # status (and the name or the tenant), merged: a page of any status costs a page per
        # status, never a sort of every job of that name or tenant
        ranges = [
            select(table.c.id, table.c.enqueued_at)
            .where(*narrowed, *state)
            .order_by(*newest)
            .limit(limit + 1)
            for state in states
        ]
        if len(ranges) == 1:
            picked = ranges[0].subquery()
        else:
            merged = union_all(*(select(part.subquery()) for part in ranges)).subquery()
            picked = (
                select(merged.c.id)
                .order_by(merged.c.enqueued_at.desc(), merged.c.id.desc())
                .limit(limit + 1)
                .subquery()
            )
        query = select(table).join(picked, table.c.id == picked.c.id).order_by(*newest)
        rows = self._connector.run(
            "list the jobs", lambda connection, again: connection.execute(query).all()
        )
        jobs = [_job(row) for row in rows[:limit]]
        if len(rows) <= limit:
            return JobPage(jobs, None)
        last = rows[limit - 1]
        return JobPage(jobs, _cursor(last.enqueued_at, last.id))

    def purge_finished(
        self,
        *,
        before: datetime,
        statuses: Collection[JobStatus] = FINISHED_STATUSES,
        limit: int | None = None,
    ) -> int:
        at = to_micros(before, "before")
        chosen = purged_statuses(statuses, limit)
        if not chosen:
            return 0
        table = self._table
        purged = 0
        while limit is None or purged < limit:
            size = PURGE_BATCH if limit is None else min(PURGE_BATCH, limit - purged)
            oldest = _oldest(table, chosen, at, size).scalar_subquery()
            batch = delete(table).where(table.c.id.in_(oldest))
            # not sent again on a lost reply: a second send would purge the next batch, the
            # count would miss the first; the next pass purges what this one left
            with self._connector.transaction("purge the finished jobs", single=True) as connection:
                deleted = connection.execute(batch).rowcount
            purged += deleted
            if deleted < size:
                break
        return purged

    def stats(self) -> JobStats:
        table = self._table
        # each count read on an index that starts with what it groups by (queue or name, then
        # status): the index alone, never the rows
        per_queue = select(
            literal("queue", Text).label("by"),
            table.c.queue.label("key"),
            table.c.status,
            func.count(),
        ).group_by(table.c.queue, table.c.status)
        per_name = select(
            literal("name", Text).label("by"),
            table.c.name.label("key"),
            table.c.status,
            func.count(),
        ).group_by(table.c.name, table.c.status)
        query = union_all(per_queue, per_name)
        rows = self._connector.run(
            "count the jobs", lambda connection, again: connection.execute(query).all()
        )
        counts: dict[str, dict[str, dict[JobStatus, int]]] = {"queue": {}, "name": {}}
        for by, key, status, count in rows:
            counts[by].setdefault(key, {})[JobStatus(status)] = int(count)
        return JobStats(counts["queue"], by_name=counts["name"])

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
        # two ranges, each read in its index's order from the job waiting longest, and
        # locked: the jobs whose relay_at came (``jobs_relay``), and those ``add`` published
        # whose redispatch_after_ms went by (``jobs_published``); merged earliest run_at
        # first. A backlog of due jobs costs a batch, never a sort of the whole backlog.
        waiting = {
            "relay_at": (table.c.relay_at, [table.c.relay_at <= at]),
            "published": (
                table.c.dispatched_at,
                [
                    table.c.relay_at.is_(None),
                    table.c.dispatched_at < at - redispatch_after_ms * 1000,
                ],
            ),
        }
        ranges = [
            select(table.c.id, table.c.run_at)
            .where(table.c.status.in_(_CLAIMABLE), table.c.run_at <= at, *conditions)
            .order_by(order)
            .limit(limit)
            .with_for_update(skip_locked=True)
            .cte(f"due_{name}")
            .prefix_with("MATERIALIZED")
            for name, (order, conditions) in waiting.items()
        ]
        merged = union_all(*(select(part.c.id, part.c.run_at) for part in ranges)).subquery()
        due = select(merged.c.id).order_by(merged.c.run_at, merged.c.id).limit(limit).cte("due")
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
            .returning(table.c.id, table.c.name, table.c.queue, table.c.run_at, table.c.attempts)
        )
        taken = select(
            table.c.id, table.c.name, table.c.queue, table.c.run_at, table.c.attempts
        ).where(
            # what a send of this call marked, read on the relay's index: one of its four
            # relay_at, its dispatched_at, its token
            table.c.relay_at.in_([at + wait_us for wait_us in waits_us]),
            table.c.dispatched_at == at,
            table.c.relay_token == token,
        )

        def work(connection: Connection, again: bool) -> list[Row[Any, Any, Any, Any, Any]]:
            if given or again:
                answered = list(connection.execute(taken).all())
                if answered:
                    return answered
            return list(connection.execute(take).all())

        rows = self._connector.run("take the due jobs", work)
        rows.sort(key=lambda row: (row.run_at, row.id))
        return [Dispatch(row.id, row.name, row.queue, row.attempts) for row in rows]

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
                history=_ended(
                    self._engine,
                    table,
                    AttemptState.INTERRUPTED,
                    literal(at, BigInteger),
                    error_code=literal(JOB_INTERRUPTED, Text),
                    error_type=literal(JobInterruptedError.__name__, Text),
                ),
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

    def _report(
        self,
        lease: JobLease,
        doing: str,
        values: dict[str, Any],
        *,
        ended: dict[str, Any] | None = None,
    ) -> None:
        """Apply ``values`` to the job if ``lease`` is still its own, else ``LostLeaseError``.

        A report that ends the lease (``_ENDING``) sent again answers as the first did; it
        ends the attempt's ``AttemptRecord`` too, with ``ended`` (``end_at``, and for a
        failure ``end_code`` and ``end_type``).
        """
        ends = doing in _ENDING
        shape = (doing, tuple(sorted(values)))
        if shape not in self._reports:
            history = _ended_by(self._engine, self._table, doing) if ends else None
            self._reports[shape] = _report_statements(self._table, doing, values, history)
        report, made = self._reports[shape]
        given = {f"set_{name}": value for name, value in values.items() if _bound(value)}
        ids = {"job_id": lease.job_id, "token": lease.token}
        given.update(ended or {})

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

    def _position(self, cursor: str | None) -> tuple[int, str] | None:
        """The (``enqueued_at``, id) a page's ``cursor`` names; ``ValueError`` for one this
        store did not give."""
        if cursor is None:
            return None
        try:
            position = json.loads(base64.urlsafe_b64decode(cursor.encode("ascii")))
        except (ValueError, UnicodeError):
            position = None
        match position:
            case [int() as enqueued_at, str() as job_id] if self._storable(job_id):
                return enqueued_at, job_id
        raise ValueError("not a cursor of this job store: give back a page's cursor")

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
        return max(_INDEXED, key=lambda field: len((texts[field] or "").encode()))


_INDEXED = ("idempotency_key", "tenant_id", "id")
"""The fields of a job kept in a unique index, whose length an index bounds."""
_KEYS_READ = 500
"""(tenant, key) pairs one look-up of ``add_many`` reads at most: 1,000 parameters."""
_NEW_COLUMNS = (
    "id",
    "name",
    "queue",
    "status",
    "payload",
    "enqueued_at",
    "run_at",
    "attempts",
    "max_attempts",
    "correlation_id",
    "actor",
    "tenant_id",
    "traceparent",
    "tenant",
    "idempotency_key",
    "dispatched_at",
    "relay_at",
    "redispatches",
)
"""The columns an add writes (``_new_row``); the others take their defaults."""


def _new_row(
    job: NewJob, payload: str, tenant: str, instants: tuple[int, int, int | None, int | None]
) -> dict[str, Any]:
    """The row of a job added now, queued with no attempt, by the columns of ``_NEW_COLUMNS``;
    ``instants`` are its enqueued_at, run_at, dispatched_at and relay_at in microseconds."""
    by = job.enqueued_by
    enqueued_at, run_at, dispatched_at, relay_at = instants
    return {
        "id": job.id,
        "name": job.name,
        "queue": job.queue,
        "status": _QUEUED,
        "payload": payload,
        "enqueued_at": enqueued_at,
        "run_at": run_at,
        "attempts": 0,
        "max_attempts": job.max_attempts,
        "correlation_id": by.correlation_id,
        "actor": by.actor,
        "tenant_id": by.tenant_id,
        "traceparent": by.traceparent,
        "tenant": tenant,
        "idempotency_key": job.idempotency_key,
        "dispatched_at": dispatched_at,
        "relay_at": relay_at,
        "redispatches": 0,
    }


_QUEUED = JobStatus.QUEUED.value


class _Micros:
    """``to_micros`` of instants, each converted once (the jobs of a batch share theirs)."""

    def __init__(self) -> None:
        self._known: dict[datetime, int] = {}

    def of(self, instant: datetime, name: str = "instant") -> int:
        known = self._known.get(instant)
        if known is None:
            known = self._known[instant] = to_micros(instant, name)
        return known


_ROWS = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def _dump_rows(rows: list[dict[str, Any]]) -> str:
    """The rows as one JSON array, texts as they are (a lone surrogate fails as a column's
    text does, at the encoding; a NUL, escaped, is refused by PostgreSQL as a column's is)."""
    return _ROWS.encode(rows)


def _insert_recordset(table: Any) -> Any:
    """PostgreSQL's ``add_many``: the rows from ``json_to_recordset`` of one JSON parameter
    (``rows``, an array of objects keyed by column), so a batch of any size is one statement
    of one parameter."""

    def sql_type(name: str) -> str:
        kind = table.c[name].type
        return (
            "bigint"
            if isinstance(kind, BigInteger)
            else "integer"
            if isinstance(kind, Integer)
            else "text"
        )

    columns = ", ".join(_NEW_COLUMNS)
    typed = ", ".join(f"{name} {sql_type(name)}" for name in _NEW_COLUMNS)
    return sql_text(
        f'INSERT INTO "{table.name}" ({columns}) SELECT {columns} FROM '
        f"json_to_recordset(CAST(:rows AS json)) AS rows({typed}) "
        "ON CONFLICT DO NOTHING RETURNING id"
    )


def _indexed_bytes(job: NewJob) -> int:
    return max(
        len((value or "").encode()) for value in (job.idempotency_key, job.tenant_id, job.id)
    )


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


def _claim_one(engine: Engine, table: Any) -> Any:
    """``claim_job``: the job claimable and due, or running under the same token (a claim
    sent again); parameters ``job_id``, ``at``, ``token``, ``expires`` and ``worker``."""
    token = bindparam("token", type_=Text)
    at = bindparam("at", type_=BigInteger)
    started = _started(engine, table, at, bindparam("worker", type_=Text))
    claimable = and_(
        table.c.status.in_(_CLAIMABLE),
        table.c.run_at <= at,
        table.c.lease_token.is_distinct_from(token),  # a token names one attempt only
    )
    ours = and_(table.c.status == _RUNNING, table.c.lease_token == token)
    return (
        update(table)
        .where(table.c.id == bindparam("job_id", type_=Text), or_(claimable, ours))
        .values(**_claim_values(table, token, bindparam("expires", type_=BigInteger), started))
        .returning(*table.c)
    )


def _report_statements(table: Any, doing: str, values: dict[str, Any], history: Any) -> Any:
    """A report's update (the job running under ``token``) and, for one that ends the lease
    (``history`` its attempt ended), the look for the same report made before; parameters
    ``job_id``, ``token``, ``set_*`` and those of ``history``."""
    ends = history is not None
    token = bindparam("token", type_=Text)
    job_id = bindparam("job_id", type_=Text)
    sets = {
        name: bindparam(f"set_{name}", type_=table.c[name].type) if _bound(value) else value
        for name, value in values.items()
    }
    report = (
        update(table)
        .where(table.c.id == job_id, table.c.status == _RUNNING, table.c.lease_token == token)
        .values(**sets, **({"lease_ended": doing, "history": history} if ends else {}))
        .returning(table.c.id)
    )
    made = select(table.c.id).where(
        table.c.id == job_id, table.c.lease_token == token, table.c.lease_ended == doing
    )
    return report, made


def _bound(value: Any) -> bool:
    """Whether a value of a report is a parameter (a SQL expression is part of the statement)."""
    return not isinstance(value, ColumnElement)


def _claim_values(table: Any, token: Any, expires: Any, started: Any) -> dict[str, Any]:
    """A claim, or the same claim sent again by its attempt (not counted again); ``started``
    is the history with its attempt (``_started``)."""
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
        "history": started,
    }


def _started(engine: Engine, table: Any, at: Any, worker: Any) -> Any:
    """The history with the attempt a claim at ``at`` starts on ``worker`` appended, the
    oldest dropped past ``ATTEMPTS_KEPT``; unchanged by the same claim sent again."""
    record = {
        "number": table.c.attempts + 1,
        "started_at": at,
        "worker": worker,
        "outcome": literal(AttemptState.RUNNING.value, Text),
    }
    appended = json_append(engine, table.c.history, record, keep=ATTEMPTS_KEPT)
    return case((table.c.status == _RUNNING, table.c.history), else_=appended)


def _ended(
    engine: Engine,
    table: Any,
    outcome: AttemptState,
    at: Any,
    *,
    error_code: Any = None,
    error_type: Any = None,
) -> Any:
    """The history with its last attempt, still running, ended at ``at`` with ``outcome``."""
    fields = {"outcome": literal(outcome.value, Text), "ended_at": at}
    if error_code is not None:
        fields |= {"error_code": error_code, "error_type": error_type}
    running = ("outcome", AttemptState.RUNNING.value)
    return json_set_last(engine, table.c.history, fields, where=running)


_REPORT_ENDS = {
    "complete": AttemptState.SUCCEEDED,
    "fail": AttemptState.FAILED,
    "release": AttemptState.RELEASED,
}
"""How each report that ends a lease ends its attempt."""


def _ended_by(engine: Engine, table: Any, doing: str) -> Any:
    """The history as report ``doing`` ends its attempt; parameters ``end_at``, and for a
    failure ``end_code`` and ``end_type``."""
    at = bindparam("end_at", type_=BigInteger)
    if doing != "fail":
        return _ended(engine, table, _REPORT_ENDS[doing], at)
    code, kind = bindparam("end_code", type_=Text), bindparam("end_type", type_=Text)
    return _ended(engine, table, AttemptState.FAILED, at, error_code=code, error_type=kind)


_STATUS_OF_STATE = {
    JobState.SCHEDULED: JobStatus.QUEUED,
    JobState.READY: JobStatus.QUEUED,
    JobState.RUNNING: JobStatus.RUNNING,
    JobState.RETRYING: JobStatus.FAILED,
    JobState.DEAD: JobStatus.DEAD,
    JobState.SUCCEEDED: JobStatus.SUCCEEDED,
    JobState.CANCELLED: JobStatus.CANCELLED,
}


def _in_state(table: Any, state: JobState, at: int) -> list[Any]:
    """The conditions of ``state`` at ``at``: its status, and for a queued job whether it is due."""
    conditions = [table.c.status == _STATUS_OF_STATE[state].value]
    if state is JobState.SCHEDULED:
        conditions.append(table.c.run_at > at)
    elif state is JobState.READY:
        conditions.append(table.c.run_at <= at)
    return conditions


def _oldest(table: Any, statuses: list[JobStatus], before: int, size: int) -> Any:
    """The ids of the ``size`` jobs of ``statuses`` finished longest before ``before``: a range
    of the ``(status, finished_at)`` index per status, merged."""
    ranges = [
        select(table.c.id, table.c.finished_at)
        .where(table.c.status == status.value, table.c.finished_at < before)
        .order_by(table.c.finished_at, table.c.id)
        .limit(size)
        for status in statuses
    ]
    if len(ranges) == 1:
        return ranges[0].with_only_columns(table.c.id)
    merged = union_all(*(select(part.subquery()) for part in ranges)).subquery()
    return select(merged.c.id).order_by(merged.c.finished_at, merged.c.id).limit(size)


def _cursor(enqueued_at: int, job_id: str) -> str:
    """A page's cursor: the position of its last job, opaque to the caller."""
    return base64.urlsafe_b64encode(_dump([enqueued_at, job_id]).encode()).decode("ascii")


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
    return _COMPACT.encode(value)


_COMPACT = json.JSONEncoder(separators=(",", ":"))
"""What ``json.dumps(value, separators=(",", ":"))`` writes, without an encoder made per call."""


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
        history=tuple(_attempt(record) for record in json.loads(row.history)),
    )


def _attempt(record: dict[str, Any]) -> AttemptRecord:
    return AttemptRecord(
        number=record["number"],
        started_at=from_micros(record["started_at"]),
        worker=record.get("worker"),
        outcome=AttemptState(record["outcome"]),
        ended_at=_instant(record.get("ended_at")),
        error_code=record.get("error_code"),
        error_type=record.get("error_type"),
    )
