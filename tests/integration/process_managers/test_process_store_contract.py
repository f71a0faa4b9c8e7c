"""What the SQL process store adds to the ProcessStore contract (which runs with every other
adapter's in tests/contracts): its DDL for migrations, its refusals, the upgrade of a table made
before tenants, and processes creating the table at once.

PostgreSQL (DATABASE_URL) gets tables under prefixes of this module's own, dropped at the end,
since other tests share the server.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from services import DATABASE_URL
from sqlalchemy import Engine, create_engine, inspect

from ddd_celery.processes import StoredProcess
from ddd_celery.sql.process_store import (
    SqlProcessStore,
    create_process_tables,
    drop_process_tables,
    process_ddl,
    process_table,
)


def test_the_ddl_for_a_migration_makes_the_table_the_store_uses(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'migrated.sqlite3'}")
    statement = process_ddl(engine.dialect, "app_")
    assert statement.startswith("CREATE TABLE app_processes (")
    with engine.begin() as connection:
        connection.exec_driver_sql(statement)
    store = SqlProcessStore(engine, prefix="app_")
    saved = StoredProcess("booking.appointment-booking", "b-1", 1, {"n": 1}, {"payment": "j-1"})
    store.save(saved, expected_version=0)
    assert store.load("booking.appointment-booking", "b-1", tenant_id=None) == saved
    engine.dispose()


def test_a_table_prefix_the_sql_family_refuses_is_refused() -> None:
    with pytest.raises(ValueError, match="a table prefix"):
        process_table("1; drop table")


OLD_TABLE = """CREATE TABLE {prefix}processes (
    process TEXT NOT NULL,
    id TEXT NOT NULL,
    version INTEGER NOT NULL,
    state TEXT NOT NULL,
    timeouts TEXT NOT NULL,
    CONSTRAINT {prefix}processes_pkey PRIMARY KEY (process, id)
)"""
"""The table as it was made before instances were keyed by tenant."""


def _upgrade_statements(prefix: str) -> list[str]:
    """The statements docs/processes.md gives to upgrade that table, for ``prefix``."""
    page = (Path(__file__).parents[3] / "docs" / "processes.md").read_text()
    block = page.split("<!-- upgrade-processes-table -->\n```sql\n", 1)[1].split("```", 1)[0]
    return [
        line.replace("ddd_processes", f"{prefix}processes")
        for line in block.splitlines()
        if line.strip()
    ]


def test_a_table_made_before_tenants_is_refused_not_used(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'old.sqlite3'}")
    with engine.begin() as connection:
        connection.exec_driver_sql(OLD_TABLE.format(prefix="app_"))
    with pytest.raises(RuntimeError, match="app_processes has no tenant column"):
        create_process_tables(engine, "app_")
    engine.dispose()


@pytest.mark.postgres
def test_the_documented_upgrade_keeps_the_instances_as_of_no_tenant_and_matches_the_table(
    engine: Engine,
) -> None:
    prefix = f"test_{uuid.uuid4().hex[:12]}_"
    with engine.begin() as connection:
        connection.exec_driver_sql(OLD_TABLE.format(prefix=prefix))
        connection.exec_driver_sql(
            f"INSERT INTO {prefix}processes VALUES ('booking.x', 'b-1', 3, '{{\"n\": 3}}', '{{}}')"
        )
    try:
        with engine.begin() as connection:
            for statement in _upgrade_statements(prefix):
                connection.exec_driver_sql(statement)
        create_process_tables(engine, prefix)
        store = SqlProcessStore(engine, prefix=prefix)

        assert store.load("booking.x", "b-1", tenant_id=None) == StoredProcess(
            "booking.x", "b-1", 3, {"n": 3}
        )
        assert store.load("booking.x", "b-1", tenant_id="acme") is None
        found = inspect(engine)
        made = process_table(prefix)
        columns = {(c["name"], c["nullable"], c["default"]) for c in found.get_columns(made.name)}
        assert columns == {(column.name, False, None) for column in made.columns}
        key = found.get_pk_constraint(made.name)
        assert (key["name"], key["constrained_columns"]) == (
            f"{prefix}processes_pkey",
            ["tenant", "process", "id"],
        )
    finally:
        drop_process_tables(engine, prefix)


CREATE_WHEN_TOLD = """
import sys
from sqlalchemy import create_engine
from ddd_celery.sql.process_store import create_process_tables
engine = create_engine(sys.argv[1])
with engine.connect():  # connected before the first prefix comes, so that the calls meet
    print("ready", flush=True)
for line in sys.stdin:  # a prefix to create the table of, each time
    try:
        create_process_tables(engine, line.strip())
        print("created", flush=True)
    except Exception as error:
        print(type(error).__name__, flush=True)
"""


@pytest.mark.postgres
def test_processes_creating_the_table_at_once_all_succeed(
    engine: Engine,
) -> None:
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CREATE_WHEN_TOLD, DATABASE_URL],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    prefixes = [f"test_{uuid.uuid4().hex[:12]}_" for _ in range(10)]
    answers: list[list[str]] = []
    try:
        for child in children:
            assert child.stdout is not None
            assert child.stdout.readline() == "ready\n"
        for prefix in prefixes:
            for child in children:
                assert child.stdin is not None
                child.stdin.write(f"{prefix}\n")
                child.stdin.flush()
            answers.append([child.stdout.readline().strip() for child in children])  # type: ignore[union-attr]
    finally:
        for child in children:
            child.communicate(timeout=30)  # its stdin closed, it ends; its pipes closed
        for prefix in prefixes:
            drop_process_tables(engine, prefix)

    assert answers == [["created"] * 4] * len(prefixes)
