"""A jobs table made by the version before the attempts history, upgraded in place.

The table starts as that version's DDL made it (``docs/sql.md`` at that version, kept here
verbatim), with jobs in it: ``upgrade_jobs_table`` runs the statements the page shows, leaves
a table Alembic finds nothing to change in (the same as ``create_tables`` makes), does nothing
the second time, and the jobs kept are served by this version: found, listed, claimed with
their attempt recorded, completed, counted and purged. A team's Alembic autogenerate writes
the same change, and applied it leaves nothing for the upgrade.
"""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
from alembic.autogenerate import compare_metadata, produce_migrations, render_python_code
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy import Connection, Engine, MetaData, create_engine, text

from ddd_celery.background.store import (
    AttemptRecord,
    AttemptState,
    JobFilter,
    JobLease,
    JobState,
    JobStatus,
)
from ddd_celery.sql import SqlJobStore, create_tables, drop_tables, sqlite_engine
from ddd_celery.sql.tables import tables, upgrade_jobs_table

DOCS = Path(__file__).resolve().parents[3] / "docs" / "sql.md"

PREVIOUS_DDL = """
CREATE TABLE ddd_jobs (
    id TEXT NOT NULL,
    name TEXT NOT NULL,
    queue TEXT NOT NULL,
    status TEXT NOT NULL,
    payload TEXT NOT NULL,
    enqueued_at BIGINT NOT NULL,
    run_at BIGINT NOT NULL,
    attempts INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    correlation_id TEXT,
    actor TEXT,
    tenant_id TEXT,
    traceparent TEXT,
    tenant TEXT NOT NULL,
    idempotency_key TEXT,
    progress TEXT,
    checkpoint TEXT,
    last_error_code TEXT,
    last_error_type TEXT,
    lease_token TEXT,
    lease_ended TEXT,
    lease_expires_at BIGINT,
    finished_at BIGINT,
    dispatched_at BIGINT,
    relay_at BIGINT,
    redispatches INTEGER DEFAULT 0 NOT NULL,
    relay_token TEXT,
    PRIMARY KEY (id)
);

CREATE INDEX ddd_jobs_enqueued ON ddd_jobs (enqueued_at);

CREATE INDEX ddd_jobs_finished ON ddd_jobs (finished_at);

CREATE UNIQUE INDEX ddd_jobs_key ON ddd_jobs (tenant, idempotency_key);

CREATE INDEX ddd_jobs_lease ON ddd_jobs (lease_expires_at);

CREATE INDEX ddd_jobs_queue_due ON ddd_jobs (queue, status, run_at);

CREATE INDEX ddd_jobs_relay ON ddd_jobs (relay_at, dispatched_at);
"""
"""The jobs table of the version before (``git show 3c8ddf7:docs/sql.md``), prefix ``ddd_``."""

NOW = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
WEEK_AGO = NOW - timedelta(days=7)
KEPT = """
INSERT INTO {jobs} (id, name, queue, status, payload, enqueued_at, run_at, attempts,
    max_attempts, tenant_id, tenant, lease_token, lease_ended, lease_expires_at, finished_at,
    relay_at, redispatches)
VALUES
    ('old-succeeded', 'billing.send-invoice', 'billing', 'succeeded', '{{}}', {week} - 4,
        {week} - 4, 1, 3, NULL, '', 'token-1', 'complete', NULL, {week}, NULL, 0),
    ('old-dead', 'billing.send-invoice', 'billing', 'dead', '{{}}', {week} - 3, {week} - 3, 3,
        3, 't-1', 't-1', 'token-2', 'fail', NULL, {week}, NULL, 0),
    ('old-running', 'billing.charge', 'billing', 'running', '{{}}', {now} - 2, {now} - 2, 1,
        3, 't-1', 't-1', 'token-3', NULL, {now} + 60000000, NULL, NULL, 0),
    ('old-queued', 'billing.charge', 'billing', 'queued', '{{}}', {now} - 1, {now} - 1, 0, 3,
        NULL, '', NULL, NULL, NULL, NULL, {now} - 1, 0)
"""


