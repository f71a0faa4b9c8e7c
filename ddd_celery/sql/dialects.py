"""The one statement that differs by database: ``INSERT ... ON CONFLICT``."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Engine, Table
from sqlalchemy.dialects import postgresql, sqlite


def upsert(bind: Connection | Engine, table: Table) -> Any:
    """An ``insert`` of ``table`` offering ``on_conflict_do_*`` for the database of ``bind``."""
    name = bind.dialect.name
    if name == "postgresql":
        return postgresql.insert(table)
    if name == "sqlite":
        return sqlite.insert(table)
    raise ValueError(f"the SQL adapters serve PostgreSQL and SQLite, not {name!r}")
