"""The tables of the SQL adapters, on SQLAlchemy Core metadata: one definition, every database.

``create_tables(engine, prefix="ddd_")`` creates what is missing; ``ddl(dialect)`` prints the
same as ``CREATE TABLE`` statements for teams whose migrations (Alembic) own the schema. Every
name takes ``prefix``, so several applications (or test runs) share one database.

Instants are ``BIGINT`` microseconds since the Unix epoch, in UTC: exact, indexable, compared
the same way on PostgreSQL and SQLite, and read in ``psql`` with ``to_timestamp(col / 1e6)``.
JSON values are ``TEXT`` written by ``json.dumps``, read back unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import (
    BigInteger,
    Column,
    Engine,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
)
from sqlalchemy.engine.interfaces import Dialect
from sqlalchemy.schema import CreateIndex, CreateTable

DEFAULT_PREFIX = "ddd_"


@dataclass(frozen=True, slots=True)
class SqlTables:
    """The tables of one prefix, as every adapter of that prefix reads them."""

    metadata: MetaData
    locks: Table
    checkpoints: Table
    runs: Table
    last_runs: Table
    jobs: Table


def tables(prefix: str = DEFAULT_PREFIX) -> SqlTables:
    """The tables named with ``prefix`` (``ddd_locks``, ``ddd_jobs``... by default)."""
    if not prefix.replace("_", "").isalnum() or not prefix[0].isalpha():
        raise ValueError(
            f"a table prefix is letters, digits and underscores, starting with a letter, "
            f"not {prefix!r}"
        )
    metadata = MetaData()
    locks = Table(
        f"{prefix}locks",
        metadata,
        Column("key", Text, primary_key=True),
        Column("token", Text, nullable=False),
        Column("expires_at", BigInteger, nullable=False),
    )
    Index(f"{prefix}locks_expires_at", locks.c.expires_at)
    checkpoints = Table(
        f"{prefix}job_checkpoints",
        metadata,
        Column("job", Text, primary_key=True),
        Column("handled_at", BigInteger, nullable=False),
    )
    runs = Table(
        f"{prefix}job_runs",
        metadata,
        Column("job", Text, primary_key=True),
        Column("running", BigInteger, nullable=False),
        Column("expires_at", BigInteger, nullable=False),
        Column("queued", BigInteger, nullable=True),
    )
    last_runs = Table(
        f"{prefix}job_last_runs",
        metadata,
        Column("job", Text, primary_key=True),
        Column("scheduled_at", BigInteger, nullable=False),
        Column("run", Text, nullable=False),
    )
    jobs = Table(
        f"{prefix}jobs",
        metadata,
        Column("id", Text, primary_key=True),
        Column("name", Text, nullable=False),
        Column("queue", Text, nullable=False),
        Column("status", Text, nullable=False),
        Column("payload", Text, nullable=False),
        Column("enqueued_at", BigInteger, nullable=False),
        Column("run_at", BigInteger, nullable=False),
        Column("attempts", Integer, nullable=False),
        Column("max_attempts", Integer, nullable=False),
        Column("correlation_id", Text),
        Column("actor", Text),
        Column("tenant_id", Text),
        Column("traceparent", Text),
        Column("tenant", Text, nullable=False),
        Column("idempotency_key", Text),
        Column("progress", Text),
        Column("checkpoint", Text),
        Column("last_error_code", Text),
        Column("last_error_type", Text),
        Column("lease_token", Text),
        Column("lease_expires_at", BigInteger),
        Column("finished_at", BigInteger),
        Column("dispatched_at", BigInteger),
        Column("relay_at", BigInteger),
        Column("redispatches", Integer, nullable=False, server_default="0"),
        Column("relay_token", Text),
    )
    Index(f"{prefix}jobs_key", jobs.c.tenant, jobs.c.idempotency_key, unique=True)
    Index(f"{prefix}jobs_queue_due", jobs.c.queue, jobs.c.status, jobs.c.run_at)
    Index(f"{prefix}jobs_relay", jobs.c.relay_at, jobs.c.dispatched_at)
    Index(f"{prefix}jobs_relay_token", jobs.c.relay_token)
    Index(f"{prefix}jobs_lease", jobs.c.lease_expires_at)
    Index(f"{prefix}jobs_finished", jobs.c.finished_at)
    Index(f"{prefix}jobs_enqueued", jobs.c.enqueued_at)
    return SqlTables(metadata, locks, checkpoints, runs, last_runs, jobs)


def create_tables(engine: Engine, prefix: str = DEFAULT_PREFIX) -> SqlTables:
    """Create the tables (and indexes) of ``prefix`` that do not exist yet; idempotent."""
    made = tables(prefix)
    made.metadata.create_all(engine)
    return made


def drop_tables(engine: Engine, prefix: str = DEFAULT_PREFIX) -> None:
    """Drop the tables of ``prefix`` (tests, teardown); those missing are left alone."""
    tables(prefix).metadata.drop_all(engine)


def ddl(dialect: Dialect, prefix: str = DEFAULT_PREFIX) -> str:
    """The ``CREATE TABLE`` and ``CREATE INDEX`` statements of ``prefix`` for ``dialect``.

    What ``create_tables`` runs, as text for a migration: ``docs/sql.md`` shows it, and a test
    keeps the page equal to it.
    """
    statements: list[str] = []
    for table in tables(prefix).metadata.sorted_tables:
        statements.append(_tidy(CreateTable(table).compile(dialect=dialect)))
        for index in sorted(table.indexes, key=lambda index: str(index.name)):
            statements.append(_tidy(CreateIndex(index).compile(dialect=dialect)))
    return "\n\n".join(statements) + "\n"


def _tidy(statement: object) -> str:
    """A compiled statement as a page shows it: indented by spaces, no trailing blanks."""
    lines = str(statement).strip().replace("\t", "    ").splitlines()
    return "\n".join(line.rstrip() for line in lines) + ";"
