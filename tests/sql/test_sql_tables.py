"""The tables: the DDL the docs show is what ``create_tables`` runs, and prefixes keep apart."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
from sqlalchemy import Engine, inspect
from sqlalchemy.dialects import postgresql

from ddd_celery.sql import create_tables, ddl, drop_tables

DOCS = Path(__file__).resolve().parents[2] / "docs" / "sql.md"


def test_the_ddl_in_the_docs_is_the_ddl_of_the_metadata() -> None:
    blocks = re.findall(r"```sql\n(.*?)```", DOCS.read_text(encoding="utf-8"), flags=re.DOTALL)

    assert blocks[-1] == ddl(postgresql.dialect())


@pytest.mark.postgres
def test_create_tables_makes_the_tables_of_its_prefix_once_and_drop_tables_removes_them(
    engine: Engine,
) -> None:
    prefix = f"test_{uuid.uuid4().hex[:12]}_"
    create_tables(engine, prefix)
    create_tables(engine, prefix)
    made = {name for name in inspect(engine).get_table_names() if name.startswith(prefix)}
    drop_tables(engine, prefix)
    left = {name for name in inspect(engine).get_table_names() if name.startswith(prefix)}

    assert made == {
        f"{prefix}{name}"
        for name in ("locks", "job_checkpoints", "job_runs", "job_last_runs", "jobs")
    }
    assert left == set()


@pytest.mark.parametrize("prefix", ["", "1ddd_", "ddd-", "ddd; drop table x; --"])
def test_a_prefix_that_is_not_a_plain_identifier_is_refused(prefix: str) -> None:
    with pytest.raises(ValueError, match="table prefix"):
        ddl(postgresql.dialect(), prefix)
