"""Which run of a job is in progress and which occurrence waits behind it.

Overlap is decided on this state. In one process it lives in memory; between processes (beats
and workers) it lives in a shared store, so a run in progress on a worker is seen by every beat.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING

from ddd_celery.kernel.clock import Clock
from ddd_celery.kernel.instants import to_utc
from ddd_celery.scheduling.tenant_runs import InMemoryJobTenantRuns, JobTenantRuns

if TYPE_CHECKING:
    from ddd_celery.kernel.lock import Lock
    from ddd_celery.scheduling.checkpoints import JobCheckpoints
    from ddd_celery.scheduling.last_runs import JobLastRuns
    from ddd_celery.scheduling.occurrence_store import OccurrenceStore


class Claim(StrEnum):
    """The answer of ``JobRunState.claim``."""

    STARTED = "started"
    """No run was in progress: this occurrence is now the run in progress."""
    QUEUED = "queued"
    """A run is in progress and nothing waited: this occurrence waits behind it."""
    BUSY = "busy"
    """A run is in progress (and, when queueing, an occurrence already waits): skip it."""


class JobRunState(ABC):
    """The run in progress of each job, and at most one occurrence queued behind it.

    Every method is atomic for one job. A run in progress expires after its time to live, so a
    run whose process died does not block the job for ever.
    """

    @abstractmethod
    def claim(self, job: str, scheduled_at: datetime, *, queue: bool, ttl_ms: int) -> Claim:
        """Start ``scheduled_at`` if no run is in progress, else queue it (when ``queue``) or not.

        A queued occurrence keeps its place until ``finish`` promotes it or ``drop_queued``
        removes it. A claim of the occurrence in progress or queued answers as the claim that
        made it (only the holder of an occurrence's lock claims it, so it is that claim sent
        again after its reply was lost).

        Raises:
            ValueError: ``scheduled_at`` is naive or ``ttl_ms`` not positive; nothing is claimed.
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """

    @abstractmethod
    def finish(self, job: str, scheduled_at: datetime, *, ttl_ms: int) -> datetime | None:
        """End the run of ``scheduled_at``; promote and return the queued occurrence, if any.

        The promoted occurrence becomes the run in progress for ``ttl_ms``. Finishing a run that
        is no longer the one in progress (it expired) changes nothing and returns None.

        Raises:
            ValueError: ``scheduled_at`` is naive or ``ttl_ms`` not positive; the run is not ended.
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """

    @abstractmethod
    def drop_queued(self, job: str) -> datetime | None:
        """Remove and return the queued occurrence (a scheduler stopping), or None.

        Raises:
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """

    @abstractmethod
    def running(self, job: str) -> datetime | None:
        """The occurrence whose run is in progress, or None.

        Raises:
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """

    def running_many(self, jobs: Iterable[str]) -> dict[str, datetime | None]:
        """``running`` of each job, keyed by name: what ``jobs list`` needs.

        A store that can answers in one round trip per batch rather than one per job; this
        default asks ``running`` job by job.

        Raises:
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """
        return {job: self.running(job) for job in jobs}

    def occurrence_store(
        self, lock: Lock, checkpoints: JobCheckpoints | None, last_runs: JobLastRuns | None
    ) -> OccurrenceStore | None:
        """A store that does an occurrence's I/O on this run state and these ports in one step.

        None (this default) when it cannot combine them; ``occurrence_store()`` then composes
        the ports one call after the other.
        """
        return None

    def tenant_runs(self) -> JobTenantRuns | None:
        """The joins of spread occurrences (``tenant_runs: 'spread'``), kept beside this state.

        None (this default) when this store keeps none: a spread job then runs its tenants in
        turn, in the task of the occurrence.
        """
        return None


@dataclass(slots=True)
class _Slot:
    running: datetime
    expires_at: datetime
    queued: datetime | None = None


class InMemoryJobRunState(JobRunState):
    """The run state of one process; expiry is read on the given clock."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._slots: dict[str, _Slot] = {}
        self._mutex = threading.Lock()
        self._tenant_runs: JobTenantRuns | None = None

    def claim(self, job: str, scheduled_at: datetime, *, queue: bool, ttl_ms: int) -> Claim:
        instant = to_utc(scheduled_at, "scheduled_at")
        with self._mutex:
            slot = self._live(job)
            if slot is None:
                self._slots[job] = _Slot(instant, self._expiry(ttl_ms))
                return Claim.STARTED
            if slot.running == instant:
                return Claim.STARTED
            if slot.queued == instant:
                return Claim.QUEUED
            if queue and slot.queued is None:
                slot.queued = instant
                return Claim.QUEUED
            return Claim.BUSY

    def finish(self, job: str, scheduled_at: datetime, *, ttl_ms: int) -> datetime | None:
        instant = to_utc(scheduled_at, "scheduled_at")
        with self._mutex:
            slot = self._live(job)
            if slot is None or slot.running != instant:
                return None
            if slot.queued is None:
                del self._slots[job]
                return None
            promoted = slot.queued
            self._slots[job] = _Slot(promoted, self._expiry(ttl_ms))
            return promoted

    def drop_queued(self, job: str) -> datetime | None:
        with self._mutex:
            slot = self._live(job)
            if slot is None or slot.queued is None:
                return None
            dropped, slot.queued = slot.queued, None
            return dropped

    def running(self, job: str) -> datetime | None:
        with self._mutex:
            slot = self._live(job)
            return None if slot is None else slot.running

    def tenant_runs(self) -> JobTenantRuns:
        """The joins of this process, on the same clock (a solo worker's, a test's)."""
        with self._mutex:
            if self._tenant_runs is None:
                self._tenant_runs = InMemoryJobTenantRuns(self._clock)
            return self._tenant_runs

    def _live(self, job: str) -> _Slot | None:
        slot = self._slots.get(job)
        if slot is not None and slot.expires_at <= self._clock.now():
            del self._slots[job]
            return None
        return slot

    def _expiry(self, ttl_ms: int) -> datetime:
        if ttl_ms <= 0:
            raise ValueError(f"a run's time to live is a positive number of ms, not {ttl_ms}")
        return self._clock.now() + timedelta(milliseconds=ttl_ms)
