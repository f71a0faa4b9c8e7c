"""``SqlJobRunState``: the run in progress of each scheduled job, in ``<prefix>job_runs``.

One row per job with a run in progress: ``running`` (the occurrence), ``expires_at`` (when that
run stops counting, on the Clock the state is given) and ``queued`` (the occurrence waiting
behind it, or NULL). A row whose ``expires_at`` has passed is a run whose process died: it
counts as no row, and the next claim replaces it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, delete, select, update

from ddd_celery.kernel.clock import Clock
from ddd_celery.scheduling.run_state import Claim, JobRunState
from ddd_celery.sql.connection import Connector, from_micros, to_micros
from ddd_celery.sql.dialects import upsert
from ddd_celery.sql.errors import StoreUnavailableError
from ddd_celery.sql.tables import DEFAULT_PREFIX, tables


class SqlJobRunState(JobRunState):
    """Overlap decided across every beat and worker on the database.

    A claim is an upsert that takes a free or expired row (and locks a live one), then, when
    queueing, an update of the live row in the same transaction; a finish and a drop read the
    row ``FOR UPDATE`` first. So a claim and a finish on the same job never interleave. Raises
    ``StoreUnavailableError`` when the database cannot be asked.
    """

    def __init__(self, engine: Engine, clock: Clock, *, prefix: str = DEFAULT_PREFIX) -> None:
        self._connector = Connector(engine, unavailable=StoreUnavailableError)
        self._table = tables(prefix).runs
        self._clock = clock

    def claim(self, job: str, scheduled_at: datetime, *, queue: bool, ttl_ms: int) -> Claim:
        instant = to_micros(scheduled_at, "scheduled_at")
        now, expires_at = self._window(ttl_ms)
        table = self._table
        with self._connector.transaction(f"claim {job!r}") as connection:
            insert = upsert(connection, table).values(
                job=job, running=instant, expires_at=expires_at, queued=None
            )
            started = connection.execute(
                insert.on_conflict_do_update(
                    index_elements=[table.c.job],
                    set_={
                        "running": insert.excluded.running,
                        "expires_at": insert.excluded.expires_at,
                        "queued": None,
                    },
                    where=table.c.expires_at <= now,
                ).returning(table.c.job)
            ).first()
            if started is not None:
                return Claim.STARTED
            if not queue:
                return Claim.BUSY
            queued = connection.execute(
                update(table)
                .where(table.c.job == job, table.c.expires_at > now, table.c.queued.is_(None))
                .values(queued=instant)
                .returning(table.c.job)
            ).first()
            return Claim.BUSY if queued is None else Claim.QUEUED

    def finish(self, job: str, scheduled_at: datetime, *, ttl_ms: int) -> datetime | None:
        instant = to_micros(scheduled_at, "scheduled_at")
        now, expires_at = self._window(ttl_ms)
        table = self._table
        with self._connector.transaction(f"finish {job!r}") as connection:
            row = self._live(connection, job, now)
            if row is None or row.running != instant:
                return None
            if row.queued is None:
                connection.execute(delete(table).where(table.c.job == job))
                return None
            connection.execute(
                update(table)
                .where(table.c.job == job)
                .values(running=row.queued, expires_at=expires_at, queued=None)
            )
            return from_micros(row.queued)

    def drop_queued(self, job: str) -> datetime | None:
        now = to_micros(self._clock.now())
        table = self._table
        with self._connector.transaction(f"drop the queued occurrence of {job!r}") as connection:
            row = self._live(connection, job, now)
            if row is None or row.queued is None:
                return None
            connection.execute(update(table).where(table.c.job == job).values(queued=None))
            return from_micros(row.queued)

    def running(self, job: str) -> datetime | None:
        table = self._table
        now = to_micros(self._clock.now())
        with self._connector.transaction(
            f"read the run in progress of {job!r}", single=True
        ) as connection:
            micros = connection.scalar(
                select(table.c.running).where(table.c.job == job, table.c.expires_at > now)
            )
        return None if micros is None else from_micros(micros)

    def _live(self, connection: Connection, job: str, now: int) -> Any:
        table = self._table
        statement = (
            select(table.c.running, table.c.queued)
            .where(table.c.job == job, table.c.expires_at > now)
            .with_for_update()
        )
        return connection.execute(statement).first()

    def _window(self, ttl_ms: int) -> tuple[int, int]:
        """Now, and when a run started now stops counting as in progress."""
        if ttl_ms <= 0:
            raise ValueError(f"a run's time to live is a positive number of ms, not {ttl_ms}")
        now = to_micros(self._clock.now())
        return now, now + ttl_ms * 1000
