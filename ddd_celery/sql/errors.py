"""What the SQL adapters raise when the database cannot be asked, or cannot keep a value.

A database that cannot be asked raises the kernel's ``StoreUnavailableError``, as every store
does (importable from here as before); the raise says it was the database and why.

No error they raise or let through quotes the statement's parameters (a payload, a key): each
SQLAlchemy error passing through is set to hide them, whatever the engine was built with.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.exc import (
    DatabaseError,
    DataError,
    DBAPIError,
    InterfaceError,
    OperationalError,
    ProgrammingError,
    StatementError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from ddd_celery.kernel.errors import DddCeleryError, StoreUnavailableError

__all__ = ["MissingTablesError", "StoreUnavailableError", "UnstorableValueError", "unavailable_as"]


class UnstorableValueError(DddCeleryError, ValueError):
    """A value the database cannot keep: a NUL character in a text (PostgreSQL), a text that is
    not UTF-8 (a lone surrogate), a key past what an index holds. Permanent, so never a
    ``StoreUnavailableError``: asking again gives the same answer. The message names what was
    being done, never the value."""


class MissingTablesError(DddCeleryError, LookupError):
    """A table of the SQL adapters does not exist: ``create_tables`` was not called, or the
    migration that runs its DDL not applied, or the adapters were given another ``prefix``."""


@contextmanager
def unavailable_as(error: type[ConnectionError], doing: str) -> Iterator[None]:
    """Raise ``error`` for a database that cannot be reached, ``UnstorableValueError`` for a
    value it cannot keep; let every other error through, its parameters hidden.

    The message says what was being done and the driver error's type, never its text (which
    may quote parameters).
    """
    try:
        yield
    except StatementError as cause:
        cause.hide_parameters = True
        if isinstance(cause, DataError) or _sqlstate(cause).startswith("54"):
            raise UnstorableValueError(
                f"the database cannot keep a value given to {doing} ({_kind(cause)})"
            ) from cause
        if isinstance(cause, (OperationalError, ProgrammingError)) and _missing_table(cause):
            raise MissingTablesError(
                f"a table of the SQL adapters is missing, so they could not {doing}: create "
                "them with create_tables(engine, prefix) or the DDL of docs/sql.md, with the "
                "prefix the adapters are given"
            ) from cause
        if isinstance(cause, (OperationalError, InterfaceError)) or (
            # a bare DatabaseError is a file that is no database; its subclasses are the caller's
            isinstance(cause, DBAPIError)
            and (cause.connection_invalidated or type(cause) is DatabaseError)
        ):
            raise error(f"the database could not be asked to {doing} ({_kind(cause)})") from cause
        raise
    except PoolTimeoutError as cause:
        raise error(f"the database could not be asked to {doing} ({_kind(cause)})") from cause
    except UnicodeEncodeError:
        # a lone surrogate: the driver's error holds the whole text, so it is not chained
        raise UnstorableValueError(
            f"the database cannot keep a value given to {doing} (a text that is not UTF-8)"
        ) from None


def _sqlstate(cause: StatementError) -> str:
    """The SQLSTATE of the driver's error (PostgreSQL), or the empty text."""
    return str(getattr(cause.orig, "sqlstate", None) or "")


def _missing_table(cause: DBAPIError) -> bool:
    """PostgreSQL's ``undefined_table`` (42P01), or SQLite's ``no such table``."""
    original = cause.orig
    return getattr(original, "sqlstate", None) == "42P01" or "no such table" in str(original)


def _kind(cause: BaseException) -> str:
    original = getattr(cause, "orig", None)
    return type(original if original is not None else cause).__name__
