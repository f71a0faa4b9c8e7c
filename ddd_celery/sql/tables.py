"""The tables of the SQL adapters, on SQLAlchemy Core metadata: one definition, every database.

``create_tables(engine, prefix="ddd_")`` creates what is missing, safe when processes race;
``ddl(dialect)`` prints the same as ``CREATE TABLE`` statements, and ``tables(prefix).metadata``
is what a team's Alembic ``target_metadata`` takes when its migrations own the schema. Every
name takes ``prefix``, so several applications (or test runs) share one database.

Instants are ``BIGINT`` microseconds since the Unix epoch, in UTC: exact, indexable, compared
the same way on PostgreSQL and SQLite, and read in ``psql`` with ``to_timestamp(col / 1e6)``.
JSON values are ``TEXT`` written by ``json.dumps``, read back unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Engine,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
    and_,
    inspect,
    text,
)
from sqlalchemy.engine import Inspector
from sqlalchemy.engine.interfaces import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.schema import CreateColumn, CreateIndex, CreateTable

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
    run_history: Table
    pauses: Table


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
    run_history = Table(
        f"{prefix}job_run_history",
        metadata,
        Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True),
        Column("job", Text, nullable=False),
        Column("run", Text, nullable=False),
    )
    Index(f"{prefix}job_run_history_job", run_history.c.job, run_history.c.id)
    pauses = Table(
        f"{prefix}job_pauses",
        metadata,
        Column("job", Text, primary_key=True),
        Column("paused_at", BigInteger, nullable=False),
        Column("paused_by", Text, nullable=False),
        Column("reason", Text),
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
        Column("lease_ended", Text),
        Column("lease_expires_at", BigInteger),
        Column("finished_at", BigInteger),
        Column("dispatched_at", BigInteger),
        Column("relay_at", BigInteger),
        Column("redispatches", Integer, nullable=False, server_default=text("0")),
        Column("relay_token", Text),
        Column("history", Text, nullable=False, server_default=text("'[]'")),
    )
    Index(f"{prefix}jobs_key", jobs.c.tenant, jobs.c.idempotency_key, unique=True)
    Index(f"{prefix}jobs_queue_due", jobs.c.queue, jobs.c.status, jobs.c.run_at)
    Index(f"{prefix}jobs_relay", jobs.c.relay_at, jobs.c.dispatched_at)
    # the claimable jobs add published, waiting for their claim: the relay reads them oldest
    # first (the status in the predicate: only then does the planner count them right)
    published = and_(jobs.c.relay_at.is_(None), jobs.c.status.in_(["failed", "queued"]))
    Index(
        f"{prefix}jobs_published",
        jobs.c.dispatched_at,
        postgresql_where=published,
        sqlite_where=published,
    )
    # Indexed only where set: a job enqueued has no lease, no end and (a global job) no
    # tenant, so a batch's insert writes three index entries fewer a job; every query of
    # these indexes compares the column, which tells the planner it is set.
    leased, finished = jobs.c.lease_expires_at.isnot(None), jobs.c.finished_at.isnot(None)
    of_a_tenant = jobs.c.tenant_id.isnot(None)
    Index(
        f"{prefix}jobs_lease",
        jobs.c.lease_expires_at,
        postgresql_where=leased,
        sqlite_where=leased,
    )
    # the operator's listings, newest first within a status (a listing of any status merges
    # one range per status), and the purge's oldest finished first within a status
    Index(f"{prefix}jobs_status", jobs.c.status, jobs.c.enqueued_at, jobs.c.id)
    Index(f"{prefix}jobs_name", jobs.c.name, jobs.c.status, jobs.c.enqueued_at, jobs.c.id)
    Index(
        f"{prefix}jobs_tenant",
        jobs.c.tenant_id,
        jobs.c.status,
        jobs.c.enqueued_at,
        jobs.c.id,
        postgresql_where=of_a_tenant,
        sqlite_where=of_a_tenant,
    )
    Index(
        f"{prefix}jobs_status_finished",
        jobs.c.status,
        jobs.c.finished_at,
        postgresql_where=finished,
        sqlite_where=finished,
    )
    return SqlTables(metadata, locks, checkpoints, runs, last_runs, jobs, run_history, pauses)


def create_tables(engine: Engine, prefix: str = DEFAULT_PREFIX) -> SqlTables:
    """Create the tables (and indexes) of ``prefix`` that do not exist yet; idempotent, and safe
    when several processes (beat and each worker, at import) call it at once
    (``create_missing``).

    Raises ``RuntimeError`` when ``<prefix>jobs`` exists without a column of this version (made
    by an earlier one): ``upgrade_jobs_table`` upgrades it, as ``docs/sql.md`` shows.
    """
    made = tables(prefix)
    create_missing(engine, made.metadata)
    missing = _missing_columns(inspect(engine), made.jobs)
    if missing:
        raise RuntimeError(
            f"table {made.jobs.name} has no column {', '.join(missing)}: it was made by an "
            f"earlier version of ddd_celery; upgrade it with upgrade_jobs_table(engine, "
            f"{prefix!r}) or the statements of docs/sql.md"
        )
    return made


PREVIOUS_JOBS_INDEXES = ("jobs_enqueued", "jobs_finished")
"""The indexes of the jobs table before the attempts history, replaced by the listing and
purge indexes (their names after the prefix)."""


def upgrade_jobs_table(engine: Engine, prefix: str = DEFAULT_PREFIX) -> list[str]:
    """Bring ``<prefix>jobs``, made before the attempts history, up to this version; the
    statements it ran (none for a table already up to date, or missing: run it at every
    deploy if you like).

    Adds ``history`` (``'[]'`` for every job: the attempts made before are not told), creates
    the listing, purge and relay indexes it lacks, drops the two they replace. One transaction,
    under ddd_celery's DDL lock on PostgreSQL, where each ``CREATE INDEX`` holds off the table's
    writes while it builds: run it with beat and the workers stopped, or create the indexes
    ``CONCURRENTLY`` first (``docs/sql.md``). A table made by 0.1.0 is refused
    (``RuntimeError``): its own upgrade comes first.
    """
    jobs = tables(prefix).jobs
    with _ddl_transaction(engine) as connection:
        found = inspect(connection)
        if not found.has_table(jobs.name):
            return []
        missing = _missing_columns(found, jobs)
        if set(missing) - {"history"}:
            raise RuntimeError(
                f"table {jobs.name} has no column {', '.join(missing)}: it was made by 0.1.0; "
                "upgrade it first as docs/sql.md shows"
            )
        statements = [
            f"ALTER TABLE {jobs.name} ADD COLUMN "
            + str(CreateColumn(jobs.c[name]).compile(dialect=connection.dialect)).strip()
            for name in missing
        ]
        indexes = {index["name"] for index in found.get_indexes(jobs.name)}
        statements += [
            f"DROP INDEX {prefix}{name}"
            for name in PREVIOUS_JOBS_INDEXES
            if prefix + name in indexes
        ]
        statements += [
            str(CreateIndex(index).compile(dialect=connection.dialect)).strip()
            for index in sorted(jobs.indexes, key=lambda index: str(index.name))
            if index.name not in indexes
        ]
        for statement in statements:
            connection.exec_driver_sql(statement)
    return statements


def _missing_columns(found: Inspector, table: Table) -> list[str]:
    """The columns of ``table`` the database's table lacks (none when it does not exist)."""
    if not found.has_table(table.name):
        return []
    there = {column["name"] for column in found.get_columns(table.name)}
    return [column.name for column in table.columns if column.name not in there]


