"""The clinic's SQLite file: what the worker writes, the demo and the tests read.

A connection per transaction keeps the adapters safe across the worker's fork and threads; WAL
lets a reader (the demo's summary) run beside the worker's writes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from datetime import UTC, datetime
from pathlib import Path

_BUSY_TIMEOUT_S = 5.0


@contextmanager
def transaction(path: Path, schema: Sequence[str]) -> Iterator[sqlite3.Connection]:
    """One write transaction on ``path``, after ``schema`` (``CREATE ... IF NOT EXISTS``)."""
    with closing(sqlite3.connect(path, timeout=_BUSY_TIMEOUT_S, isolation_level=None)) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("BEGIN IMMEDIATE")
        try:
            for statement in schema:
                db.execute(statement)
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")


def to_text(instant: datetime) -> str:
    """An instant as stored: ISO 8601 in UTC, which sorts as time does."""
    return instant.astimezone(UTC).isoformat()


def from_text(text: str) -> datetime:
    """The aware instant of a stored column."""
    return datetime.fromisoformat(text)
