"""``SqliteJobLastRuns``: the record of each job's latest occurrence, kept in a SQLite file.

Table ``ddd_job_last_runs``, one row per job::

    job           TEXT PRIMARY KEY   the job's name
    scheduled_at  INTEGER            the occurrence recorded, microseconds since the Unix epoch
    run           TEXT               its record, a JSON object
"""

from __future__ import annotations

import json
import os

from ddd_celery.scheduling.last_runs import JobLastRuns, run_as_dict, run_from_dict
from ddd_celery.scheduling.outcomes import JobRun
from ddd_celery.sqlite._database import (
    DEFAULT_BUSY_TIMEOUT_MS,
    SqliteFile,
    StoreUnavailableError,
    to_micros,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS ddd_job_last_runs (
    job TEXT PRIMARY KEY,
    scheduled_at INTEGER NOT NULL,
    run TEXT NOT NULL
) WITHOUT ROWID;
"""


class SqliteJobLastRuns(JobLastRuns):
    """The last runs of the beat and workers of one machine, read by any process there.

    A write is one upsert in one transaction that keeps the row unless the new record's
    occurrence is the same or later, so writers racing keep the latest occurrence. Raises
    ``StoreUnavailableError`` when the file cannot be asked.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS
    ) -> None:
        self._file = SqliteFile(
            path, _SCHEMA, busy_timeout_ms=busy_timeout_ms, unavailable=StoreUnavailableError
        )

    def write(self, run: JobRun) -> None:
        record = json.dumps(run_as_dict(run), separators=(",", ":"))
        micros = to_micros(run.scheduled_at, "scheduled_at")
        with self._file.transaction(f"write the last run of {run.job!r}") as connection:
            connection.execute(
                "INSERT INTO ddd_job_last_runs (job, scheduled_at, run) VALUES (?, ?, ?) "
                "ON CONFLICT (job) DO UPDATE SET scheduled_at = excluded.scheduled_at, "
                "run = excluded.run WHERE excluded.scheduled_at >= ddd_job_last_runs.scheduled_at",
                (run.job, micros, record),
            )

    def read(self, job: str) -> JobRun | None:
        row = self._file.read(
            f"read the last run of {job!r}",
            "SELECT run FROM ddd_job_last_runs WHERE job = ?",
            (job,),
        )
        return None if row is None else run_from_dict(json.loads(row[0]))

    def close(self) -> None:
        """Close this thread's connection to the file (a later call reopens one)."""
        self._file.close()
