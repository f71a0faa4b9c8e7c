"""``SqlJobLastRuns``: each scheduled job's latest occurrence, in ``<prefix>job_last_runs``, and
its recent records, in ``<prefix>job_run_history``."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from sqlalchemy import (
    BigInteger,
    BindParameter,
    Connection,
    Engine,
    Table,
    Text,
    bindparam,
    delete,
    func,
    insert,
    select,
)

from ddd_celery.scheduling.last_runs import (
    HISTORY_LIMIT,
    JobLastRuns,
    check_limits,
    run_as_dict,
    run_from_dict,
)
from ddd_celery.scheduling.outcomes import JobRun
from ddd_celery.sql.batches import BATCH, BatchRead
from ddd_celery.sql.connection import Connector
from ddd_celery.sql.errors import StoreUnavailableError
from ddd_celery.sql.rows import LastRunRows
from ddd_celery.sql.tables import DEFAULT_PREFIX, tables


class SqlJobLastRuns(JobLastRuns):
    """The last runs written by beats and workers, read by ``celery jobs list`` anywhere.

    A write is one upsert that keeps the row unless the new record's occurrence is the same or
    later, so writers racing keep the latest occurrence, and a row of the history, the job's
    rows past ``history_limit`` deleted, in one transaction. ``write_many`` is one transaction
    for the batch, each statement sent once for all its records (``HistoryRows.write_many``).
    ``read_many`` is one ``SELECT`` per ``BATCH`` jobs on the primary key, not one per job
    (``jobs list``). Raises
    ``StoreUnavailableError`` when the database cannot be asked.
    """

    def __init__(
        self, engine: Engine, *, prefix: str = DEFAULT_PREFIX, history_limit: int = HISTORY_LIMIT
    ) -> None:
        check_limits(history_limit)
        self._connector = Connector(engine, unavailable=StoreUnavailableError)
        made = tables(prefix)
        self._table = made.last_runs
        self._history = made.run_history
        self.rows = HistoryRows(engine, self._table, made.run_history, limit=history_limit)
        """The write, which ``SqlOccurrenceStore`` runs in its own transactions."""
        self._read_many = BatchRead(self._table.c.job, self._table.c.run)
        self.engine = engine

    def write(self, run: JobRun) -> None:
        with self._connector.transaction(f"write the last run of {run.job!r}") as connection:
            self.rows.write(connection, run)

    def write_many(self, runs: Sequence[JobRun]) -> None:
        for run in runs:  # refused before anything is written
            run_as_dict(run)
        if not runs:
            return
        with self._connector.transaction("write the last runs") as connection:
            self.rows.write_many(connection, runs)

    def read(self, job: str) -> JobRun | None:
        table = self._table
        with self._connector.transaction(
            f"read the last run of {job!r}", single=True
        ) as connection:
            record = connection.scalar(select(table.c.run).where(table.c.job == job))
        return None if record is None else run_from_dict(json.loads(record))

    def read_many(self, jobs: Iterable[str]) -> dict[str, JobRun | None]:
        found = self._read_many(self._connector, "read the last runs", jobs)
        return {
            job: None if record is None else run_from_dict(json.loads(record))
            for job, record in found.items()
        }

    def history(self, job: str, limit: int = HISTORY_LIMIT) -> list[JobRun]:
        check_limits(limit)
        table = self._history
        query = (
            select(table.c.run).where(table.c.job == job).order_by(table.c.id.desc()).limit(limit)
        )
        with self._connector.transaction(
            f"read the run history of {job!r}", single=True
        ) as connection:
            records = connection.scalars(query).all()
        return [run_from_dict(json.loads(record)) for record in records]


class HistoryRows(LastRunRows):
    """The write of a last run and of its row in the history, on a connection the caller holds.

    The history's rows of the job are read newest first on the index ``(job, id)``: the newest
    is compared (a record equal to it is a write sent twice, not added again), and those past
    ``limit`` are deleted, so a job's rows stay within the bound whatever writes race.
    """

    def __init__(self, engine: Engine, table: Table, history: Table, *, limit: int) -> None:
        super().__init__(engine, table)
        job: BindParameter[str] = bindparam("history_job", type_=Text)
        newest = select(history.c.id, history.c.run).where(history.c.job == job)
        self._newest = newest.order_by(history.c.id.desc()).limit(1)
        self._add = insert(history).values(job=job, run=bindparam("record"))
        kept_from = (
            select(history.c.id)
            .where(history.c.job == job)
            .order_by(history.c.id.desc())
            .limit(1)
            .offset(bindparam("limit", type_=BigInteger))
            .scalar_subquery()
        )
        self._prune = delete(history).where(history.c.job == job, history.c.id <= kept_from)
        newest_ids = (
            select(func.max(history.c.id))
            .where(history.c.job.in_(bindparam("jobs", expanding=True)))
            .group_by(history.c.job)
        )
        self._newest_many = select(history.c.job, history.c.run).where(history.c.id.in_(newest_ids))
        self._limit = limit

    def write(self, connection: Connection, run: JobRun) -> None:
        super().write(connection, run)
        record = json.dumps(run_as_dict(run), separators=(",", ":"))
        newest = connection.execute(self._newest, {"history_job": run.job}).first()
        if newest is not None and newest.run == record:
            return
        connection.execute(self._add, {"history_job": run.job, "record": record})
        connection.execute(self._prune, {"history_job": run.job, "limit": self._limit})

    def write_many(self, connection: Connection, runs: Sequence[JobRun]) -> None:
        """``write`` of each of ``runs`` in their order, each statement sent once for the batch:
        the newest row of each job's history read in one ``SELECT`` per ``BATCH`` jobs, the
        rows added in one ``executemany`` (their ids in the batch's order), the jobs pruned in
        another."""
        super().write_many(connection, runs)
        records = [(run.job, json.dumps(run_as_dict(run), separators=(",", ":"))) for run in runs]
        jobs = list(dict.fromkeys(job for job, _ in records))
        newest: dict[str, str] = {}
        for start in range(0, len(jobs), BATCH):
            found = connection.execute(self._newest_many, {"jobs": jobs[start : start + BATCH]})
            newest.update((row.job, row.run) for row in found)
        added: list[dict[str, str]] = []
        for job, record in records:
            if newest.get(job) != record:
                added.append({"history_job": job, "record": record})
                newest[job] = record
        if not added:
            return
        connection.execute(self._add, added)
        pruned = dict.fromkeys(row["history_job"] for row in added)
        connection.execute(
            self._prune, [{"history_job": job, "limit": self._limit} for job in pruned]
        )
