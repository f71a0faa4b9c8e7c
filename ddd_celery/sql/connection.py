"""How an adapter reaches the database: the caller's transaction when there is one, else its own.

``Connector.transaction()`` yields the connection of the ``SqlAlchemyUnitOfWork`` in progress
(in this thread or asyncio task), whose commit or rollback then decides what was written; with
no unit of work in progress, a short transaction of the adapter's own on its engine, committed
when the block ends. ``Connector.run`` sends a statement that is safe to repeat again, bounded,
when its outcome is unknown. ``sqlite_engine`` builds an engine on a SQLite file that several
processes can share.
"""

from __future__ import annotations

import os
import sqlite3
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.dialects import sqlite
from sqlalchemy.schema import CreateIndex, CreateTable

from ddd_celery.kernel.instants import EPOCH, to_utc
from ddd_celery.sql.errors import unavailable_as
from ddd_celery.sql.tables import DEFAULT_PREFIX, tables
from ddd_celery.sql.unit_of_work import SqlAlchemyUnitOfWork

DEFAULT_SQLITE_BUSY_TIMEOUT_MS = 5_000
"""How long a SQLite write waits for another process's: these are short transactions."""
RETRY_DELAYS_S = (0.1, 0.5)
"""The waits before each send again of a statement whose outcome is unknown (``run``)."""
RETRY_WITHIN_S = 2.0
"""No statement is sent again once this long has passed since its first send: an outage
longer than a short drop is the caller's to see, not a call that hangs on."""

_T = TypeVar("_T")


class Connector:
    """The engine of an adapter, the unit of work it joins (if any), and its error."""

    def __init__(
        self,
        engine: Engine,
        *,
        unavailable: type[ConnectionError],
        unit_of_work: SqlAlchemyUnitOfWork | None = None,
    ) -> None:
        self.engine = engine
        self.unit_of_work = unit_of_work
        self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
        self._unavailable = unavailable
        _dispose_after_fork(engine)

    def in_unit_of_work(self) -> bool:
        return self.unit_of_work is not None and self.unit_of_work.in_progress()

    @contextmanager
    def transaction(self, doing: str, *, single: bool = False) -> Iterator[Connection]:
        """The unit of work's connection, or a transaction of the adapter's own.

        ``single`` says the block runs one statement, atomic by itself: outside a unit of work
        it then runs in autocommit, one round trip instead of three (BEGIN, it, COMMIT). Raises
        the adapter's ``unavailable`` error, saying ``doing``, when the database cannot be
        asked; inside a unit of work the error also rolls the unit back when it propagates.
        """
        with unavailable_as(self._unavailable, doing):
            if self.unit_of_work is not None and self.unit_of_work.in_progress():
                yield self.unit_of_work.session().connection()
            elif single:
                with self._autocommit.connect() as connection:
                    yield connection
            else:
                with self.engine.begin() as connection:
                    yield connection

    def run(self, doing: str, work: Callable[[Connection, bool], _T], *, single: bool = True) -> _T:
        """``work(connection, again)`` as one autocommit statement, sent again when its outcome
        is unknown: the connection dropped before the reply (the statement may have committed),
        or the database could not be reached. ``single`` False: ``work`` runs several
        statements, in a transaction of their own outside a unit of work.

        ``work`` must be safe to repeat (the same token, the same answer); ``again`` is True on
        a send after the first, so ``work`` can look for what an earlier send did. Sent at most
        ``1 + len(RETRY_DELAYS_S)`` times within ``RETRY_WITHIN_S``, then the adapter's
        ``unavailable`` error. In a unit of work it is sent once: the caller's transaction
        failed with the connection and only the caller can run it again.
        """
        started = time.monotonic()
        waits = [] if self.in_unit_of_work() else list(RETRY_DELAYS_S)
        again = False
        while True:
            try:
                with self.transaction(doing, single=single) as connection:
                    return work(connection, again)
            except self._unavailable:
                if not waits or time.monotonic() - started + waits[0] > RETRY_WITHIN_S:
                    raise
                time.sleep(waits.pop(0))
                again = True


_ENGINES: weakref.WeakSet[Engine] = weakref.WeakSet()
"""The engines of every adapter: a forked child gives each fresh connections."""


def _dispose_after_fork(engine: Engine) -> None:
    """Give a forked child (Celery's prefork pool) fresh connections, never its parent's."""
    _ENGINES.add(engine)


def _in_child() -> None:
    for engine in list(_ENGINES):
        engine.dispose(close=False)


os.register_at_fork(after_in_child=_in_child)


def to_micros(instant: datetime, name: str = "instant") -> int:
    """An aware instant as whole microseconds since the Unix epoch: the stored form."""
    return (to_utc(instant, name) - EPOCH) // _MICROSECOND


def from_micros(micros: int) -> datetime:
    """The aware UTC instant of a stored column."""
    return EPOCH + micros * _MICROSECOND


_MICROSECOND = timedelta(microseconds=1)


def sqlite_engine(
    path: str | os.PathLike[str],
    *,
    prefix: str | None = DEFAULT_PREFIX,
    busy_timeout_ms: int = DEFAULT_SQLITE_BUSY_TIMEOUT_MS,
) -> Engine:
    """An engine on the SQLite file ``path`` that the processes of one machine share.

    The file is in WAL mode (readers never wait for a writer); every transaction starts with
    ``BEGIN IMMEDIATE``, taking the write lock up front, so a read that later writes waits up to
    ``busy_timeout_ms`` for another writer instead of failing (SQLite's deferred transactions
    cannot wait when they upgrade). Each new connection creates the tables of ``prefix`` that
    are missing (None: leave the schema to migrations), so the embedded default needs no setup
    step. Nothing is opened before the first use.
    """
    if busy_timeout_ms <= 0:
        raise ValueError(f"a busy timeout is a positive number of ms, not {busy_timeout_ms}")
    schema = "" if prefix is None else _schema(prefix)
    engine = create_engine(
        f"sqlite:///{os.fspath(path)}",
        connect_args={"timeout": busy_timeout_ms / 1000},
        hide_parameters=True,  # a payload or a key is data: never in an error or a log
    )

    @event.listens_for(engine, "connect")
    def prepare(connection: sqlite3.Connection, record: Any) -> None:
        connection.isolation_level = None  # transactions are the BEGIN IMMEDIATE below
        _wal(connection, busy_timeout_ms)
        connection.execute("PRAGMA synchronous=NORMAL")
        if schema:
            connection.executescript(f"BEGIN IMMEDIATE;{schema}COMMIT;")

    @event.listens_for(engine, "begin")
    def begin(connection: Connection) -> None:
        if connection.get_execution_options().get("isolation_level") != "AUTOCOMMIT":
            connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def _schema(prefix: str) -> str:
    """The tables of ``prefix`` as SQLite statements that leave existing ones alone."""
    dialect = sqlite.dialect()
    statements: list[str] = []
    for table in tables(prefix).metadata.sorted_tables:
        statements.append(str(CreateTable(table, if_not_exists=True).compile(dialect=dialect)))
        for index in table.indexes:
            statements.append(str(CreateIndex(index, if_not_exists=True).compile(dialect=dialect)))
    return "".join(f"{statement.strip()};" for statement in statements)


def _wal(connection: sqlite3.Connection, busy_timeout_ms: int) -> None:
    """Switch to WAL, retrying within the timeout: the switch takes the file's exclusive lock
    without SQLite's busy handler, so processes opening a new file at once may collide."""
    deadline = time.monotonic() + busy_timeout_ms / 1000
    while True:
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if error.sqlite_errorcode & 0xFF not in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                raise
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.005)
