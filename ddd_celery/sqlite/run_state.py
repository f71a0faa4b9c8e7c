"""``SqliteJobRunState``: the run in progress of each job, shared by beat and workers on one file.

Table ``ddd_job_runs``, one row per job with a run in progress::

    job         TEXT PRIMARY KEY   the job's name
    running     INTEGER            the occurrence in progress, microseconds since the Unix epoch
    expires_at  INTEGER            when that run stops counting as in progress (the Clock's time)
    queued      INTEGER NULL       the one occurrence waiting behind it, if any

A row whose ``expires_at`` has passed is a run whose process died: it counts as no row.
"""

from __future__ import annotations

import os
from datetime import datetime

from ddd_celery.kernel.clock import Clock
from ddd_celery.scheduling.run_state import Claim, JobRunState
from ddd_celery.sqlite._database import (
    DEFAULT_BUSY_TIMEOUT_MS,
    SqliteFile,
    StoreUnavailableError,
    from_micros,
    to_micros,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS ddd_job_runs (
    job TEXT PRIMARY KEY,
    running INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    queued INTEGER
) WITHOUT ROWID;
"""

_LIVE = "SELECT running, queued FROM ddd_job_runs WHERE job = ? AND expires_at > ?"


class SqliteJobRunState(JobRunState):
    """Overlap decided across the processes of one machine.

    Each method is one transaction holding the file's write lock, so a claim and a finish on
    the same job never interleave. Raises ``StoreUnavailableError`` when the file cannot be
    asked.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        clock: Clock,
        *,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
    ) -> None:
        self._file = SqliteFile(
            path, _SCHEMA, busy_timeout_ms=busy_timeout_ms, unavailable=StoreUnavailableError
        )
        self._clock = clock

    def claim(self, job: str, scheduled_at: datetime, *, queue: bool, ttl_ms: int) -> Claim:
        instant = to_micros(scheduled_at, "scheduled_at")
        now, expires_at = self._window(ttl_ms)
        with self._file.transaction(f"claim {job!r}") as connection:
            row = connection.execute(_LIVE, (job, now)).fetchone()
            if row is None:
                connection.execute(
                    "INSERT OR REPLACE INTO ddd_job_runs (job, running, expires_at, queued) "
                    "VALUES (?, ?, ?, NULL)",
                    (job, instant, expires_at),
                )
                return Claim.STARTED
            if queue and row[1] is None:
                connection.execute(
                    "UPDATE ddd_job_runs SET queued = ? WHERE job = ?", (instant, job)
                )
                return Claim.QUEUED
            return Claim.BUSY

    def finish(self, job: str, scheduled_at: datetime, *, ttl_ms: int) -> datetime | None:
        instant = to_micros(scheduled_at, "scheduled_at")
        now, expires_at = self._window(ttl_ms)
        with self._file.transaction(f"finish {job!r}") as connection:
            row = connection.execute(_LIVE, (job, now)).fetchone()
            if row is None or row[0] != instant:
                return None
            queued = row[1]
            if queued is None:
                connection.execute("DELETE FROM ddd_job_runs WHERE job = ?", (job,))
                return None
            connection.execute(
                "UPDATE ddd_job_runs SET running = ?, expires_at = ?, queued = NULL WHERE job = ?",
                (queued, expires_at, job),
            )
            return from_micros(queued)

    def drop_queued(self, job: str) -> datetime | None:
        now = to_micros(self._clock.now())
        with self._file.transaction(f"drop the queued occurrence of {job!r}") as connection:
            row = connection.execute(_LIVE, (job, now)).fetchone()
            if row is None or row[1] is None:
                return None
            connection.execute("UPDATE ddd_job_runs SET queued = NULL WHERE job = ?", (job,))
            return from_micros(row[1])

    def running(self, job: str) -> datetime | None:
        row = self._file.read(
            f"read the run in progress of {job!r}", _LIVE, (job, to_micros(self._clock.now()))
        )
        return None if row is None else from_micros(row[0])

    def close(self) -> None:
        """Close this thread's connection to the file (a later call reopens one)."""
        self._file.close()

    def _window(self, ttl_ms: int) -> tuple[int, int]:
        """Now, and when a run started now stops counting as in progress."""
        if ttl_ms <= 0:
            raise ValueError(f"a run's time to live is a positive number of ms, not {ttl_ms}")
        now = to_micros(self._clock.now())
        return now, now + ttl_ms * 1000