def drop_tables(engine: Engine, prefix: str = DEFAULT_PREFIX) -> None:
    """Drop the tables of ``prefix`` (tests, teardown); those missing are left alone."""
    with _ddl_transaction(engine) as connection:
        tables(prefix).metadata.drop_all(connection)


DDL_LOCK_KEY = 0x0DDDCE1E7AB1E5
"""The PostgreSQL advisory lock every ``create_missing`` and ``drop_tables`` of ddd_celery takes,
whatever the prefix: DDL is rare, so one key is enough."""
_ALREADY_THERE = frozenset({"23505", "42P07", "42710"})
"""unique_violation (on ``pg_type``: a table's row type), duplicate_table, duplicate_object."""
_ATTEMPTS = 3


def create_missing(engine: Engine, metadata: MetaData) -> None:
    """``metadata.create_all``, safe when several processes run it at once on one database.

    ``create_all`` checks what exists, then creates what does not: two processes both see a
    table missing, and the second's ``CREATE TABLE`` fails (``IntegrityError`` on
    ``pg_type_typname_nsp_index``, or "already exists"). On PostgreSQL the check and the DDL run
    in one transaction under an advisory lock (``pg_advisory_xact_lock``, released at commit),
    so the next process checks after the first committed. A creator that takes no such lock (a
    migration, an older version) can still race: a duplicate table, type or index is then taken
    for "created meanwhile", and the check runs again (SQLite's "already exists" alike).
    """
    for attempt in range(1, _ATTEMPTS + 1):
        try:
            with _ddl_transaction(engine) as connection:
                metadata.create_all(connection)
            return
        except DBAPIError as error:
            if attempt == _ATTEMPTS or not _created_meanwhile(error):
                raise


@contextmanager
def _ddl_transaction(engine: Engine) -> Iterator[Connection]:
    """A transaction that holds ddd_celery's DDL lock on PostgreSQL until it ends."""
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": DDL_LOCK_KEY})
        yield connection


def _created_meanwhile(error: DBAPIError) -> bool:
    """Whether ``error`` says another process created the object first."""
    code = getattr(error.orig, "sqlstate", None) or getattr(error.orig, "pgcode", None)
    if code is not None:
        return code in _ALREADY_THERE
    return "already exists" in str(error.orig)


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
