"""``SqlJobPauses``: the pauses of the scheduled jobs, in ``<prefix>job_pauses``.

One row per paused job: ``job``, ``paused_at`` (microseconds), ``paused_by``, ``reason`` (or
NULL). Created with the other tables (``create_tables``, ``ddl``, a SQLite file's first use).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import Connection, Engine, bindparam, delete, select

from ddd_celery.scheduling.pauses import JobPauses, Pause, new_pause
from ddd_celery.sql.connection import Connector, from_micros, to_micros
from ddd_celery.sql.dialects import upsert
from ddd_celery.sql.errors import StoreUnavailableError
from ddd_celery.sql.tables import DEFAULT_PREFIX, tables


class SqlJobPauses(JobPauses):
    """The pauses every beat on the database reads, each command one statement in autocommit.

    A pause is an upsert whose conflict leaves the row as it is and returns it, so a pause sent
    again, or racing another, keeps the first; a resume is a ``DELETE ... RETURNING``. Both are
    sent again when their outcome is unknown (``Connector.run``): a resume whose first send
    committed then answers None, as for a job not paused. ``paused`` is one ``SELECT``. Raises
    ``StoreUnavailableError`` when the database cannot be asked.
    """

    def __init__(self, engine: Engine, *, prefix: str = DEFAULT_PREFIX) -> None:
        self._connector = Connector(engine, unavailable=StoreUnavailableError)
        table = tables(prefix).pauses
        columns = (table.c.job, table.c.paused_by, table.c.paused_at, table.c.reason)
        insert = upsert(engine, table).values(
            job=bindparam("job"),
            paused_at=bindparam("at"),
            paused_by=bindparam("by"),
            reason=bindparam("reason"),
        )
        self._pause = insert.on_conflict_do_update(
            index_elements=[table.c.job], set_={"job": table.c.job}
        ).returning(*columns)
        self._resume = delete(table).where(table.c.job == bindparam("job")).returning(*columns)
        self._paused = select(*columns)
        self.engine = engine

    def pause(self, job: str, *, by: str, at: datetime, reason: str | None = None) -> Pause:
        asked = new_pause(job, by=by, at=at, reason=reason)
        parameters = {"job": job, "at": to_micros(asked.at, "at"), "by": by, "reason": reason}

        def pause(connection: Connection, again: bool) -> Pause:
            return _pause(*connection.execute(self._pause, parameters).one())

        return self._connector.run(f"pause {job!r}", pause)

    def resume(self, job: str) -> Pause | None:
        def resume(connection: Connection, again: bool) -> Pause | None:
            row = connection.execute(self._resume, {"job": job}).first()
            return None if row is None else _pause(*row)

        return self._connector.run(f"resume {job!r}", resume)

    def paused(self) -> Mapping[str, Pause]:
        with self._connector.transaction("read the pauses", single=True) as connection:
            rows = connection.execute(self._paused).all()
        return {row.job: _pause(*row) for row in rows}


def _pause(job: str, by: str, paused_at: int, reason: str | None) -> Pause:
    """The pause of a row, its columns in the order every statement returns them."""
    return Pause(job=job, by=by, at=from_micros(paused_at), reason=reason)
