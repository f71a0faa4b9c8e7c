"""Last runs: each job's latest occurrence and its recent outcomes, where any process reads them.

Beat and the workers record outcomes in their own logs and metrics; a process that handled
nothing (``celery jobs list``, ``jobs history``, an admin endpoint) reads what they last saw
from this store.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from ddd_celery.kernel.instants import to_utc
from ddd_celery.scheduling.outcomes import JobRun, Outcome

HISTORY_LIMIT = 50
"""How many records of each job the history keeps by default: the newest, the older dropped."""


class JobLastRuns(ABC):
    """Where the recorder keeps, per job, the record of the latest occurrence it was told of,
    and the history of the records it was told of last.

    A store shared by beat and the workers. It keeps the occurrence with the latest
    ``scheduled_at``: a record of an earlier occurrence never replaces a later one, and a new
    record of the same occurrence replaces the one kept (a run recorded after another instance
    first saw its occurrence). The history keeps every record written, in the order written,
    bounded per job (``HISTORY_LIMIT`` unless the adapter is given another bound), an earlier
    occurrence's included (an occurrence replayed); a record equal to the newest in the history
    is not added again (a write sent twice). A record holds what ``JobRun`` holds, never an
    error's message.
    """

    @abstractmethod
    def write(self, run: JobRun) -> None:
        """Keep ``run`` unless a later occurrence of its job is kept; add it to the history.

        Raises:
            ValueError: an instant of ``run`` is naive; nothing is written.
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """

    def write_many(self, runs: Sequence[JobRun]) -> None:
        """``write`` of each of ``runs``, in their order, as if one after the other: what beat
        records of a batch of occurrences it did not send (``skipped-overlap``, ``missed``).

        A store that can writes a batch in one round trip rather than one per record; this
        default checks every record, then asks ``write`` record by record.

        Raises:
            ValueError: an instant of a record is naive; nothing is written.
            ConnectionError: the store cannot be asked (``StoreUnavailableError``); some records
                may be kept, as each is a ``write`` of its own.
        """
        for run in runs:
            run_as_dict(run)
        for run in runs:
            self.write(run)

    @abstractmethod
    def read(self, job: str) -> JobRun | None:
        """The record of the latest occurrence of ``job`` (instants aware UTC), or None.


        Raises:
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """

    def read_many(self, jobs: Iterable[str]) -> dict[str, JobRun | None]:
        """``read`` of each job, keyed by name: what ``jobs list`` needs.

        A store that can answers in one round trip per batch rather than one per job; this
        default asks ``read`` job by job.

        Raises:
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """
        return {job: self.read(job) for job in jobs}

    @abstractmethod
    def history(self, job: str, limit: int = HISTORY_LIMIT) -> list[JobRun]:
        """The newest ``limit`` records of ``job``'s history, newest written first (instants
        aware UTC); fewer when fewer are kept, none for a job never written.

        Raises:
            ValueError: ``limit`` is not positive.
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """


def check_limits(*limits: int) -> None:
    """Refuse a bound or a ``limit`` of the history that is not a positive number of records."""
    for limit in limits:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
            raise ValueError(f"a history holds a positive number of records, not {limit!r}")


class InMemoryJobLastRuns(JobLastRuns):
    """The last runs of one process: what a test or a single instance needs.

    A record is kept in its stored form (``run_as_dict``) and read back from it, so what a test
    reads is what the shared stores would give back.
    """

    def __init__(self, *, history_limit: int = HISTORY_LIMIT) -> None:
        check_limits(history_limit)
        self._records: dict[str, tuple[datetime, dict[str, Any]]] = {}
        self._histories: dict[str, deque[dict[str, Any]]] = {}
        self._history_limit = history_limit
        self._mutex = threading.Lock()

    def write(self, run: JobRun) -> None:
        self.write_many([run])

    def write_many(self, runs: Sequence[JobRun]) -> None:
        records = [(run.job, to_utc(run.scheduled_at), run_as_dict(run)) for run in runs]
        with self._mutex:
            for job, scheduled_at, record in records:
                kept = self._records.get(job)
                if kept is None or scheduled_at >= kept[0]:
                    self._records[job] = (scheduled_at, record)
                history = self._histories.setdefault(job, deque(maxlen=self._history_limit))
                if not history or history[0] != record:
                    history.appendleft(record)

    def read(self, job: str) -> JobRun | None:
        with self._mutex:
            kept = self._records.get(job)
        return None if kept is None else run_from_dict(kept[1])

    def history(self, job: str, limit: int = HISTORY_LIMIT) -> list[JobRun]:
        check_limits(limit)
        with self._mutex:
            records = list(self._histories.get(job, ()))[:limit]
        return [run_from_dict(record) for record in records]


def run_as_dict(run: JobRun) -> dict[str, Any]:
    """``run`` as JSON values: instants in ISO 8601 UTC to the microsecond, the outcome's string.

    Raises ``ValueError`` for a naive instant.
    """
    return {
        "job": run.job,
        "context": run.context,
        "scheduled_at": _instant(run.scheduled_at, "scheduled_at"),
        "outcome": run.outcome.value,
        "started_at": None if run.started_at is None else _instant(run.started_at, "started_at"),
        "duration_ms": run.duration_ms,
        "error_code": run.error_code,
        "error_type": run.error_type,
        "correlation_id": run.correlation_id,
        "tenant_id": run.tenant_id,
    }


def run_from_dict(record: dict[str, Any]) -> JobRun:
    """The ``JobRun`` of a dict ``run_as_dict`` wrote; ``ValueError`` for one it did not."""
    try:
        started_at = record["started_at"]
        duration_ms = record["duration_ms"]
        return JobRun(
            job=record["job"],
            context=record["context"],
            scheduled_at=_parse(record["scheduled_at"]),
            outcome=Outcome(record["outcome"]),
            started_at=None if started_at is None else _parse(started_at),
            duration_ms=None if duration_ms is None else float(duration_ms),
            error_code=record["error_code"],
            error_type=record["error_type"],
            correlation_id=record["correlation_id"],
            tenant_id=record["tenant_id"],
        )
    except (KeyError, TypeError) as error:
        raise ValueError(f"not the record of a run: {record!r}") from error


def _instant(value: datetime, name: str) -> str:
    return to_utc(value, name).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _parse(value: str) -> datetime:
    return to_utc(datetime.fromisoformat(value))
