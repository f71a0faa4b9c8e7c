"""One SQLite file shared by the processes of one machine: connections, transactions, instants.

Each process and thread opens its own connection on first use (a connection must not cross a
``fork``, and Celery's prefork pool forks), never when an adapter is built: ``celery beat``
builds its scheduler only to print a banner, and that must not touch the file.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from ddd_celery.kernel.instants import EPOCH, to_utc

DEFAULT_BUSY_TIMEOUT_MS = 1_000
"""How long an operation waits for another process's write: short, these are one-row writes."""

_RETRY_PAUSE_S = 0.005


class StoreUnavailableError(ConnectionError):
    """The SQLite file could not be asked (locked past the busy timeout, unreadable, missing).

    Raised by the checkpoints, the run state and the last runs (the lock raises the kernel's
    ``LockUnavailableError``); ``__cause__`` is the ``sqlite3`` error. A ``ConnectionError``, as
    the Redis stores raise, so a caller treats any unreachable store alike.
    """


class SqliteFile:
    """A database file in WAL mode whose tables are created by ``schema`` on first use.

    Every ``sqlite3`` error is raised as ``unavailable``, saying what was being done, and drops
    the connection, so a file repaired or replaced is reopened by the next operation.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        schema: str,
        *,
        busy_timeout_ms: int,
        unavailable: type[ConnectionError],
    ) -> None:
        if busy_timeout_ms <= 0:
            raise ValueError(f"a busy timeout is a positive number of ms, not {busy_timeout_ms}")
        self._path = os.fspath(path)
        self._schema = schema
        self._busy_timeout_ms = busy_timeout_ms
        self._unavailable = unavailable
        self._local = threading.local()

    def read(self, doing: str, sql: str, parameters: tuple[object, ...]) -> tuple[Any, ...] | None:
        """The first row of one statement, itself a transaction."""
        with self._errors(doing):
            row: tuple[Any, ...] | None = self._connection().execute(sql, parameters).fetchone()
        return row

    @contextmanager
    def transaction(self, doing: str) -> Iterator[sqlite3.Connection]:
        """One write transaction, holding the file's write lock from its first statement.

        ``BEGIN IMMEDIATE`` takes the lock up front: a read that later upgrades to a write could
        fail on a concurrent writer without waiting, where this waits up to the busy timeout.
        """
        with self._errors(doing):
            connection = self._connection()
            connection.execute("BEGIN IMMEDIATE")
            yield connection
            connection.execute("COMMIT")

    def close(self) -> None:
        """Close this thread's connection, if open; the next operation opens another."""
        opened: tuple[int, sqlite3.Connection] | None = getattr(self._local, "opened", None)
        self._local.opened = None
        if opened is not None and opened[0] == os.getpid():
            opened[1].close()

    @contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        try:
            yield
        except BaseException as error:
            self.close()  # rolls back an open transaction
            if isinstance(error, sqlite3.Error):
                raise self._unavailable(
                    f"the SQLite file {self._path!r} could not be asked to {doing}: {error}"
                ) from error
            raise

    def _connection(self) -> sqlite3.Connection:
        opened: tuple[int, sqlite3.Connection] | None = getattr(self._local, "opened", None)
        if opened is not None and opened[0] == os.getpid():
            return opened[1]
        # autocommit (isolation_level=None): transactions are the explicit BEGIN IMMEDIATE above
        connection = sqlite3.connect(
            self._path, timeout=self._busy_timeout_ms / 1000, isolation_level=None
        )
        try:
            self._prepare(connection)
        except BaseException:
            connection.close()
            raise
        self._local.opened = (os.getpid(), connection)
        return connection

    def _prepare(self, connection: sqlite3.Connection) -> None:
        """Put the file in WAL mode and create the tables, both idempotent.

        The switch to WAL takes the file's exclusive lock without SQLite's busy handler, so
        processes opening a new file at once retry it here, within the busy timeout.
        """
        deadline = time.monotonic() + self._busy_timeout_ms / 1000
        while True:
            try:
                connection.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError as error:
                if not _busy(error) or time.monotonic() >= deadline:
                    raise
                time.sleep(_RETRY_PAUSE_S)
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.executescript(f"BEGIN IMMEDIATE;{self._schema}COMMIT;")


def _busy(error: sqlite3.OperationalError) -> bool:
    return error.sqlite_errorcode & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def to_micros(instant: datetime, name: str = "instant") -> int:
    """An aware instant as whole microseconds since the Unix epoch, the stored form."""
    return (to_utc(instant, name) - EPOCH) // _MICROSECOND


def from_micros(micros: int) -> datetime:
    """The aware UTC instant of a stored column."""
    return EPOCH + micros * _MICROSECOND


_MICROSECOND = timedelta(microseconds=1)
