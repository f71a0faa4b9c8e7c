"""``SqlLock``: the kernel Lock on a table, for several beats sharing PostgreSQL (or SQLite).

Table ``<prefix>locks``, one row per key held: ``key`` (``job:<name>:<instant>``), ``token``
(the owner's, checked on release), ``expires_at`` (microseconds, on the Clock the lock is
given). An acquire is one statement::

    INSERT INTO ddd_locks (key, token, expires_at) VALUES (:key, :token, :expires_at)
    ON CONFLICT (key) DO UPDATE SET token = excluded.token, expires_at = excluded.expires_at
    WHERE ddd_locks.expires_at <= :now OR ddd_locks.token = excluded.token
    RETURNING token

so a free key is inserted, an expired row is replaced atomically, and a live one is left alone
(nothing returned) unless it holds the same token: an acquire repeated by its owner (beat's
begin sent again with its tokens, ``SqlOccurrenceStore``) takes it again. It runs in
autocommit: one round trip. On PostgreSQL the row comes from
``SELECT ... FROM (SELECT set_config('synchronous_commit', 'off', true))``, so its commit does
not wait for the disk, which is what a lock's tail latency is made of; a crash of the server
may then forget the last fraction of a second of leases, as Redis without an fsync'd AOF does
(a lease is best effort, the port says). Every ``sweep_every`` acquires, a transaction also
deletes the expired rows: keys are per occurrence, so the table would otherwise grow by one
row each.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy import Engine

from ddd_celery.kernel.clock import Clock
from ddd_celery.kernel.lock import Lease, Lock, LockUnavailableError
from ddd_celery.sql.connection import Connector, to_micros
from ddd_celery.sql.rows import LockRows
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
        self.rows = LockRows(engine, tables(prefix).locks, sweep_every=sweep_every)
        """The statements, and the acquire count ``SqlOccurrenceStore`` shares."""
        self.engine = engine
        self.prefix = prefix
        """The tables' prefix: the pauses kept beside this lock take it (``celery/pauses.py``)."""
        self.clock = clock
        self._connector = Connector(engine, unavailable=LockUnavailableError)

    @property
    def address(self) -> str:
        """Where the lock is, for a line that says it cannot be reached: host, port and
        database, never a password."""
        return sql_address(self.engine)

    def acquire(self, key: str, ttl_ms: int) -> Lease | None:
        if ttl_ms <= 0:
            raise ValueError(f"a lock's time to live is a positive number of ms, not {ttl_ms}")
        now = self.clock.now()
        lease = Lease(key, uuid.uuid4().hex, now + timedelta(milliseconds=ttl_ms))
        at = to_micros(now)
        sweep = self.rows.sweep_due()
        doing = f"acquire the lock {key!r}"
        with self._connector.transaction(doing, single=not sweep) as connection:
            won = self.rows.acquire(
                connection, key, lease.token, to_micros(lease.expires_at), at, relaxed=True
            )
            if sweep:
                self.rows.sweep(connection, at)
        return lease if won else None

    def release(self, lease: Lease) -> bool:
        doing = f"release the lock {lease.key!r}"
        with self._connector.transaction(doing, single=True) as connection:
            expires_at = self.rows.release(connection, lease.key, lease.token)
        return expires_at is not None and expires_at > to_micros(self.clock.now())


def sql_address(engine: Engine) -> str:
    """``postgresql at host:port database NAME`` (a SQLite file's path) of an engine; never a
    password."""
    url = engine.url
    if url.host is None:
        return f"{url.get_backend_name()} at {url.database}"
    port = url.port or "its default port"
    return f"{url.get_backend_name()} at {url.host}:{port} database {url.database}"
