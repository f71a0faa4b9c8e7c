"""``InMemoryJobStore``: the ``JobStore`` of specs and of a process without a database.

Every operation is atomic under one lock, so threads (a worker's, a test's) see each job move
as the port says. Given a unit of work, ``add``, ``cancel`` and ``retry_dead`` take effect when
it commits and not at all on rollback, as a table in the use case's transaction would: the
store is then ``transactional``.
"""

from __future__ import annotations

import builtins
import heapq
import itertools
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from ddd_celery.background.errors import JOB_INTERRUPTED, JobInterruptedError
from ddd_celery.background.rules import JobEvent, can_move, move, tenant_key_of
from ddd_celery.background.store import (
    CLAIMABLE,
    ClaimedJob,
    Dispatch,
    JobLease,
    JobStats,
    JobStatus,
    JobStore,
    LostLeaseError,
    NewJob,
    StoredJob,
)
from ddd_celery.kernel.instants import require_aware
from ddd_celery.kernel.unit_of_work import UnitOfWork


@dataclass(slots=True)
class _Entry:
    job: StoredJob
    order: int
    token: str | None = None
    dispatched_at: datetime | None = None


class InMemoryJobStore(JobStore):
    """Jobs in a dict, behind a lock; ``list()`` shows them all, for assertions."""

    def __init__(self, unit_of_work: UnitOfWork | None = None) -> None:
        self._unit_of_work = unit_of_work
        self.transactional = unit_of_work is not None
        self._jobs: dict[str, _Entry] = {}
        self._keys: dict[tuple[str, str], str] = {}
        self._due: dict[str, builtins.list[tuple[datetime, int, str]]] = {}
        """Per queue, a heap of (run_at, order, id) of claimable jobs; entries left behind by a
        move are dropped when they reach the top, so a claim costs O(log n), not a scan."""
        self._claimable: set[str] = set()
        self._running: set[str] = set()
        self._order = itertools.count()
        self._mutex = threading.RLock()

    def list(self) -> builtins.list[StoredJob]:
        """Every job kept, in the order added."""
        with self._mutex:
            return [entry.job for entry in sorted(self._jobs.values(), key=lambda e: e.order)]

    # -- the port -----------------------------------------------------------------------

    def add(self, job: NewJob, *, dispatched: bool) -> str:
        with self._mutex:
            known = self._known(job)
            if known is not None:
                return known
        self._after_commit(lambda: self._insert(job, dispatched))
        return job.id

    def claim_job(self, job_id: str, *, now: datetime, lease_ms: int) -> ClaimedJob | None:
        require_aware(now, "now")
        with self._mutex:
            entry = self._jobs.get(job_id)
            if entry is None or not _due(entry, now):
                return None
            return self._claim(entry, now, lease_ms)

    def claim_due(
        self, queues: Sequence[str], *, now: datetime, lease_ms: int, limit: int
    ) -> builtins.list[ClaimedJob]:
        require_aware(now, "now")
        with self._mutex:
            heaps = [self._due[queue] for queue in set(queues) if queue in self._due]
            claimed: builtins.list[ClaimedJob] = []
            while len(claimed) < limit:
                earliest = None
                for heap in heaps:
                    self._drop_stale(heap)
                    if heap and heap[0][0] <= now and (earliest is None or heap[0] < earliest[0]):
                        earliest = heap
                if earliest is None:
                    break
                _, _, job_id = heapq.heappop(earliest)
                claimed.append(self._claim(self._jobs[job_id], now, lease_ms))
            return claimed

    def heartbeat(self, lease: JobLease, *, now: datetime, lease_ms: int) -> JobLease:
        expires_at = require_aware(now, "now") + timedelta(milliseconds=lease_ms)
        with self._mutex:
            entry = self._held(lease)
            entry.job = replace(entry.job, lease_expires_at=expires_at)
            return replace(lease, expires_at=expires_at)

    def update(
        self,
        lease: JobLease,
        *,
        progress: object = None,
        checkpoint: object = None,
        set_progress: bool = False,
        set_checkpoint: bool = False,
    ) -> None:
        with self._mutex:
            entry = self._held(lease)
            job = entry.job
            if set_progress:
                job = replace(job, progress=progress)
            if set_checkpoint:
                job = replace(job, checkpoint=checkpoint)
            entry.job = job

    def complete(self, lease: JobLease, *, now: datetime) -> None:
        with self._mutex:
            entry = self._held(lease)
            self._move(entry, JobEvent.COMPLETE, finished_at=require_aware(now, "now"))

    def fail(
        self,
        lease: JobLease,
        *,
        now: datetime,
        error_code: str,
        error_type: str,
        retry_at: datetime | None,
    ) -> None:
        require_aware(now, "now")
        with self._mutex:
            entry = self._held(lease)
            error = {"last_error_code": error_code, "last_error_type": error_type}
            if retry_at is None:
                self._move(entry, JobEvent.DIE, finished_at=now, **error)
            else:
                self._move(
                    entry, JobEvent.RETRY, run_at=require_aware(retry_at, "retry_at"), **error
                )

    def release(self, lease: JobLease, *, now: datetime) -> None:
        with self._mutex:
            entry = self._held(lease)
            self._move(
                entry,
                JobEvent.RELEASE,
                run_at=require_aware(now, "now"),
                attempts=entry.job.attempts - 1,
            )

    def cancel(self, job_id: str, *, tenant_id: str | None, now: datetime) -> bool:
        require_aware(now, "now")

        def apply() -> bool:
            entry = self._reachable(job_id, tenant_id)
            if entry is None or not can_move(entry.job.status, JobEvent.CANCEL):
                return False
            self._move(entry, JobEvent.CANCEL, finished_at=now)
            return True

        return self._decide_now_apply_at_commit(job_id, tenant_id, JobEvent.CANCEL, apply)

    def find(self, job_id: str, *, tenant_id: str | None) -> StoredJob | None:
        with self._mutex:
            entry = self._reachable(job_id, tenant_id)
            return None if entry is None else entry.job

    def retry_dead(self, job_id: str, *, tenant_id: str | None, now: datetime) -> bool:
        require_aware(now, "now")

        def apply() -> bool:
            entry = self._reachable(job_id, tenant_id)
            if entry is None or not can_move(entry.job.status, JobEvent.RETRY_DEAD):
                return False
            self._move(entry, JobEvent.RETRY_DEAD, run_at=now, attempts=0)
            return True

        return self._decide_now_apply_at_commit(job_id, tenant_id, JobEvent.RETRY_DEAD, apply)

    def list_jobs(
        self, *, status: JobStatus | None = None, tenant_id: str | None = None, limit: int = 100
    ) -> builtins.list[StoredJob]:
        with self._mutex:
            entries = [
                e
                for e in self._jobs.values()
                if (status is None or e.job.status is status)
                and (tenant_id is None or e.job.tenant_id == tenant_id)
            ]
        entries.sort(key=lambda e: (e.job.enqueued_at, e.order), reverse=True)
        return [entry.job for entry in entries[: max(0, limit)]]

    def purge_finished(self, *, before: datetime) -> int:
        require_aware(before, "before")
        with self._mutex:
            gone = [
                e.job
                for e in self._jobs.values()
                if e.job.status.finished
                and e.job.finished_at is not None
                and e.job.finished_at < before
            ]
            for job in gone:
                del self._jobs[job.id]
                if job.idempotency_key is not None:
                    self._keys.pop((tenant_key_of(job.enqueued_by), job.idempotency_key), None)
            return len(gone)

    def stats(self) -> JobStats:
        counts: dict[str, dict[JobStatus, int]] = {}
        with self._mutex:
            for entry in self._jobs.values():
                by_status = counts.setdefault(entry.job.queue, {})
                by_status[entry.job.status] = by_status.get(entry.job.status, 0) + 1
        return JobStats(counts)

    def take_due(
        self, *, now: datetime, limit: int, redispatch_after_ms: int
    ) -> builtins.list[Dispatch]:
        require_aware(now, "now")
        stale = now - timedelta(milliseconds=redispatch_after_ms)
        with self._mutex:
            claimable = (self._jobs[job_id] for job_id in self._claimable)
            due = [
                e
                for e in claimable
                if _due(e, now) and (e.dispatched_at is None or e.dispatched_at < stale)
            ]
            due.sort(key=lambda e: (e.job.run_at, e.order))
            taken = due[: max(0, limit)]
            for entry in taken:
                entry.dispatched_at = now
            return [Dispatch(e.job.id, e.job.name, e.job.queue) for e in taken]

    def expire_leases(self, *, now: datetime, limit: int) -> builtins.list[StoredJob]:
        require_aware(now, "now")
        with self._mutex:
            running = (self._jobs[job_id] for job_id in self._running)
            expired = [
                e
                for e in running
                if e.job.lease_expires_at is not None and e.job.lease_expires_at < now
            ]
            expired.sort(key=lambda e: (e.job.lease_expires_at or now, e.order))
            handed_back = []
            for entry in expired[: max(0, limit)]:
                if entry.job.attempts >= entry.job.max_attempts:
                    self._move(entry, JobEvent.DIE, finished_at=now, **_INTERRUPTED)
                else:
                    self._move(entry, JobEvent.RETRY, run_at=now, **_INTERRUPTED)
                handed_back.append(entry.job)
            return handed_back

    # -- inside the lock ----------------------------------------------------------------

    def _known(self, job: NewJob) -> str | None:
        if job.idempotency_key is None:
            return None
        return self._keys.get((tenant_key_of(job.enqueued_by), job.idempotency_key))

    def _insert(self, job: NewJob, dispatched: bool) -> None:
        require_aware(job.enqueued_at, "enqueued_at")
        require_aware(job.run_at, "run_at")
        with self._mutex:
            if self._known(job) is not None or job.id in self._jobs:
                return
            stored = StoredJob(
                id=job.id,
                name=job.name,
                queue=job.queue,
                status=JobStatus.QUEUED,
                payload=job.payload,
                enqueued_at=job.enqueued_at,
                run_at=job.run_at,
                attempts=0,
                max_attempts=job.max_attempts,
                enqueued_by=job.enqueued_by,
                idempotency_key=job.idempotency_key,
            )
            entry = _Entry(
                stored, next(self._order), dispatched_at=job.enqueued_at if dispatched else None
            )
            self._jobs[job.id] = entry
            self._index(entry)
            if job.idempotency_key is not None:
                self._keys[(tenant_key_of(job.enqueued_by), job.idempotency_key)] = job.id

    def _claim(self, entry: _Entry, now: datetime, lease_ms: int) -> ClaimedJob:
        if lease_ms <= 0:
            raise ValueError(f"a lease lasts a positive number of ms, not {lease_ms}")
        expires_at = now + timedelta(milliseconds=lease_ms)
        entry.token = uuid.uuid4().hex
        self._move(
            entry, JobEvent.CLAIM, attempts=entry.job.attempts + 1, lease_expires_at=expires_at
        )
        lease = JobLease(entry.job.id, entry.job.attempts, entry.token, expires_at)
        return ClaimedJob(entry.job, lease)

    def _held(self, lease: JobLease) -> _Entry:
        entry = self._jobs.get(lease.job_id)
        if (
            entry is None
            or entry.job.status is not JobStatus.RUNNING
            or entry.token != lease.token
            or entry.job.attempts != lease.attempt
        ):
            raise LostLeaseError(
                f"attempt {lease.attempt} of job {lease.job_id!r} no longer holds its lease"
            )
        return entry

    def _move(self, entry: _Entry, event: JobEvent, **changes: Any) -> None:
        """Apply ``event`` (the rules' table decides) and ``changes`` to the job in one step.

        ``finished_at`` is cleared unless given; leaving ``running`` drops the lease.
        """
        status = move(entry.job.status, event)
        changes.setdefault("finished_at", None)
        if status is not JobStatus.RUNNING:
            entry.token = None
            changes["lease_expires_at"] = None
        if status in CLAIMABLE:
            entry.dispatched_at = None
        entry.job = replace(entry.job, status=status, **changes)
        self._index(entry)

    def _index(self, entry: _Entry) -> None:
        """Keep the heaps and sets of claimable and running jobs up to date after a move."""
        job = entry.job
        if job.status in CLAIMABLE:
            heap = self._due.setdefault(job.queue, [])
            heapq.heappush(heap, (job.run_at, entry.order, job.id))
            self._claimable.add(job.id)
        else:
            self._claimable.discard(job.id)
        if job.status is JobStatus.RUNNING:
            self._running.add(job.id)
        else:
            self._running.discard(job.id)

    def _drop_stale(self, heap: builtins.list[tuple[datetime, int, str]]) -> None:
        """Pop the entries at the top that no longer name a claimable job at that instant."""
        while heap:
            run_at, order, job_id = heap[0]
            entry = self._jobs.get(job_id)
            if (
                entry is not None
                and entry.order == order
                and entry.job.status in CLAIMABLE
                and entry.job.run_at == run_at
            ):
                return
            heapq.heappop(heap)

    def _reachable(self, job_id: str, tenant_id: str | None) -> _Entry | None:
        entry = self._jobs.get(job_id)
        if entry is None or (tenant_id is not None and entry.job.tenant_id != tenant_id):
            return None
        return entry

    def _decide_now_apply_at_commit(
        self, job_id: str, tenant_id: str | None, event: JobEvent, apply: Callable[[], bool]
    ) -> bool:
        """Apply now, or answer now whether it would apply and apply it on commit."""
        with self._mutex:
            if not self._in_unit_of_work():
                return apply()
            entry = self._reachable(job_id, tenant_id)
            possible = entry is not None and can_move(entry.job.status, event)

        def at_commit() -> None:
            with self._mutex:
                apply()

        if possible:
            self._after_commit(at_commit)
        return possible

    def _in_unit_of_work(self) -> bool:
        return self._unit_of_work is not None and self._unit_of_work.in_progress()

    def _after_commit(self, action: Callable[[], None]) -> None:
        if self._unit_of_work is None:
            action()
        else:
            self._unit_of_work.after_commit(action)


_INTERRUPTED = {"last_error_code": JOB_INTERRUPTED, "last_error_type": JobInterruptedError.__name__}


def _due(entry: _Entry, now: datetime) -> bool:
    return entry.job.status in CLAIMABLE and entry.job.run_at <= now
