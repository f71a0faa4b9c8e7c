"""``InMemoryJobStore``: the ``JobStore`` of specs and of a process without a database.

Every operation is atomic under one lock, so threads (a worker's, a test's) see each job move
as the port says. Given a unit of work, ``add``, ``cancel`` and ``retry_dead`` take effect when
it commits and not at all on rollback, as a table in the use case's transaction would: the
store is then ``transactional``. A job's payload, progress and checkpoint are kept as JSON text
and every job handed out is parsed from it, as a store across the network would: an object
changed after ``enqueue``, or by an attempt, changes nothing kept.
"""

from __future__ import annotations

import bisect
import builtins
import heapq
import itertools
import json
import threading
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from ddd_celery.background.errors import JOB_INTERRUPTED, JobInterruptedError
from ddd_celery.background.rules import (
    JobEvent,
    can_move,
    check_listing,
    move,
    purged_statuses,
    redispatch_wait_ms,
    scoped_idempotency_key,
    tenant_filter,
)
from ddd_celery.background.store import (
    ATTEMPTS_KEPT,
    CLAIMABLE,
    FINISHED_STATUSES,
    AttemptRecord,
    AttemptState,
    ClaimedJob,
    Dispatch,
    JobFilter,
    JobLease,
    JobPage,
    JobStats,
    JobStatus,
    JobStore,
    JsonValue,
    LostLeaseError,
    NewJob,
    StoredJob,
    dispatched_now,
)
from ddd_celery.kernel.instants import require_aware
from ddd_celery.kernel.unit_of_work import UnitOfWork

TAKES_KEPT = 64
"""How many ``take_due`` answers are kept by their token, to answer a repeated call again."""

_Key = tuple[datetime, str]
"""(an instant, a job id): what the sorted indexes hold, and a listing's cursor."""


@dataclass(slots=True)
class _Entry:
    job: StoredJob
    """The job, its JSON fields (payload, progress, checkpoint) left None: they are below."""
    order: int
    payload: str
    progress: str = "null"
    checkpoint: str = "null"
    token: str | None = None
    """The lease of the attempt running it."""
    last_token: str | None = None
    last_end: JobEvent | None = None
    """How the last lease ended (``complete``, ``fail``...): a report repeated by it is one."""
    dispatched_at: datetime | None = None
    resends: int = 0
    """How many times the relay sent it again since it became claimable."""

    def view(self) -> StoredJob:
        """The job with its JSON fields parsed anew: a copy of its own for each caller."""
        return replace(
            self.job,
            payload=json.loads(self.payload),
            progress=json.loads(self.progress),
            checkpoint=json.loads(self.checkpoint),
        )


