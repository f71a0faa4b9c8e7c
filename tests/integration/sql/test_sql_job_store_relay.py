"""SqlJobStore's relay query and clock on the real PostgreSQL: ``take_due`` reads the jobs to
publish on an index, not the backlog of jobs already published and waiting for a worker; and
``store_time`` is the database's clock.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event, func, select, text
from sqlalchemy.orm import sessionmaker

from ddd_celery.background.store import EnqueuedBy, NewJob
from ddd_celery.sql import (
    SqlAlchemyUnitOfWork,
    SqlJobStore,
    create_tables,
    drop_tables,
    sqlite_engine,
)

NOW = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)
BACKLOG = 2_000
REDISPATCH_MS = 30_000


@pytest.fixture
def prefix(engine: Engine) -> Iterator[str]:
    prefix = f"test_{uuid.uuid4().hex[:12]}_"
    create_tables(engine, prefix)
    yield prefix
    drop_tables(engine, prefix)


def new_job(job_id: str) -> NewJob:
    return NewJob(
        id=job_id,
        name="sqlrelay.compile-statement",
        queue="sqlrelay",
        payload={"month": "2026-10"},
        enqueued_at=NOW,
        run_at=NOW,
        max_attempts=3,
        enqueued_by=EnqueuedBy(),
    )


def rows_read(plan: dict[str, Any], table: str) -> int:
    """Rows the plan fetched from ``table`` or its indexes, those its filters dropped included."""
    read = 0
    if plan.get("Relation Name") == table or str(plan.get("Index Name", "")).startswith(table):
        read += plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0)
    for child in plan.get("Plans", []):
        read += rows_read(child, table)
    return read


@pytest.mark.postgres
def test_take_due_reads_on_an_index_none_of_a_backlog_already_published(
    engine: Engine, prefix: str
) -> None:
    store = SqlJobStore(engine, prefix=prefix)
    unit_of_work = SqlAlchemyUnitOfWork(sessionmaker(engine))
    adding = SqlJobStore(engine, unit_of_work=unit_of_work, prefix=prefix)
    with unit_of_work.begin():
        for index in range(BACKLOG):
            adding.add(new_job(f"job-{index:05}"), dispatched=False)
    published = store.take_due(now=NOW, limit=BACKLOG, redispatch_after_ms=REDISPATCH_MS)
    assert len(published) == BACKLOG  # a backlog published, no worker claims it yet
    with engine.execution_options(isolation_level="AUTOCOMMIT").connect() as connection:
        connection.execute(text(f"VACUUM ANALYZE {prefix}jobs"))  # what autovacuum does
    statements: list[tuple[str, Any]] = []

    def sent(_c: object, _cursor: object, statement: str, parameters: Any, *_: object) -> None:
        statements.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", sent)
    try:
        later = NOW + timedelta(seconds=1)
        assert store.take_due(now=later, limit=100, redispatch_after_ms=REDISPATCH_MS) == []
    finally:
        event.remove(engine, "before_cursor_execute", sent)

    [(statement, parameters)] = [sent for sent in statements if "UPDATE" in sent[0]]
    with engine.connect() as connection:
        explained = connection.exec_driver_sql(
            f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", parameters
        ).scalar_one()
        connection.rollback()
    plan = (json.loads(explained) if isinstance(explained, str) else explained)[0]["Plan"]
    assert rows_read(plan, f"{prefix}jobs") < 50, "take_due read the backlog"


@pytest.mark.postgres
def test_store_time_is_the_clock_of_postgresql(engine: Engine, prefix: str) -> None:
    store = SqlJobStore(engine, prefix=prefix)
    with engine.connect() as connection:
        before = connection.scalar(select(func.clock_timestamp()))
        read = store.store_time()
        after = connection.scalar(select(func.clock_timestamp()))

    assert read is not None
    assert read.utcoffset() == timedelta(0)
    assert before <= read <= after


def test_store_time_on_sqlite_is_none_the_caller_s_clock_rules(tmp_path: Path) -> None:
    engine = sqlite_engine(tmp_path / "jobs.sqlite3")

    assert SqlJobStore(engine).store_time() is None
    engine.dispose()