def micros(instant: datetime) -> int:
    return (instant - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def make_previous_table(engine: Engine, prefix: str) -> None:
    """The jobs table as the version before made it, holding the jobs of ``KEPT``."""
    with engine.begin() as connection:
        for statement in PREVIOUS_DDL.replace("ddd_", prefix).split(";"):
            if statement.strip():
                connection.exec_driver_sql(statement)
        kept = KEPT.format(jobs=f"{prefix}jobs", week=micros(WEEK_AGO), now=micros(NOW))
        connection.execute(text(kept))


def documented_upgrade(prefix: str) -> list[str]:
    """The statements ``docs/sql.md`` shows for the upgrade, for ``prefix``."""
    page = DOCS.read_text(encoding="utf-8")
    block = page.split("<!-- upgrade-jobs-table -->\n```sql\n", 1)[1].split("```", 1)[0]
    return [line.removesuffix(";").replace("ddd_", prefix) for line in block.splitlines()]


def migration_context(connection: Connection, prefix: str) -> MigrationContext:
    """A team's ``env.py`` keeping to ``<prefix>jobs``, types and server defaults compared."""
    return MigrationContext.configure(
        connection,
        opts={
            "compare_type": True,
            "compare_server_default": True,
            "include_name": lambda name, type_, _parents: (
                type_ != "table" or name == f"{prefix}jobs"
            ),
        },
    )


def jobs_metadata(prefix: str) -> MetaData:
    jobs = MetaData()
    tables(prefix).jobs.to_metadata(jobs)
    return jobs


def left_to_change(engine: Engine, prefix: str) -> list[Any]:
    """What Alembic's autogenerate would still change in ``<prefix>jobs`` to match this
    version's metadata."""
    with engine.connect() as connection:
        return list(compare_metadata(migration_context(connection, prefix), jobs_metadata(prefix)))


@pytest.fixture
def prefix(engine: Engine) -> Iterator[str]:
    prefix = f"test_{uuid.uuid4().hex[:12]}_"
    make_previous_table(engine, prefix)
    yield prefix
    drop_tables(engine, prefix)


@pytest.mark.postgres
def test_create_tables_refuses_the_previous_table_naming_the_upgrade(
    engine: Engine, prefix: str
) -> None:
    with pytest.raises(RuntimeError, match=r"no column history.*upgrade_jobs_table"):
        create_tables(engine, prefix)


@pytest.mark.postgres
def test_upgrade_jobs_table_runs_the_documented_statements_and_leaves_nothing_to_change(
    engine: Engine, prefix: str
) -> None:
    assert left_to_change(engine, prefix) != []

    ran = upgrade_jobs_table(engine, prefix)

    assert ran == documented_upgrade(prefix)
    assert left_to_change(engine, prefix) == []
    assert upgrade_jobs_table(engine, prefix) == []  # once is enough: it can run at each deploy
    create_tables(engine, prefix)  # the other tables made, the jobs table accepted


@pytest.mark.postgres
def test_the_migration_alembic_writes_makes_the_same_change(engine: Engine, prefix: str) -> None:
    changes = left_to_change(engine, prefix)
    with engine.begin() as connection:
        context = migration_context(connection, prefix)
        migration = produce_migrations(context, jobs_metadata(prefix))
        assert migration.upgrade_ops is not None
        upgrade = render_python_code(migration.upgrade_ops)  # the body of the revision's upgrade()
        body = textwrap.dedent("\n".join(upgrade.splitlines()[1:]))  # its first line is a comment
        exec(body, {"op": Operations(context), "sa": sqlalchemy})

    assert sorted((change[0], _named(change)) for change in changes) == [
        ("add_column", "history"),
        ("add_index", f"{prefix}jobs_name"),
        ("add_index", f"{prefix}jobs_published"),
        ("add_index", f"{prefix}jobs_status"),
        ("add_index", f"{prefix}jobs_status_finished"),
        ("add_index", f"{prefix}jobs_tenant"),
        ("remove_index", f"{prefix}jobs_enqueued"),
        ("remove_index", f"{prefix}jobs_finished"),
    ]
    assert left_to_change(engine, prefix) == []
    assert upgrade_jobs_table(engine, prefix) == []  # nothing left for it either


def _named(change: tuple[Any, ...]) -> str:
    """What a diff of autogenerate changes: the column ``add_column`` adds (its last item),
    or the index of ``add_index`` and ``remove_index``."""
    return str(change[-1].name if change[0] == "add_column" else change[1].name)


@pytest.mark.postgres
def test_the_jobs_kept_through_the_upgrade_are_served_by_this_version(
    engine: Engine, prefix: str
) -> None:
    upgrade_jobs_table(engine, prefix)
    store = SqlJobStore(engine, prefix=prefix)
    later = NOW + timedelta(seconds=1)

    found = store.find("old-running", tenant_id="t-1")
    listed = store.list_page(JobFilter(), now=NOW, limit=10)
    claimed = store.claim_job("old-queued", now=NOW, lease_ms=60_000, worker="celery@w-1")
    running = JobLease("old-running", 1, "token-3", NOW + timedelta(minutes=1))
    store.complete(running, now=later)

    assert found is not None
    assert found.history == ()  # its attempt was made before: not told
    assert [job.id for job in listed.jobs] == [
        "old-queued",
        "old-running",
        "old-dead",
        "old-succeeded",
    ]
    assert [job.id for job in store.list_page(JobFilter(state=JobState.DEAD), now=NOW).jobs] == [
        "old-dead"
    ]
    assert claimed is not None
    assert claimed.job.history == (AttemptRecord(1, NOW, "celery@w-1"),)
    completed = store.find("old-running", tenant_id=None)
    assert completed is not None
    assert (completed.status, completed.history) == (JobStatus.SUCCEEDED, ())
    assert store.stats().by_name == {
        "billing.send-invoice": {JobStatus.SUCCEEDED: 1, JobStatus.DEAD: 1},
        "billing.charge": {JobStatus.RUNNING: 1, JobStatus.SUCCEEDED: 1},
    }
    assert store.purge_finished(before=NOW) == 2  # the week-old ones, on the new index
    store.complete(claimed.lease, now=later)
    succeeded = store.find("old-queued", tenant_id=None)
    assert succeeded is not None
    assert succeeded.history == (
        AttemptRecord(1, NOW, "celery@w-1", AttemptState.SUCCEEDED, later),
    )


@pytest.mark.postgres
def test_a_table_made_by_0_1_0_is_refused_its_own_upgrade_comes_first(engine: Engine) -> None:
    prefix = f"test_{uuid.uuid4().hex[:12]}_"
    with engine.begin() as connection:
        connection.exec_driver_sql(f"CREATE TABLE {prefix}jobs (id TEXT PRIMARY KEY, name TEXT)")
    try:
        with pytest.raises(RuntimeError, match=r"made by 0\.1\.0"):
            upgrade_jobs_table(engine, prefix)
    finally:
        drop_tables(engine, prefix)


def test_upgrade_jobs_table_on_sqlite_brings_the_previous_table_to_this_version(
    tmp_path: Path,
) -> None:
    path = tmp_path / "jobs.sqlite3"
    previous = create_engine(f"sqlite:///{path}")
    make_previous_table(previous, "ddd_")
    previous.dispose()
    engine = sqlite_engine(path, prefix=None)  # the schema is the upgrade's

    ran = upgrade_jobs_table(engine)
    store = SqlJobStore(engine)
    claimed = store.claim_job("old-queued", now=NOW, lease_ms=60_000, worker="celery@w-1")

    assert ran == documented_upgrade("ddd_")  # the same statements on SQLite
    assert upgrade_jobs_table(engine) == []
    assert claimed is not None
    assert claimed.job.history == (AttemptRecord(1, NOW, "celery@w-1"),)
    assert [job.id for job in store.list_page(JobFilter(name="billing.charge"), now=NOW).jobs] == [
        "old-queued",
        "old-running",
    ]
    engine.dispose()