class InMemoryJobStore(JobStore):
    """Jobs in a dict, behind a lock; ``list()`` shows them all, for assertions."""

    def __init__(self, unit_of_work: UnitOfWork | None = None) -> None:
        self._unit_of_work = unit_of_work
        self.transactional = unit_of_work is not None
        self._jobs: dict[str, _Entry] = {}
        self._keys: dict[str, str] = {}
        """``scoped_idempotency_key`` -> the id of its job."""
        self._takes: OrderedDict[str, builtins.list[Dispatch]] = OrderedDict()
        self._due: dict[str, builtins.list[tuple[datetime, int, str]]] = {}
        """Per queue, a heap of (run_at, order, id) of claimable jobs; entries left behind by a
        move are dropped when they reach the top, so a claim costs O(log n), not a scan."""
        self._claimable: set[str] = set()
        self._running: set[str] = set()
        self._listed: dict[JobStatus | None, builtins.list[_Key]] = {}
        """(enqueued_at, id) of every job (None), and of the jobs of each status, ascending: a
        page is read from the end, so it costs its jobs, not the store's."""
        self._finished: dict[JobStatus, builtins.list[_Key]] = {}
        """(finished_at, id) of the finished jobs of each status, ascending: what a purge reads."""
        self._counts: Counter[tuple[str, JobStatus]] = Counter()
        self._counts_by_name: Counter[tuple[str, JobStatus]] = Counter()
        self._order = itertools.count()
        self._mutex = threading.RLock()

    def list(self) -> builtins.list[StoredJob]:
        """Every job kept, in the order added."""
        with self._mutex:
            return [entry.view() for entry in sorted(self._jobs.values(), key=lambda e: e.order)]

    # -- the port -----------------------------------------------------------------------

    def add(self, job: NewJob, *, dispatched: bool) -> str:
        payload = _dump(job.payload)  # now: what was enqueued, not what it becomes
        with self._mutex:
            known = self._known(job)
            if known is not None:
                return known
        self._after_commit(lambda: self._insert(job, payload, dispatched))
        return job.id

    def add_many(self, jobs: Sequence[NewJob], *, dispatched: bool) -> builtins.list[str]:
        batch = [(job, _dump(job.payload), dispatched_now(job, dispatched)) for job in jobs]
        for job, _, _ in batch:
            require_aware(job.enqueued_at, "enqueued_at")
            require_aware(job.run_at, "run_at")
        kept: builtins.list[str] = []
        with self._mutex:
            first_of_key: dict[str, str] = {}
            for job, _, _ in batch:
                known = self._known(job)
                if known is None and job.idempotency_key is not None:
                    scoped = scoped_idempotency_key(job.tenant_id, job.idempotency_key)
                    known = first_of_key.setdefault(scoped, job.id)
                kept.append(job.id if known is None else known)

        def insert_all() -> None:
            with self._mutex:
                for job, payload, due in batch:
                    self._insert(job, payload, due)

        self._after_commit(insert_all)
        return kept

    def claim_job(
        self,
        job_id: str,
        *,
        now: datetime,
        lease_ms: int,
        token: str | None = None,
        worker: str | None = None,
    ) -> ClaimedJob | None:
        require_aware(now, "now")
        with self._mutex:
            entry = self._jobs.get(job_id)
            if entry is None:
                return None
            if token is not None and entry.token == token:
                return self._claimed_again(entry, now, lease_ms)
            if (token is not None and entry.last_token == token) or not _due(entry, now):
                return None
            return self._claim(entry, now, lease_ms, token or uuid.uuid4().hex, worker)

    def claim_due(
        self,
        queues: Sequence[str],
        *,
        now: datetime,
        lease_ms: int,
        limit: int,
        token: str | None = None,
        worker: str | None = None,
    ) -> builtins.list[ClaimedJob]:
        require_aware(now, "now")
        with self._mutex:
            if token is not None:
                again = self._claimed_by(token)
                if again:
                    return [self._claimed_again(entry, now, lease_ms) for entry in again]
            stem = token or uuid.uuid4().hex
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
                lease_token = f"{stem}:{len(claimed)}"
                entry = self._jobs[job_id]
                claimed.append(self._claim(entry, now, lease_ms, lease_token, worker))
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
        progress: JsonValue = None,
        checkpoint: JsonValue = None,
        set_progress: bool = False,
        set_checkpoint: bool = False,
    ) -> None:
        progress_text = _dump(progress) if set_progress else None
        checkpoint_text = _dump(checkpoint) if set_checkpoint else None
        with self._mutex:
            entry = self._held(lease)
            if progress_text is not None:
                entry.progress = progress_text
            if checkpoint_text is not None:
                entry.checkpoint = checkpoint_text

    def complete(self, lease: JobLease, *, now: datetime) -> None:
        require_aware(now, "now")
        with self._mutex:
            if self._concluded(lease, JobEvent.COMPLETE):
                return
            entry = self._held(lease)
            self._move(
                entry,
                JobEvent.COMPLETE,
                now,
                finished_at=now,
                last_error_code=None,
                last_error_type=None,
            )

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
            if self._concluded(lease, JobEvent.RETRY, JobEvent.DIE):
                return
            entry = self._held(lease)
            error: dict[str, Any] = {"last_error_code": error_code, "last_error_type": error_type}
            if retry_at is None:
                self._move(entry, JobEvent.DIE, now, finished_at=now, **error)
            else:
                retry_at = require_aware(retry_at, "retry_at")
                self._move(entry, JobEvent.RETRY, now, run_at=retry_at, **error)

    def release(self, lease: JobLease, *, now: datetime) -> None:
        require_aware(now, "now")
        with self._mutex:
            if self._concluded(lease, JobEvent.RELEASE):
                return
            entry = self._held(lease)
            self._move(entry, JobEvent.RELEASE, now, run_at=now, attempts=entry.job.attempts - 1)

    def cancel(self, job_id: str, *, tenant_id: str | None, now: datetime) -> bool:
        require_aware(now, "now")
        tenant_filter(tenant_id)

        def apply() -> bool:
            entry = self._reachable(job_id, tenant_id)
            if entry is None:
                return False
            if entry.job.status is JobStatus.CANCELLED:
                return True  # a cancel sent twice answers as the first did
            if not can_move(entry.job.status, JobEvent.CANCEL):
                return False
            self._move(entry, JobEvent.CANCEL, now, finished_at=now)
            return True

        return self._decide_now_apply_at_commit(job_id, tenant_id, JobEvent.CANCEL, apply)

    def find(self, job_id: str, *, tenant_id: str | None) -> StoredJob | None:
        tenant_filter(tenant_id)
        with self._mutex:
            entry = self._reachable(job_id, tenant_id)
            return None if entry is None else entry.view()

    def retry_dead(self, job_id: str, *, tenant_id: str | None, now: datetime) -> bool:
        require_aware(now, "now")
        tenant_filter(tenant_id)

        def apply() -> bool:
            entry = self._reachable(job_id, tenant_id)
            if entry is None or not can_move(entry.job.status, JobEvent.RETRY_DEAD):
                return False
            self._move(entry, JobEvent.RETRY_DEAD, now, run_at=now, attempts=0)
            return True

        return self._decide_now_apply_at_commit(job_id, tenant_id, JobEvent.RETRY_DEAD, apply)

    def list_page(
        self, where: JobFilter, *, now: datetime, limit: int = 50, cursor: str | None = None
    ) -> JobPage:
        check_listing(where, now, limit)
        after = None if cursor is None else _key_of_cursor(cursor)
        with self._mutex:
            index = self._listed.get(None if where.state is None else where.state.status, [])
            position = len(index) if after is None else bisect.bisect_left(index, after)
            found: builtins.list[StoredJob] = []
            while position > 0 and len(found) <= limit:
                position -= 1
                job = self._jobs[index[position][1]].job
                if where.matches(job, now):
                    found.append(job)
            jobs = [self._jobs[job.id].view() for job in found[:limit]]
        more = len(found) > limit
        return JobPage(jobs, _cursor_of(jobs[-1]) if more else None)

    def purge_finished(
        self,
        *,
        before: datetime,
        statuses: Collection[JobStatus] = FINISHED_STATUSES,
        limit: int | None = None,
    ) -> int:
        require_aware(before, "before")
        chosen = purged_statuses(statuses, limit)
        with self._mutex:
            oldest_first = heapq.merge(*(self._finished.get(status, []) for status in chosen))
            gone: builtins.list[str] = []
            for finished_at, job_id in oldest_first:
                if finished_at >= before or len(gone) == limit:
                    break
                gone.append(job_id)
            for job_id in gone:
                self._forget(self._jobs[job_id])
            return len(gone)

    def stats(self) -> JobStats:
        with self._mutex:
            return JobStats(_nested(self._counts), _nested(self._counts_by_name))

    def take_due(
        self,
        *,
        now: datetime,
        limit: int,
        redispatch_after_ms: int,
        token: str | None = None,
    ) -> builtins.list[Dispatch]:
        require_aware(now, "now")

        def resend_due(entry: _Entry) -> bool:
            if entry.dispatched_at is None:
                return True
            wait = redispatch_wait_ms(redispatch_after_ms, entry.resends)
            return entry.dispatched_at + timedelta(milliseconds=wait) < now

        with self._mutex:
            if token is not None and token in self._takes:
                return builtins.list(self._takes[token])
            claimable = (self._jobs[job_id] for job_id in self._claimable)
            due = [e for e in claimable if _due(e, now) and resend_due(e)]
            due.sort(key=lambda e: (e.job.run_at, e.order))
            taken = due[: max(0, limit)]
            for entry in taken:
                if entry.dispatched_at is not None:
                    entry.resends += 1
                entry.dispatched_at = now
            dispatches = [
                Dispatch(e.job.id, e.job.name, e.job.queue, e.job.attempts) for e in taken
            ]
            if token is not None:
                self._takes[token] = dispatches
                while len(self._takes) > TAKES_KEPT:
                    self._takes.popitem(last=False)
            return builtins.list(dispatches)

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
            interrupted: dict[str, Any] = {"outcome": AttemptState.INTERRUPTED, **_INTERRUPTED}
            for entry in expired[: max(0, limit)]:
                if entry.job.attempts >= entry.job.max_attempts:
                    self._move(entry, JobEvent.DIE, now, finished_at=now, **interrupted)
                else:
                    self._move(entry, JobEvent.RETRY, now, run_at=now, **interrupted)
                entry.last_end = None  # expired, not concluded by its attempt: reports refused
                handed_back.append(entry.view())
            return handed_back

    # -- inside the lock ----------------------------------------------------------------

    def _known(self, job: NewJob) -> str | None:
        if job.idempotency_key is None:
            return None
        return self._keys.get(scoped_idempotency_key(job.tenant_id, job.idempotency_key))

    def _insert(self, job: NewJob, payload: str, dispatched: bool) -> None:
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
                payload=None,
                enqueued_at=job.enqueued_at,
                run_at=job.run_at,
                attempts=0,
                max_attempts=job.max_attempts,
                enqueued_by=job.enqueued_by,
                idempotency_key=job.idempotency_key,
            )
            entry = _Entry(
                stored,
                next(self._order),
                payload,
                dispatched_at=job.enqueued_at if dispatched else None,
            )
            self._jobs[job.id] = entry
            _insort(self._listed.setdefault(None, []), (job.enqueued_at, job.id))
            self._index(entry, None)
            if job.idempotency_key is not None:
                self._keys[scoped_idempotency_key(job.tenant_id, job.idempotency_key)] = job.id

    def _claim(
        self, entry: _Entry, now: datetime, lease_ms: int, token: str, worker: str | None
    ) -> ClaimedJob:
        expires_at = now + timedelta(milliseconds=_positive(lease_ms))
        attempt = entry.job.attempts + 1
        history = (*entry.job.history, AttemptRecord(attempt, now, worker))[-ATTEMPTS_KEPT:]
        self._move(
            entry,
            JobEvent.CLAIM,
            now,
            attempts=attempt,
            lease_expires_at=expires_at,
            history=history,
        )
        entry.token, entry.last_token, entry.last_end = token, None, None
        lease = JobLease(entry.job.id, entry.job.attempts, token, expires_at)
        return ClaimedJob(entry.view(), lease)

    def _claimed_again(self, entry: _Entry, now: datetime, lease_ms: int) -> ClaimedJob:
        """A claim repeated by the attempt running the job: its lease, extended, not counted."""
        assert entry.token is not None
        expires_at = now + timedelta(milliseconds=_positive(lease_ms))
        entry.job = replace(entry.job, lease_expires_at=expires_at)
        lease = JobLease(entry.job.id, entry.job.attempts, entry.token, expires_at)
        return ClaimedJob(entry.view(), lease)

    def _claimed_by(self, stem: str) -> builtins.list[_Entry]:
        """The running jobs a ``claim_due`` named ``stem`` claimed, in the order it did."""
        found = []
        for job_id in self._running:
            token = self._jobs[job_id].token or ""
            head, _, index = token.rpartition(":")
            if head == stem and index.isdigit():
                found.append((int(index), self._jobs[job_id]))
        return [entry for _, entry in sorted(found, key=lambda pair: pair[0])]

    def _concluded(self, lease: JobLease, *ends: JobEvent) -> bool:
        """Whether ``lease`` already ended its attempt with one of ``ends``: a repeated report."""
        entry = self._jobs.get(lease.job_id)
        return (
            entry is not None
            and entry.token is None
            and entry.last_token == lease.token
            and entry.last_end in ends
        )

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

    def _move(
        self,
        entry: _Entry,
        event: JobEvent,
        now: datetime,
        *,
        outcome: AttemptState | None = None,
        **changes: Any,
    ) -> None:
        """Apply ``event`` (the rules' table decides) and ``changes`` to the job in one step.

        ``finished_at`` is cleared unless given; leaving ``running`` drops the lease and ends
        the attempt's record at ``now``, with ``outcome`` (the event's when None).
        """
        before = entry.job
        status = move(before.status, event)
        changes.setdefault("finished_at", None)
        if status is not JobStatus.RUNNING:
            if entry.token is not None:
                entry.last_token, entry.last_end = entry.token, event
            entry.token = None
            changes["lease_expires_at"] = None
        if before.status is JobStatus.RUNNING and status is not JobStatus.RUNNING:
            ended = outcome or _OUTCOME_OF[event]
            code, error_type = changes.get("last_error_code"), changes.get("last_error_type")
            changes["history"] = _ended(before.history, ended, now, code, error_type)
        if status in CLAIMABLE:
            entry.dispatched_at, entry.resends = None, 0
        entry.job = replace(before, status=status, **changes)
        self._index(entry, before)

    def _index(self, entry: _Entry, before: StoredJob | None) -> None:
        """Keep every index up to date after a move from ``before`` (None: just added)."""
        job = entry.job
        if before is None or before.status is not job.status:
            if before is not None:
                self._file(before, -1)
            self._file(job, 1)
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

    def _file(self, job: StoredJob, sign: int) -> None:
        """File ``job`` under its status (``sign`` 1), or take it out of there (-1)."""
        self._counts[job.queue, job.status] += sign
        self._counts_by_name[job.name, job.status] += sign
        change = _insort if sign > 0 else _remove
        change(self._listed.setdefault(job.status, []), (job.enqueued_at, job.id))
        if job.finished_at is not None and job.status.finished:
            change(self._finished.setdefault(job.status, []), (job.finished_at, job.id))

    def _forget(self, entry: _Entry) -> None:
        """Delete a finished job and whatever names it: its idempotency key is free again."""
        job = entry.job
        del self._jobs[job.id]
        self._file(job, -1)
        _remove(self._listed[None], (job.enqueued_at, job.id))
        if job.idempotency_key is not None:
            scoped = scoped_idempotency_key(job.tenant_id, job.idempotency_key)
            if self._keys.get(scoped) == job.id:
                del self._keys[scoped]

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
        """The job when ``tenant_id`` reaches it (None: every job)."""
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
            possible = entry is not None and (
                can_move(entry.job.status, event)
                or (event is JobEvent.CANCEL and entry.job.status is JobStatus.CANCELLED)
            )

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
_OUTCOME_OF = {
    JobEvent.COMPLETE: AttemptState.SUCCEEDED,
    JobEvent.RETRY: AttemptState.FAILED,
    JobEvent.DIE: AttemptState.FAILED,
    JobEvent.RELEASE: AttemptState.RELEASED,
    JobEvent.CANCEL: AttemptState.CANCELLED,
}
"""How an attempt ends when its job leaves ``running`` by each event (an expiry says its own)."""


