"""A team whose Alembic migrations own the schema keeps ddd_celery's tables in them.

As ``docs/sql.md`` says: the library's metadata goes into ``target_metadata``; autogenerate on a
database without the tables writes their creation, and on one where ``create_tables`` made
them it proposes nothing, so the two ways to make the tables agree column for column.
"""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy
from alembic.autogenerate import compare_metadata, produce_migrations, render_python_code
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy import Connection, Engine, MetaData, inspect

from ddd_celery.sql import create_tables, drop_tables, tables
from ddd_celery.sql.process_store import create_process_tables, drop_process_tables, process_table

pytestmark = pytest.mark.postgres

NAMES = (
    "locks",
    "job_checkpoints",
    "job_runs",
    "job_last_runs",
    "job_run_history",
    "job_pauses",
    "jobs",
    "processes",
)


@pytest.fixture
def prefix(engine: Engine) -> Iterator[str]:
    """A prefix of this test's own; its tables are dropped afterwards."""
    prefix = f"test_{uuid.uuid4().hex[:12]}_"
    yield prefix
    drop_tables(engine, prefix)
    drop_process_tables(engine, prefix)


def target_metadata(prefix: str) -> list[MetaData]:
    """What the team's ``env.py`` adds to its own ``target_metadata``, as the page shows."""
    return [tables(prefix).metadata, process_table(prefix).metadata]


def migration_context(connection: Connection, prefix: str) -> MigrationContext:
    """The context of the team's ``env.py``, comparing types and server defaults too.

    ``include_name`` keeps to the tables of ``prefix``, as a team's ``env.py`` would for tables
    it does not own: the test database holds every other test's tables too.
    """
    return MigrationContext.configure(
        connection,
        opts={
            "compare_type": True,
            "compare_server_default": True,
            "include_name": lambda name, type_, _parents: (
                type_ != "table" or str(name).startswith(prefix)
            ),
        },
    )


def autogenerate(connection: Connection, prefix: str) -> list[Any]:
    """What ``alembic revision --autogenerate`` would write for the tables of ``prefix``."""
    return compare_metadata(migration_context(connection, prefix), target_metadata(prefix))


def test_after_create_tables_autogenerate_proposes_nothing(engine: Engine, prefix: str) -> None:
    with engine.connect() as connection:
        before = autogenerate(connection, prefix)
    create_tables(engine, prefix)
    create_process_tables(engine, prefix)

    with engine.connect() as connection:
        after = autogenerate(connection, prefix)

    assert {diff[1].name for diff in before if diff[0] == "add_table"} == {
        f"{prefix}{name}" for name in NAMES
    }
    assert after == []


def test_the_migration_autogenerate_writes_makes_the_tables_create_tables_would(
    engine: Engine, prefix: str
) -> None:
    """A fresh database migrated by the team: the adapters' tables, nothing left to create."""
    with engine.begin() as connection:
        context = migration_context(connection, prefix)
        migration = produce_migrations(context, target_metadata(prefix))
        assert migration.upgrade_ops is not None
        upgrade = render_python_code(migration.upgrade_ops)  # the body of the revision's upgrade()
        body = textwrap.dedent("\n".join(upgrade.splitlines()[1:]))  # its first line is a comment
        exec(body, {"op": Operations(context), "sa": sqlalchemy})

    create_tables(engine, prefix)  # a process still calling it at import finds them all
    create_process_tables(engine, prefix)
    with engine.connect() as connection:
        left = autogenerate(connection, prefix)
    indexes = {
        index["name"]
        for name in inspect(engine).get_table_names()
        if name.startswith(prefix)
        for index in inspect(engine).get_indexes(name)
    }

    assert left == []
    assert indexes == {
        str(index.name)
        for table in tables(prefix).metadata.sorted_tables
        for index in table.indexes
    }
