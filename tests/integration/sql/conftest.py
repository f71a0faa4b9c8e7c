"""Fixtures of the SQL tests: the real PostgreSQL on DATABASE_URL, and a table of each module's own.

Tests fail, never skip, when PostgreSQL cannot be reached (``scripts/services.sh`` starts one).
Each module's table has a unique name and is dropped afterwards: other tests share the server.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import (
    Column,
    Engine,
    Integer,
    MetaData,
    String,
    Table,
    UniqueConstraint,
    select,
)
from sqlalchemy.orm import Session, sessionmaker

from ddd_celery.sql import SqlAlchemyUnitOfWork


@pytest.fixture(scope="module")
def notes(engine: Engine) -> Iterator[Table]:
    """A table of this module's own: ``id`` and a ``text`` unique when the transaction commits."""
    table = Table(
        f"test_notes_{uuid.uuid4().hex}",
        MetaData(),
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("text", String, nullable=False),
        UniqueConstraint("text", deferrable=True, initially="DEFERRED"),
    )
    table.create(engine)
    yield table
    table.drop(engine)


@pytest.fixture
def unit_of_work(engine: Engine, notes: Table) -> Iterator[SqlAlchemyUnitOfWork]:
    yield SqlAlchemyUnitOfWork(sessionmaker(engine))
    with engine.begin() as connection:
        connection.execute(notes.delete())


def visible(engine: Engine, notes: Table) -> list[str]:
    """The notes another connection sees: what is committed."""
    with engine.connect() as connection:
        return list(connection.scalars(select(notes.c.text).order_by(notes.c.id)))


def add_note(unit_of_work: SqlAlchemyUnitOfWork, notes: Table, text: str) -> None:
    """What a repository does: write on the unit of work's Session."""
    session: Session = unit_of_work.session()
    session.execute(notes.insert().values(text=text))
