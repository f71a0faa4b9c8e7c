"""What differs by database: ``INSERT ... ON CONFLICT``, and a JSON array changed in place.

PostgreSQL and SQLite both change a JSON value inside a statement (``jsonb`` operators, the
``json_*`` functions), so a job's attempt history is appended to and ended by the same
``UPDATE`` that claims or concludes the job: one statement, safe to send twice as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Table,
    Text,
    case,
    cast,
    func,
    literal_column,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql import JSONB


def upsert(bind: Connection | Engine, table: Table) -> Any:
    """An ``insert`` of ``table`` offering ``on_conflict_do_*`` for the database of ``bind``."""
    name = _name(bind)
    return postgresql.insert(table) if name == "postgresql" else sqlite.insert(table)


def json_append(
    bind: Connection | Engine,
    array: ColumnElement[Any],
    item: Mapping[str, ColumnElement[Any]],
    *,
    keep: int,
) -> ColumnElement[str]:
    """The JSON text ``array`` with the object ``item`` appended, its first items dropped so
    that it keeps ``keep`` at most (one is dropped per append: it never holds more)."""
    if _name(bind) == "postgresql":
        items = cast(array, JSONB)
        kept = case(
            (func.jsonb_array_length(items) >= keep, items.op("-", return_type=JSONB)(_sql("0"))),
            else_=items,
        )
        added = kept.op("||", return_type=JSONB)(func.jsonb_build_array(_pg_object(item)))
        return cast(added, Text)
    kept = case(
        (func.json_array_length(array) >= keep, func.json_remove(array, _text("$[0]"))),
        else_=array,
    )
    pairs = [value for key, field in item.items() for value in (_text(key), field)]
    return func.json_insert(kept, _text("$[#]"), func.json_object(*pairs), type_=Text)


def json_set_last(
    bind: Connection | Engine,
    array: ColumnElement[Any],
    fields: Mapping[str, ColumnElement[Any]],
    *,
    where: tuple[str, str],
) -> ColumnElement[str]:
    """The JSON text ``array`` with ``fields`` set in its last object when that object's key
    ``where[0]`` holds the text ``where[1]``; else ``array`` unchanged (an empty one too)."""
    key, value = where
    if _name(bind) == "postgresql":
        items = cast(array, JSONB)
        last = items.op("->", return_type=JSONB)(_sql("-1"))
        merged = last.op("||", return_type=JSONB)(_pg_object(fields))
        changed = func.jsonb_set(items, _text("{-1}"), merged, type_=JSONB)
        holds = last.op("->>", return_type=Text)(_text(key)) == _text(value)
        return case((holds, cast(changed, Text)), else_=array)
    paths = [v for name, field in fields.items() for v in (_text(f"$[#-1].{name}"), field)]
    holds = func.json_extract(array, _text(f"$[#-1].{key}")) == _text(value)
    return case((holds, func.json_set(array, *paths, type_=Text)), else_=array)


def _pg_object(fields: Mapping[str, ColumnElement[Any]]) -> ColumnElement[Any]:
    return func.jsonb_build_object(
        *(value for key, field in fields.items() for value in (_text(key), field))
    )


def _text(value: str) -> ColumnElement[str]:
    """A constant text of the statement itself (a key, a path): never a parameter, so every
    database knows its type (PostgreSQL cannot guess one inside ``jsonb_build_object``)."""
    return literal_column("'" + value.replace("'", "''") + "'", Text)


def _sql(value: str) -> ColumnElement[Any]:
    return literal_column(value)


def _name(bind: Connection | Engine) -> str:
    name = bind.dialect.name
    if name not in ("postgresql", "sqlite"):
        raise ValueError(f"the SQL adapters serve PostgreSQL and SQLite, not {name!r}")
    return name
