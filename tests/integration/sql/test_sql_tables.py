"""The tables: the DDL the docs show is what ``create_tables`` runs, and prefixes keep apart."""

from __future__ import annotations

import multiprocessing
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, inspect
from sqlalchemy.dialects import postgresql

from ddd_celery.sql import create_tables, ddl, drop_tables, tables

DOCS = Path(__file__).resolve().parents[3] / "docs" / "sql.md"


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
        for name in (
            "locks",
            "job_checkpoints",
            "job_runs",
            "job_last_runs",
            "job_run_history",
            "job_pauses",
            "jobs",
        )
    }
    assert left == set()


@pytest.mark.parametrize("prefix", ["", "1ddd_", "ddd-", "ddd; drop table x; --"])
def test_a_prefix_that_is_not_a_plain_identifier_is_refused(prefix: str) -> None:
    with pytest.raises(ValueError, match="table prefix"):
        ddl(postgresql.dialect(), prefix)


RACERS = 4
ROUNDS = 5


def _create_when_all_are_ready(
    url: str, prefix: str, barrier: Any, errors: Any, create: Callable[[Engine, str], object]
) -> None:
    """One process of the race: its own engine, then ``create`` as soon as every racer waits."""
    engine = create_engine(url, connect_args={"connect_timeout": 5})
    try:
        engine.connect().close()  # connected before the start, so the calls meet at the DDL
        barrier.wait(timeout=30)
        create(engine, prefix)
    except Exception as error:
        errors.put(f"{type(error).__name__}: {str(error).splitlines()[0]}")
    finally:
        engine.dispose()


def race(engine: Engine, create: Callable[[Engine, str], object], prefix: str) -> list[str]:
    """The errors of ``RACERS`` processes calling ``create`` on ``prefix`` at once."""
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(RACERS)
    errors = context.Queue()
    url = engine.url.render_as_string(hide_password=False)
    racers = [
        context.Process(
            target=_create_when_all_are_ready, args=(url, prefix, barrier, errors, create)
        )
        for _ in range(RACERS)
    ]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(timeout=60)
    assert [racer.exitcode for racer in racers] == [0] * RACERS
    found: list[str] = []
    while not errors.empty():
        found.append(errors.get())
    return found


@pytest.mark.postgres
@pytest.mark.processes
def test_create_tables_from_four_processes_at_once_on_a_fresh_prefix_never_fails(
    engine: Engine,
) -> None:
    """Beat and every worker call ``create_tables`` at import: they start together."""
    errors: list[str] = []
    for _ in range(ROUNDS):
        prefix = f"test_{uuid.uuid4().hex[:12]}_"
        try:
            errors += race(engine, create_tables, prefix)
            made = {name for name in inspect(engine).get_table_names() if name.startswith(prefix)}
        finally:
            drop_tables(engine, prefix)
        assert len(made) == len(tables(prefix).metadata.tables)

    assert errors == []
