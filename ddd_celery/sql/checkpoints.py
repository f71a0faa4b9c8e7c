"""``SqlJobCheckpoints``: the last occurrence handled per job, in ``<prefix>job_checkpoints``."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import Engine, select

from ddd_celery.scheduling.checkpoints import JobCheckpoints
from ddd_celery.sql.batches import BatchRead
from ddd_celery.sql.connection import Connector, from_micros, to_micros
from ddd_celery.sql.errors import StoreUnavailableError
from ddd_celery.sql.rows import CheckpointRows
from ddd_celery.sql.tables import DEFAULT_PREFIX, tables


class SqlJobCheckpoints(JobCheckpoints):
    """Checkpoints that cross a restart of beat, shared by every beat on the database.

    A write is one upsert that keeps the greater instant, so the checkpoint only moves forward
    when two beats write at once. ``read_many`` is one ``SELECT`` per ``BATCH`` jobs on the
    primary key, not one per job (beat's start, ``jobs list``). Raises
    ``StoreUnavailableError`` when the database cannot be asked.
    """

    def __init__(self, engine: Engine, *, prefix: str = DEFAULT_PREFIX) -> None:
        self._connector = Connector(engine, unavailable=StoreUnavailableError)
        self._table = tables(prefix).checkpoints
        self.rows = CheckpointRows(engine, self._table)
        """The write, which ``SqlOccurrenceStore`` runs in its own transactions."""
        self._read_many = BatchRead(self._table.c.job, self._table.c.handled_at)
        self.engine = engine

    def read(self, job: str) -> datetime | None:
        table = self._table
        with self._connector.transaction(
            f"read the checkpoint of {job!r}", single=True
        ) as connection:
            micros = connection.scalar(select(table.c.handled_at).where(table.c.job == job))
        return None if micros is None else from_micros(micros)

    def read_many(self, jobs: Iterable[str]) -> dict[str, datetime | None]:
        found = self._read_many(self._connector, "read the checkpoints", jobs)
        return {
            job: None if micros is None else from_micros(micros) for job, micros in found.items()
        }

    def write(self, job: str, handled: datetime) -> None:
        micros = to_micros(handled, "handled")
        with self._connector.transaction(
            f"write the checkpoint of {job!r}", single=True
        ) as connection:
            self.rows.write(connection, job, micros)
