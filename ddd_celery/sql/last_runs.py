"""``SqlJobLastRuns``: each scheduled job's latest occurrence, in ``<prefix>job_last_runs``."""

from __future__ import annotations

import json

from sqlalchemy import Engine, select

from ddd_celery.scheduling.last_runs import JobLastRuns, run_from_dict
from ddd_celery.scheduling.outcomes import JobRun
from ddd_celery.sql.connection import Connector
from ddd_celery.sql.errors import StoreUnavailableError
from ddd_celery.sql.rows import LastRunRows
from ddd_celery.sql.tables import DEFAULT_PREFIX, tables


class SqlJobLastRuns(JobLastRuns):
    """The last runs written by beats and workers, read by ``celery jobs list`` anywhere.

    A write is one upsert that keeps the row unless the new record's occurrence is the same or
    later, so writers racing keep the latest occurrence. Raises ``StoreUnavailableError`` when
    the database cannot be asked.
    """

    def __init__(self, engine: Engine, *, prefix: str = DEFAULT_PREFIX) -> None:
        self._connector = Connector(engine, unavailable=StoreUnavailableError)
        self._table = tables(prefix).last_runs
        self.rows = LastRunRows(engine, self._table)
        """The write, which ``SqlOccurrenceStore`` runs in its own transactions."""
        self.engine = engine

    def write(self, run: JobRun) -> None:
        with self._connector.transaction(
            f"write the last run of {run.job!r}", single=True
        ) as connection:
            self.rows.write(connection, run)

    def read(self, job: str) -> JobRun | None:
        table = self._table
        with self._connector.transaction(
            f"read the last run of {job!r}", single=True
        ) as connection:
            record = connection.scalar(select(table.c.run).where(table.c.job == job))
        return None if record is None else run_from_dict(json.loads(record))