def _ended(
    history: tuple[AttemptRecord, ...],
    outcome: AttemptState,
    now: datetime,
    error_code: str | None,
    error_type: str | None,
) -> tuple[AttemptRecord, ...]:
    """``history`` with its last attempt, the one running, ended at ``now``."""
    *earlier, last = history
    ended = replace(
        last, outcome=outcome, ended_at=now, error_code=error_code, error_type=error_type
    )
    return (*earlier, ended)


def _insort(index: builtins.list[_Key], key: _Key) -> None:
    bisect.insort(index, key)


def _remove(index: builtins.list[_Key], key: _Key) -> None:
    position = bisect.bisect_left(index, key)
    assert index[position] == key, f"{key} is not in the index"
    del index[position]


def _nested(counts: Counter[tuple[str, JobStatus]]) -> dict[str, dict[JobStatus, int]]:
    """``{(a, status): n}`` as ``{a: {status: n}}``, leaving out a count of 0."""
    nested: dict[str, dict[JobStatus, int]] = {}
    for (key, status), count in counts.items():
        if count:
            nested.setdefault(key, {})[status] = count
    return nested


def _cursor_of(job: StoredJob) -> str:
    """Where a listing goes on after ``job``: its enqueued_at and id, as text."""
    return f"{job.enqueued_at.isoformat()}|{job.id}"


def _key_of_cursor(cursor: str) -> _Key:
    stamp, separator, job_id = cursor.partition("|")
    try:
        enqueued_at = datetime.fromisoformat(stamp)
    except ValueError:
        enqueued_at = None
    if not separator or enqueued_at is None or enqueued_at.tzinfo is None:
        raise ValueError("not a cursor of this store: pass a page's cursor as it was given")
    return enqueued_at, job_id


def _due(entry: _Entry, now: datetime) -> bool:
    return entry.job.status in CLAIMABLE and entry.job.run_at <= now


def _positive(lease_ms: int) -> int:
    if lease_ms <= 0:
        raise ValueError(f"a lease lasts a positive number of ms, not {lease_ms}")
    return lease_ms


def _dump(value: JsonValue) -> str:
    """``value`` as the JSON a store across the network would keep (what Redis's keeps)."""
    return json.dumps(value, separators=(",", ":"))
