"""``SqlLock``: the kernel Lock on a table, for several beats sharing PostgreSQL (or SQLite).

Table ``<prefix>locks``, one row per key held: ``key`` (``job:<name>:<instant>``), ``token``
(the owner's, checked on release), ``expires_at`` (microseconds, on the Clock the lock is
given). An acquire is one statement::

    INSERT INTO ddd_locks (key, token, expires_at) VALUES (:key, :token, :expires_at)
    ON CONFLICT (key) DO UPDATE SET token = excluded.token, expires_at = excluded.expires_at
    WHERE ddd_locks.expires_at <= :now
    RETURNING token

so a free key is inserted, an expired row is replaced atomically, and a live one is left alone
(nothing returned). It runs in autocommit: one round trip. On PostgreSQL the row comes from
``SELECT ... FROM (SELECT set_config('synchronous_commit', 'off', true))``, so its commit does
not wait for the disk, which is what a lock's tail latency is made of; a crash of the server
may then forget the last fraction of a second of leases, as Redis without an fsync'd AOF does
(a lease is best effort, the port says). Every ``sweep_every`` acquires, a transaction also
deletes the expired rows: keys are per occurrence, so the table would otherwise grow by one
row each.
"""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    BindParameter,
    Engine,
    Text,
    bindparam,
    delete,
    func,
    select,
)

from ddd_celery.kernel.clock import Clock
from ddd_celery.kernel.lock import Lease, Lock, LockUnavailableError
from ddd_celery.sql.connection import Connector, to_micros
from ddd_celery.sql.dialects import upsert
from ddd_celery.sql.tables import DEFAULT_PREFIX, tables

DEFAULT_SWEEP_EVERY = 100


class SqlLock(Lock):
    """Excludes between every process that shares the database: several beats, one key each.

    Compares expiries with the ``clock`` it is given (read once per call), never the
    database's: every beat's clock is the one its schedule runs on. Raises
    ``LockUnavailableError`` when the database cannot be asked (down, unreachable), so the
    occurrence is recorded ``failed``, ``JOB_LOCK_UNAVAILABLE``, and nothing is sent. Always its
    own short transaction (never a unit of work's): a lock outlives no use case.
    """

    def __init__(
        self,
        engine: Engine,
        clock: Clock,
        *,
        prefix: str = DEFAULT_PREFIX,
        sweep_every: int = DEFAULT_SWEEP_EVERY,
    ) -> None:
        if sweep_every <= 0:
            raise ValueError(f"sweep_every is a positive number of acquires, not {sweep_every}")
        self._connector = Connector(engine, unavailable=LockUnavailableError)
        table = tables(prefix).locks
        self._relaxed = engine.dialect.name == "postgresql"
        insert = upsert(engine, table)
        row: dict[str, BindParameter[Any]] = {
            "key": bindparam("key", type_=Text),
            "token": bindparam("token", type_=Text),
            "expires_at": bindparam("expires_at", type_=BigInteger),
        }
        if self._relaxed:  # the row comes from a SELECT that turns the commit's fsync off
            relax = select(func.set_config("synchronous_commit", "off", True)).subquery()
            source = select(*(value.label(name) for name, value in row.items()))
            insert = insert.from_select(list(row), source.select_from(relax))
        else:
            insert = insert.values(**row)
        self._acquire = insert.on_conflict_do_update(
            index_elements=[table.c.key],
            set_={"token": insert.excluded.token, "expires_at": insert.excluded.expires_at},
            where=table.c.expires_at <= bindparam("now"),
        ).returning(table.c.token)
        self._release = (
            delete(table)
            .where(table.c.key == bindparam("key"), table.c.token == bindparam("token"))
            .returning(table.c.expires_at)
        )
        self._sweep = delete(table).where(table.c.expires_at <= bindparam("now"))
        self._clock = clock
        self._sweep_every = sweep_every
        self._acquires = 0
        self._mutex = threading.Lock()

    def acquire(self, key: str, ttl_ms: int) -> Lease | None:
        if ttl_ms <= 0:
            raise ValueError(f"a lock's time to live is a positive number of ms, not {ttl_ms}")
        now = self._clock.now()
        lease = Lease(key, uuid.uuid4().hex, now + timedelta(milliseconds=ttl_ms))
        at = to_micros(now)
        parameters = {
            "key": key,
            "token": lease.token,
            "expires_at": to_micros(lease.expires_at),
            "now": at,
        }
        sweep = self._sweep_due()
        doing = f"acquire the lock {key!r}"
        with self._connector.transaction(doing, single=not sweep) as connection:
            won = connection.execute(self._acquire, parameters).first() is not None
            if sweep:
                connection.execute(self._sweep, {"now": at})
        return lease if won else None

    def release(self, lease: Lease) -> bool:
        doing = f"release the lock {lease.key!r}"
        with self._connector.transaction(doing, single=True) as connection:
            row = connection.execute(
                self._release, {"key": lease.key, "token": lease.token}
            ).first()
        return row is not None and row[0] > to_micros(self._clock.now())

    def _sweep_due(self) -> bool:
        with self._mutex:
            self._acquires += 1
            return self._acquires % self._sweep_every == 0
