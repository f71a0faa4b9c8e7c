"""What the SQL adapters raise when the database cannot be asked."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.exc import (
    DatabaseError,
    DBAPIError,
    InterfaceError,
    OperationalError,
    ProgrammingError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeoutError


class StoreUnavailableError(ConnectionError):
    """The database could not be asked (down, unreachable, locked past its timeout).

    Raised by the job store, the checkpoints, the run state and the last runs (the lock raises
    the kernel's ``LockUnavailableError``); ``__cause__`` is SQLAlchemy's error. A
    ``ConnectionError``, as the Redis stores raise, so a caller treats any unreachable store
    alike.
    """


class MissingTablesError(LookupError):
    """A table of the SQL adapters does not exist: ``create_tables`` was not called, or the
    migration that runs its DDL not applied, or the adapters were given another ``prefix``."""


@contextmanager
def unavailable_as(error: type[ConnectionError], doing: str) -> Iterator[None]:
    """Raise ``error`` for a database that cannot be reached; let every other error through.

    The message says what was being done and the driver error's type, never its text (which
    may quote parameters).
    """
    try:
        yield
    except (OperationalError, ProgrammingError) as cause:
        if not _missing_table(cause):
            if isinstance(cause, ProgrammingError):
                raise
            raise error(f"the database could not be asked to {doing} ({_kind(cause)})") from cause
        raise MissingTablesError(
            f"a table of the SQL adapters is missing, so they could not {doing}: create them "
            "with create_tables(engine, prefix) or the DDL of docs/sql.md, with the prefix the "
            "adapters are given"
        ) from cause
    except (InterfaceError, PoolTimeoutError) as cause:
        raise error(f"the database could not be asked to {doing} ({_kind(cause)})") from cause
    except DBAPIError as cause:
        # a bare DatabaseError is a file that is no database; its subclasses are the caller's
        if not (cause.connection_invalidated or type(cause) is DatabaseError):
            raise
        raise error(f"the database could not be asked to {doing} ({_kind(cause)})") from cause


def _missing_table(cause: DBAPIError) -> bool:
    """PostgreSQL's ``undefined_table`` (42P01), or SQLite's ``no such table``."""
    original = cause.orig
    return getattr(original, "sqlstate", None) == "42P01" or "no such table" in str(original)


def _kind(cause: BaseException) -> str:
    original = getattr(cause, "orig", None)
    return type(original if original is not None else cause).__name__
