"""``SqlJobRunState``: the run in progress of each scheduled job, in ``<prefix>job_runs``.

One row per job with a run in progress: ``running`` (the occurrence), ``expires_at`` (when that
run stops counting, on the Clock the state is given) and ``queued`` (the occurrence waiting
behind it, or NULL). A row whose ``expires_at`` has passed is a run whose process died: it
counts as no row, and the next claim replaces it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import BigInteger, Engine, bindparam, select

from ddd_celery.kernel.clock import Clock
from ddd_celery.kernel.lock import Lock
from ddd_celery.scheduling.checkpoints import JobCheckpoints
from ddd_celery.scheduling.last_runs import JobLastRuns
from ddd_celery.scheduling.occurrence_store import OccurrenceStore
from ddd_celery.scheduling.run_state import Claim, JobRunState
from ddd_celery.sql.batches import BatchRead
from ddd_celery.sql.checkpoints import SqlJobCheckpoints
from ddd_celery.sql.connection import Connector, from_micros, to_micros
from ddd_celery.sql.errors import StoreUnavailableError
from ddd_celery.sql.last_runs import SqlJobLastRuns
from ddd_celery.sql.lock import SqlLock
from ddd_celery.sql.occurrence_store import SqlOccurrenceStore, same_database
from ddd_celery.sql.rows import RunRows, run_window
from ddd_celery.sql.tables import DEFAULT_PREFIX, tables


class SqlJobRunState(JobRunState):
    """Overlap decided across every beat and worker on the database.

    A claim is an upsert that takes a free or expired row (and locks a live one), then, when
    queueing, an update of the live row in the same transaction; a finish and a drop read the
    row ``FOR UPDATE`` first. So a claim and a finish on the same job never interleave.
    ``running_many`` is one ``SELECT`` per ``BATCH`` jobs on the primary key, every job judged
    live or expired at one reading of the clock. Raises ``StoreUnavailableError`` when the
    database cannot be asked.
    """

    def __init__(self, engine: Engine, clock: Clock, *, prefix: str = DEFAULT_PREFIX) -> None:
        self._connector = Connector(engine, unavailable=StoreUnavailableError)
        self._table = tables(prefix).runs
        self.rows = RunRows(engine, self._table)
        """The statements, which ``SqlOccurrenceStore`` runs in its own transactions."""
        now = bindparam("now", type_=BigInteger)
        self._running_many = BatchRead(
            self._table.c.job, self._table.c.running, self._table.c.expires_at > now
        )
        self.engine = engine
        self.clock = clock

    def claim(self, job: str, scheduled_at: datetime, *, queue: bool, ttl_ms: int) -> Claim:
        instant = to_micros(scheduled_at, "scheduled_at")
        now, expires_at = run_window(self.clock, ttl_ms)
        with self._connector.transaction(f"claim {job!r}") as connection:
            return self.rows.claim(
                connection, job, instant, queue=queue, now=now, expires_at=expires_at
            )

    def finish(self, job: str, scheduled_at: datetime, *, ttl_ms: int) -> datetime | None:
        instant = to_micros(scheduled_at, "scheduled_at")
        now, expires_at = run_window(self.clock, ttl_ms)
        with self._connector.transaction(f"finish {job!r}") as connection:
            return self.rows.finish(connection, job, instant, now=now, expires_at=expires_at)

    def drop_queued(self, job: str) -> datetime | None:
        now = to_micros(self.clock.now())
        with self._connector.transaction(f"drop the queued occurrence of {job!r}") as connection:
            return self.rows.drop_queued(connection, job, now=now)

    def running(self, job: str) -> datetime | None:
        table = self._table
        now = to_micros(self.clock.now())
        with self._connector.transaction(
            f"read the run in progress of {job!r}", single=True
        ) as connection:
            micros = connection.scalar(
                select(table.c.running).where(table.c.job == job, table.c.expires_at > now)
            )
        return None if micros is None else from_micros(micros)

    def running_many(self, jobs: Iterable[str]) -> dict[str, datetime | None]:
        now = to_micros(self.clock.now())
        found = self._running_many(self._connector, "read the runs in progress", jobs, now=now)
        return {
            job: None if micros is None else from_micros(micros) for job, micros in found.items()
        }

    def occurrence_store(
        self, lock: Lock, checkpoints: JobCheckpoints | None, last_runs: JobLastRuns | None
    ) -> OccurrenceStore | None:
        """One transaction per operation when the lock and the stores given are on this
        database.

        ``SqlLock`` and, when given, ``SqlJobCheckpoints`` and ``SqlJobLastRuns`` whose engines
        reach the same database; None for any other mix, which is then composed.
        """
        if not isinstance(lock, SqlLock) or not same_database(self.engine, lock.engine):
            return None
        if checkpoints is not None and not (
            isinstance(checkpoints, SqlJobCheckpoints)
            and same_database(self.engine, checkpoints.engine)
        ):
            return None
        if last_runs is not None and not (
            isinstance(last_runs, SqlJobLastRuns) and same_database(self.engine, last_runs.engine)
        ):
            return None
        return SqlOccurrenceStore(
            self.engine,
            lock_clock=lock.clock,
            run_clock=self.clock,
            locks=lock.rows,
            runs=self.rows,
            checkpoints=None if checkpoints is None else checkpoints.rows,
            last_runs=None if last_runs is None else last_runs.rows,
        )
