"""``SqliteJobCheckpoints``: the last occurrence handled per job, kept in a SQLite file.

Table ``ddd_job_checkpoints``, one row per job::

    job         TEXT PRIMARY KEY   the job's name
    handled_at  INTEGER            microseconds since the Unix epoch
"""

from __future__ import annotations

import os
from datetime import datetime

from ddd_celery.scheduling.checkpoints import JobCheckpoints
from ddd_celery.sqlite._database import (
    DEFAULT_BUSY_TIMEOUT_MS,
    SqliteFile,
    StoreUnavailableError,
    from_micros,
    to_micros,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS ddd_job_checkpoints (
    job TEXT PRIMARY KEY,
    handled_at INTEGER NOT NULL
) WITHOUT ROWID;
"""


class SqliteJobCheckpoints(JobCheckpoints):
    """Checkpoints that cross a restart of beat on one machine.

    A write is one upsert keeping the greater instant, so the checkpoint only moves forward when
    two processes write at once. Raises ``StoreUnavailableError`` when the file cannot be asked.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS
    ) -> None:
        self._file = SqliteFile(
            path, _SCHEMA, busy_timeout_ms=busy_timeout_ms, unavailable=StoreUnavailableError
        )

    def read(self, job: str) -> datetime | None:
        row = self._file.read(
            f"read the checkpoint of {job!r}",
            "SELECT handled_at FROM ddd_job_checkpoints WHERE job = ?",
            (job,),
        )
        return None if row is None else from_micros(row[0])

    def write(self, job: str, handled: datetime) -> None:
        micros = to_micros(handled, "handled")
        with self._file.transaction(f"write the checkpoint of {job!r}") as connection:
            connection.execute(
                "INSERT INTO ddd_job_checkpoints (job, handled_at) VALUES (?, ?) "
                "ON CONFLICT (job) DO UPDATE SET handled_at = max(handled_at, excluded.handled_at)",
                (job, micros),
            )

    def close(self) -> None:
        """Close this thread's connection to the file (a later call reopens one)."""
        self._file.close()
