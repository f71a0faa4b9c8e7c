"""SQLAlchemy 2 Core adapters of every port, on PostgreSQL (psycopg 3) and SQLite.

Install the ``sql`` extra; the core never imports this package, nor SQLAlchemy. Create the
tables with ``create_tables(engine)`` (or from ``ddl(...)`` in a migration); every adapter takes
the same ``prefix``. ``SqlJobStore(engine, unit_of_work=...)`` writes in the use case's
transaction: the job row is the outbox. ``sqlite_engine(path)`` is the embedded default's
engine, one file the processes of a machine share. See ``docs/sql.md``.
"""

from ddd_celery.sql.checkpoints import SqlJobCheckpoints
from ddd_celery.sql.connection import sqlite_engine
from ddd_celery.sql.errors import MissingTablesError, StoreUnavailableError
from ddd_celery.sql.job_store import DEFAULT_OUTBOX_GRACE_MS, SqlJobStore
from ddd_celery.sql.last_runs import SqlJobLastRuns
from ddd_celery.sql.lock import SqlLock
from ddd_celery.sql.process_store import SqlProcessStore, create_process_tables
from ddd_celery.sql.run_state import SqlJobRunState
from ddd_celery.sql.tables import (
    DEFAULT_PREFIX,
    SqlTables,
    create_tables,
    ddl,
    drop_tables,
    tables,
    upgrade_jobs_table,
)
from ddd_celery.sql.unit_of_work import SqlAlchemyUnitOfWork

__all__ = [
    "DEFAULT_OUTBOX_GRACE_MS",
    "DEFAULT_PREFIX",
    "MissingTablesError",
    "SqlAlchemyUnitOfWork",
    "SqlJobCheckpoints",
    "SqlJobLastRuns",
    "SqlJobRunState",
    "SqlJobStore",
    "SqlLock",
    "SqlProcessStore",
    "SqlTables",
    "StoreUnavailableError",
    "create_process_tables",
    "create_tables",
    "ddl",
    "drop_tables",
    "sqlite_engine",
    "tables",
    "upgrade_jobs_table",
]
