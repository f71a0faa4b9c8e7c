"""Checkpoints: the last occurrence handled per job, the only state that crosses a restart."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable
from datetime import datetime

from ddd_celery.kernel.instants import to_utc


class JobCheckpoints(ABC):
    """Where a scheduler writes the last occurrence it handled for each job.

    A store shared by the instances; a checkpoint only moves forward, so two instances writing
    at once keep the later instant.
    """

    @abstractmethod
    def read(self, job: str) -> datetime | None:
        """The last occurrence handled for ``job`` (aware UTC), or None if never written.


        Raises:
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """

    @abstractmethod
    def write(self, job: str, handled: datetime) -> None:
        """Record ``handled`` unless a later instant is already recorded.

        Raises:
            ValueError: ``handled`` is naive; nothing is written.
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """

    def read_many(self, jobs: Iterable[str]) -> dict[str, datetime | None]:
        """``read`` of each job, keyed by name: what beat's start and ``jobs list`` need.

        A store that can answers in one round trip per batch rather than one per job; this
        default asks ``read`` job by job.

        Raises:
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """
        return {job: self.read(job) for job in jobs}


class InMemoryJobCheckpoints(JobCheckpoints):
    """Checkpoints of one process: what a test or a single instance needs."""

    def __init__(self) -> None:
        self._handled: dict[str, datetime] = {}
        self._mutex = threading.Lock()

    def read(self, job: str) -> datetime | None:
        with self._mutex:
            return self._handled.get(job)

    def write(self, job: str, handled: datetime) -> None:
        instant = to_utc(handled, "handled")
        with self._mutex:
            current = self._handled.get(job)
            if current is None or instant > current:
                self._handled[job] = instant
