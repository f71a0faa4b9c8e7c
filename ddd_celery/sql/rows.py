"""The statements of each table, run on a connection the caller holds, in its transaction.

Each store (``SqlLock``, ``SqlJobCheckpoints``, ``SqlJobRunState``, ``SqlJobLastRuns``) runs
them in a transaction of its own per call; ``SqlOccurrenceStore`` runs several stores' in one.
Built once per store, with bound parameters, so a call compiles nothing. Instants are
microseconds, ``now`` on the clock of the store that asks.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    BindParameter,
    Connection,
    Engine,
    Table,
    Text,
    bindparam,
    delete,
    func,
    or_,
    select,
    update,
)

from ddd_celery.kernel.clock import Clock
from ddd_celery.scheduling.last_runs import run_as_dict
from ddd_celery.scheduling.outcomes import JobRun
from ddd_celery.scheduling.run_state import Claim
from ddd_celery.sql.connection import from_micros, to_micros
from ddd_celery.sql.dialects import upsert


class LockRows:
    """The statements of the lock table, run on a connection the caller holds.

    ``SqlLock`` runs each in a transaction of its own; ``SqlOccurrenceStore`` runs them in the
    transaction of a whole batch. The acquires counted here, by every user of one ``SqlLock``,
    decide when the expired rows are swept.
    """

    def __init__(self, engine: Engine, table: Table, *, sweep_every: int) -> None:
        if sweep_every <= 0:
            raise ValueError(f"sweep_every is a positive number of acquires, not {sweep_every}")
        row: dict[str, BindParameter[Any]] = {
            "key": bindparam("key", type_=Text),
            "token": bindparam("token", type_=Text),
            "expires_at": bindparam("expires_at", type_=BigInteger),
        }
        self._acquire = _acquire(upsert(engine, table).values(**row), table)
        self._acquire_relaxed = self._acquire
        if engine.dialect.name == "postgresql":  # the row comes from a SELECT that turns the
            # commit's fsync off, for the whole transaction: only where it writes nothing else
            relax = select(func.set_config("synchronous_commit", "off", True)).subquery()
            source = select(*(value.label(name) for name, value in row.items()))
            relaxed = upsert(engine, table).from_select(list(row), source.select_from(relax))
            self._acquire_relaxed = _acquire(relaxed, table)
        self._release = (
            delete(table)
            .where(table.c.key == bindparam("key"), table.c.token == bindparam("token"))
            .returning(table.c.expires_at)
        )
        self._held = (
            select(table.c.key)
            .where(
                table.c.key == bindparam("key"),
                table.c.token == bindparam("token"),
                table.c.expires_at > bindparam("now"),
            )
            .with_for_update()
        )
        self._sweep = delete(table).where(table.c.expires_at <= bindparam("now"))
        self._sweep_every = sweep_every
        self._acquires = 0
        self._mutex = threading.Lock()

    def acquire(
        self,
        connection: Connection,
        key: str,
        token: str,
        expires_at: int,
        now: int,
        *,
        relaxed: bool = False,
    ) -> bool:
        """Take ``key`` for ``token`` unless a live row holds it; whether it was taken.

        ``relaxed``: the commit does not wait for the disk (PostgreSQL), for a transaction that
        holds this statement alone.
        """
        parameters = {"key": key, "token": token, "expires_at": expires_at, "now": now}
        statement = self._acquire_relaxed if relaxed else self._acquire
        return connection.execute(statement, parameters).first() is not None

    def release(self, connection: Connection, key: str, token: str) -> int | None:
        """Delete the row of ``key`` if ``token`` owns it; the expiry it had, else None."""
        row = connection.execute(self._release, {"key": key, "token": token}).first()
        return None if row is None else int(row[0])

    def holds(self, connection: Connection, key: str, token: str, now: int) -> bool:
        """Whether ``token`` still holds ``key``, its row locked until the transaction ends."""
        parameters = {"key": key, "token": token, "now": now}
        return connection.execute(self._held, parameters).first() is not None

    def sweep(self, connection: Connection, now: int) -> None:
        """Delete every expired row: keys are per occurrence, so the table would grow."""
        connection.execute(self._sweep, {"now": now})

    def sweep_due(self, acquires: int = 1) -> bool:
        """Count ``acquires`` more; whether a multiple of ``sweep_every`` was passed."""
        with self._mutex:
            before = self._acquires
            self._acquires += acquires
            return self._acquires // self._sweep_every > before // self._sweep_every


class CheckpointRows:
    """The write of a checkpoint, on a connection the caller holds (``SqlJobCheckpoints`` its
    own, ``SqlOccurrenceStore`` the transaction of a batch)."""

    def __init__(self, engine: Engine, table: Table) -> None:
        insert = upsert(engine, table).values(job=bindparam("job"), handled_at=bindparam("at"))
        self._write = insert.on_conflict_do_update(
            index_elements=[table.c.job],
            set_={"handled_at": insert.excluded.handled_at},
            where=table.c.handled_at < insert.excluded.handled_at,
        )

    def write(self, connection: Connection, job: str, at: int) -> None:
        """Move the checkpoint of ``job`` to ``at`` (microseconds), never back."""
        connection.execute(self._write, {"job": job, "at": at})


class LastRunRows:
    """The write of a last run, on a connection the caller holds (``SqlJobLastRuns`` its own,
    ``SqlOccurrenceStore`` the transaction that also ends the run)."""

    def __init__(self, engine: Engine, table: Table) -> None:
        insert = upsert(engine, table).values(
            job=bindparam("run_job"), scheduled_at=bindparam("at"), run=bindparam("record")
        )
        self._write = insert.on_conflict_do_update(
            index_elements=[table.c.job],
            set_={"scheduled_at": insert.excluded.scheduled_at, "run": insert.excluded.run},
            where=table.c.scheduled_at <= insert.excluded.scheduled_at,
        )

    def write(self, connection: Connection, run: JobRun) -> None:
        """Keep ``run`` unless the row holds a later occurrence."""
        record = json.dumps(run_as_dict(run), separators=(",", ":"))
        at = to_micros(run.scheduled_at, "scheduled_at")
        connection.execute(self._write, {"run_job": run.job, "at": at, "record": record})

    def write_many(self, connection: Connection, runs: Sequence[JobRun]) -> None:
        """Keep each of ``runs`` as ``write`` would one after the other, in one ``executemany``.

        Only the record each job would end with is sent: of the batch's latest occurrence of
        the job, the last written (an upsert cannot touch one row twice in one statement).
        """
        latest: dict[str, dict[str, Any]] = {}
        for run in runs:
            at = to_micros(run.scheduled_at, "scheduled_at")
            kept = latest.get(run.job)
            if kept is None or at >= kept["at"]:
                record = json.dumps(run_as_dict(run), separators=(",", ":"))
                latest[run.job] = {"run_job": run.job, "at": at, "record": record}
        if latest:
            connection.execute(self._write, list(latest.values()))


class RunRows:
    """The statements of the run state, run on a connection the caller holds, in its transaction.

    ``SqlJobRunState`` runs each operation in a transaction of its own; ``SqlOccurrenceStore``
    runs several in one. ``now`` and ``expires_at`` are microseconds on the run state's clock.
    """

    def __init__(self, engine: Engine, table: Table) -> None:
        job: BindParameter[str] = bindparam("run_job", type_=Text)
        now: BindParameter[int] = bindparam("now", type_=BigInteger)
        insert = upsert(engine, table).values(
            job=job, running=bindparam("at"), expires_at=bindparam("until"), queued=None
        )
        self._start = insert.on_conflict_do_update(
            index_elements=[table.c.job],
            set_={
                "running": insert.excluded.running,
                "expires_at": insert.excluded.expires_at,
                "queued": None,
            },
            where=table.c.expires_at <= now,
        ).returning(table.c.job)
        self._queue = (
            update(table)
            .where(table.c.job == job, table.c.expires_at > now, table.c.queued.is_(None))
            .values(queued=bindparam("at"))
            .returning(table.c.job)
        )
        self._live = (
            select(table.c.running, table.c.queued)
            .where(table.c.job == job, table.c.expires_at > now)
            .with_for_update()
        )
        self._delete = delete(table).where(table.c.job == job)
        self._promote = (
            update(table)
            .where(table.c.job == job)
            .values(running=bindparam("at"), expires_at=bindparam("until"), queued=None)
        )
        self._drop = update(table).where(table.c.job == job).values(queued=None)

    def claim(
        self, connection: Connection, job: str, at: int, *, queue: bool, now: int, expires_at: int
    ) -> Claim:
        """Start ``at`` on a free or expired row (locking a live one), else queue it."""
        parameters = {"run_job": job, "at": at, "until": expires_at, "now": now}
        if connection.execute(self._start, parameters).first() is not None:
            return Claim.STARTED
        already = self.claimed(connection, job, at, now=now)
        if already is not None:  # this claim, sent again after its reply was lost
            return already
        if not queue:
            return Claim.BUSY
        queued = connection.execute(self._queue, parameters).first()
        return Claim.BUSY if queued is None else Claim.QUEUED

    def claimed(self, connection: Connection, job: str, at: int, *, now: int) -> Claim | None:
        """``STARTED`` while ``at`` is the run in progress, ``QUEUED`` while it waits behind it,
        else None: what a claim of ``at`` already made reads now (its row locked)."""
        row = connection.execute(self._live, {"run_job": job, "now": now}).first()
        if row is None:
            return None
        if row.running == at:
            return Claim.STARTED
        return Claim.QUEUED if row.queued == at else None

    def finish(
        self, connection: Connection, job: str, at: int, *, now: int, expires_at: int
    ) -> datetime | None:
        """End the run ``at`` if in progress; promote the occurrence queued behind it."""
        row = connection.execute(self._live, {"run_job": job, "now": now}).first()
        if row is None or row.running != at:
            return None
        if row.queued is None:
            connection.execute(self._delete, {"run_job": job})
            return None
        promoted = {"run_job": job, "at": row.queued, "until": expires_at}
        connection.execute(self._promote, promoted)
        return from_micros(row.queued)

    def drop_queued(self, connection: Connection, job: str, *, now: int) -> datetime | None:
        """Forget the occurrence queued behind the run in progress; the one forgotten."""
        row = connection.execute(self._live, {"run_job": job, "now": now}).first()
        if row is None or row.queued is None:
            return None
        connection.execute(self._drop, {"run_job": job})
        return from_micros(row.queued)


def run_window(clock: Clock, ttl_ms: int) -> tuple[int, int]:
    """Now, and when a run started now stops counting as in progress, in microseconds."""
    if ttl_ms <= 0:
        raise ValueError(f"a run's time to live is a positive number of ms, not {ttl_ms}")
    now = to_micros(clock.now())
    return now, now + ttl_ms * 1000


def _acquire(insert: Any, table: Table) -> Any:
    """The acquire on ``insert``: replaces an expired row, leaves a live one but its own token's
    (an acquire repeated with the same token takes it again: the same owner)."""
    return insert.on_conflict_do_update(
        index_elements=[table.c.key],
        set_={"token": insert.excluded.token, "expires_at": insert.excluded.expires_at},
        where=or_(table.c.expires_at <= bindparam("now"), table.c.token == insert.excluded.token),
    ).returning(table.c.token)
