"""``SqliteLock``: the kernel Lock between the processes of one machine, on a SQLite file.

Table ``ddd_locks``, one row per key held::

    key         TEXT PRIMARY KEY   job:<name>:<instant>
    token       TEXT               the owner's random token, checked on release
    expires_at  INTEGER            microseconds since the Unix epoch, read on the Clock

An expired row is deleted by the next ``acquire``, so the table holds live keys only.
"""

from __future__ import annotations

import os
import uuid
from datetime import timedelta

from ddd_celery.kernel.clock import Clock
from ddd_celery.kernel.lock import Lease, Lock, LockUnavailableError
from ddd_celery.sqlite._database import DEFAULT_BUSY_TIMEOUT_MS, SqliteFile, to_micros

_SCHEMA = """
CREATE TABLE IF NOT EXISTS ddd_locks (
    key TEXT PRIMARY KEY,
    token TEXT NOT NULL,
    expires_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS ddd_locks_expiry ON ddd_locks (expires_at);
"""


class SqliteLock(Lock):
    """Excludes between the processes that share ``path``: a beat and workers on one machine.

    Each acquire and release is one transaction. A file that cannot be opened, read or written
    within ``busy_timeout_ms`` raises ``LockUnavailableError``, so the occurrence is recorded
    failed rather than run everywhere.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        clock: Clock,
        *,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
    ) -> None:
        self._file = SqliteFile(
            path, _SCHEMA, busy_timeout_ms=busy_timeout_ms, unavailable=LockUnavailableError
        )
        self._clock = clock

    def acquire(self, key: str, ttl_ms: int) -> Lease | None:
        if ttl_ms <= 0:
            raise ValueError(f"a lock's time to live is a positive number of ms, not {ttl_ms}")
        now = self._clock.now()
        lease = Lease(key, uuid.uuid4().hex, now + timedelta(milliseconds=ttl_ms))
        with self._file.transaction(f"acquire the lock {key!r}") as connection:
            connection.execute("DELETE FROM ddd_locks WHERE expires_at <= ?", (to_micros(now),))
            inserted = connection.execute(
                "INSERT OR IGNORE INTO ddd_locks (key, token, expires_at) VALUES (?, ?, ?)",
                (key, lease.token, to_micros(lease.expires_at)),
            ).rowcount
        return lease if inserted == 1 else None

    def release(self, lease: Lease) -> bool:
        with self._file.transaction(f"release the lock {lease.key!r}") as connection:
            row = connection.execute(
                "DELETE FROM ddd_locks WHERE key = ? AND token = ? RETURNING expires_at",
                (lease.key, lease.token),
            ).fetchone()
        return row is not None and row[0] > to_micros(self._clock.now())

    def close(self) -> None:
        """Close this thread's connection to the file (a later call reopens one)."""
        self._file.close()
