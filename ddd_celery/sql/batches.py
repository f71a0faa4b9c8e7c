"""Reading one row per job in batches: one statement per ``BATCH`` jobs, not one per job."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Generic, TypeVar

from sqlalchemy import ColumnElement, bindparam, select

from ddd_celery.sql.connection import Connector

BATCH = 500
"""Jobs per statement: a page of 50 jobs is one round trip, 10,000 jobs twenty, each a lookup of
the primary key; its parameters stay far below SQLite's bound (999 before 3.32)."""

_V = TypeVar("_V")


class BatchRead(Generic[_V]):
    """``SELECT job, value ... WHERE job IN (<a batch>) AND <where>``, compiled once.

    Each batch is one statement on one connection, in autocommit outside a unit of work (in it,
    on its connection), so a batch reads what the single reads of its jobs would, each batch
    on its own as they are: no transaction spans the batches.
    """

    def __init__(
        self, job: ColumnElement[str], value: ColumnElement[_V], *where: ColumnElement[bool]
    ) -> None:
        self._query = select(job, value).where(job.in_(bindparam("jobs", expanding=True)), *where)

    def __call__(
        self, connector: Connector, doing: str, jobs: Iterable[str], **parameters: Any
    ) -> dict[str, _V | None]:
        """The value of each job's row, None for a job without one (or one ``where`` leaves
        out); keyed by job, each named once, in the order first named. Raises the connector's
        errors, saying ``doing``; no statement for no jobs."""
        names = list(dict.fromkeys(jobs))
        found: dict[str, _V] = {}
        if names:
            with connector.transaction(doing, single=True) as connection:
                for start in range(0, len(names), BATCH):
                    batch = {"jobs": names[start : start + BATCH], **parameters}
                    for job, value in connection.execute(self._query, batch):
                        found[job] = value
        return {name: found.get(name) for name in names}
