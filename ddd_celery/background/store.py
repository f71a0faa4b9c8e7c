"""The ``JobStore`` port: the record of every background job, and what a worker may do to it.

The broker's message is only a wake-up carrying a job id; the store is the truth. So ``find``,
``cancel``, ``retry_dead``, idempotency keys and delays work whatever the broker does, and a
message published twice runs once: the claim decides.

Time is a value: every operation that compares instants takes ``now`` from the caller (a driver
reading its ``Clock``, or the store's own clock through ``store_time``), and an adapter never
reads a clock inside an operation. Every report of a worker names its attempt through the
``JobLease`` it got from a claim; a report from a lease that is no longer the job's (it expired
and the job was claimed again, or it was cancelled) is refused with ``LostLeaseError`` and
changes nothing.

Every call that changes a job is safe to send twice, since a reply can be lost after the change
was made (redis-py sends a script again on a new connection after a timeout; a driver or a
caller may retry): a repeated ``add`` (same id) keeps the first job; a repeated claim with the
same ``token`` answers the same lease; ``complete``, ``fail``, ``release``, ``heartbeat`` and
``update`` repeated by an attempt that already concluded that way answer as the first did, with
no change; a repeated ``cancel`` answers True again; a repeated ``take_due`` with the same
``token`` answers the same dispatches.

Tenants: ``tenant_id=None`` reaches every job (an operator); a tenant id is never the empty text
(``find``, ``cancel``, ``retry_dead`` and ``list_jobs`` raise ``ValueError`` for ``""``), and
an idempotency key is unique per tenant through ``rules.scoped_idempotency_key``, an encoding
where no two (tenant, key) pairs collide.

A job moves through these statuses::

    queued --claim--> running --complete--> succeeded
    running --fail(retry_at)--> failed --(due)--> claimable again     running --fail(None)--> dead
    running --release--> queued (the attempt not counted)
    queued | failed | running --cancel--> cancelled     dead --retry_dead--> queued
    running, lease expired --expire_leases--> failed (retried) or dead (attempts exhausted)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TypeVar

from ddd_celery.kernel.errors import DddCeleryError

JsonValue = Any
"""A value ``json.dumps`` writes and ``json.loads`` gives back unchanged."""


class JobStatus(StrEnum):
    """Where a background job is, as ``find`` shows it."""

    QUEUED = "queued"
    """Waiting for its ``run_at`` or for a worker."""
    RUNNING = "running"
    """Claimed: a worker holds its lease."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    """An attempt failed; it waits for its retry at ``run_at``."""
    DEAD = "dead"
    """Its attempts are exhausted; ``retry_dead`` queues it again."""
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in _FINISHED


_FINISHED = frozenset({JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED})
FINISHED_STATUSES = _FINISHED
_EARLIEST = datetime.min.replace(tzinfo=UTC)

CLAIMABLE = frozenset({JobStatus.QUEUED, JobStatus.FAILED})
"""The statuses a claim takes a job from, once its ``run_at`` has come."""


@dataclass(frozen=True, slots=True)
class EnqueuedBy:
    """The work that enqueued a job, restored in the scope of each of its attempts."""

    correlation_id: str | None = None
    actor: str | None = None
    """``kind:id`` of the actor (``str(Actor)``)."""
    tenant_id: str | None = None
    traceparent: str | None = None


@dataclass(frozen=True, slots=True)
class NewJob:
    """A job as ``StoredJobQueue.enqueue`` adds it: queued, no attempt made."""

    id: str
    name: str
    """``<context>.<job-name>``, the name its class is declared with."""
    queue: str
    """Its context by default: what a worker's concurrency is counted by."""
    payload: JsonValue
    enqueued_at: datetime
    run_at: datetime
    """Not claimable before this instant (``delay_ms``, ``run_at``)."""
    max_attempts: int
    enqueued_by: EnqueuedBy = field(default_factory=EnqueuedBy)
    idempotency_key: str | None = None
    """Unique per tenant (``tenant_key_of``): a second add with it keeps the first job."""

    @property
    def tenant_id(self) -> str | None:
        return self.enqueued_by.tenant_id


@dataclass(frozen=True, slots=True)
class StoredJob:
    """A job as the store keeps it: what ``find`` returns and a claim hands a worker."""

    id: str
    name: str
    queue: str
    status: JobStatus
    payload: JsonValue
    enqueued_at: datetime
    run_at: datetime
    attempts: int
    """Attempts made so far, the one in progress included."""
    max_attempts: int
    enqueued_by: EnqueuedBy
    idempotency_key: str | None = None
    progress: JsonValue = None
    checkpoint: JsonValue = None
    """What the last attempt saved with ``save_checkpoint``; the next attempt starts from it."""
    last_error_code: str | None = None
    """The error of the last attempt that failed (or was interrupted); None once the job has
    succeeded: a succeeded job carries no error of an earlier attempt."""
    last_error_type: str | None = None
    lease_expires_at: datetime | None = None
    finished_at: datetime | None = None
    history: tuple[AttemptRecord, ...] = ()
    """Its attempts, oldest first, the last ``ATTEMPTS_KEPT`` of them: what ``find`` tells."""

    @property
    def tenant_id(self) -> str | None:
        return self.enqueued_by.tenant_id

    def state(self, now: datetime) -> JobState:
        """Where the job is as an operator reads it at ``now`` (``JobState``)."""
        if self.status is JobStatus.QUEUED:
            return JobState.SCHEDULED if self.run_at > now else JobState.READY
        return _STATE_OF_STATUS[self.status]


ATTEMPTS_KEPT = 25
"""How many attempts a job's ``history`` keeps, the latest: ``retry_dead`` can make a job's
attempts grow without end, its record must not."""


class AttemptState(StrEnum):
    """How an attempt ended, as ``AttemptRecord.outcome`` holds it."""

    RUNNING = "running"
    """Not ended yet (or its worker died and the lease has not expired)."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    """It raised; the job is retried or dead (``StoredJob.status`` says which)."""
    INTERRUPTED = "interrupted"
    """Its lease expired without a conclusion (``expire_leases``: a worker killed or cut off)."""
    RELEASED = "released"
    """Given back by a worker stopping; not counted as an attempt."""
    CANCELLED = "cancelled"
    """The job was cancelled while it ran."""


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One attempt of a job: when and where it ran, and how it ended (never an error message)."""

    number: int
    """The value of ``attempts`` the claim made (a released attempt keeps its number: the next
    claim makes the same number again)."""
    started_at: datetime
    worker: str | None
    """What the claim named (``claim_job(worker=...)``: the Celery worker's hostname)."""
    outcome: AttemptState = AttemptState.RUNNING
    ended_at: datetime | None = None
    error_code: str | None = None
    error_type: str | None = None


class JobState(StrEnum):
    """A job's status as an operator reads it: ``queued`` is split by whether it is due yet."""

    SCHEDULED = "scheduled"
    """Queued, its ``run_at`` still to come (a delay)."""
    READY = "ready"
    """Queued and due: waiting for a worker."""
    RUNNING = "running"
    RETRYING = "retrying"
    """An attempt failed; it waits for its retry (status ``failed``)."""
    DEAD = "dead"
    SUCCEEDED = "succeeded"
    CANCELLED = "cancelled"

    @property
    def status(self) -> JobStatus:
        """The status this state reads (``queued`` for scheduled and ready): a store's index."""
        return JobStatus.QUEUED if self in _QUEUED_STATES else _STATUS_OF_STATE[self]


_STATE_OF_STATUS = {
    JobStatus.RUNNING: JobState.RUNNING,
    JobStatus.FAILED: JobState.RETRYING,
    JobStatus.DEAD: JobState.DEAD,
    JobStatus.SUCCEEDED: JobState.SUCCEEDED,
    JobStatus.CANCELLED: JobState.CANCELLED,
}
_STATUS_OF_STATE = {state: status for status, state in _STATE_OF_STATUS.items()}
_QUEUED_STATES = frozenset({JobState.SCHEDULED, JobState.READY})


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Which jobs a listing or a bulk command reaches; a field left None does not narrow.

    ``state`` SCHEDULED and READY both read status ``queued`` and split it at the ``now`` the
    query is given. ``tenant_id`` as for ``cancel`` (``""`` is refused).
    """

    state: JobState | None = None
    name: str | None = None
    queue: str | None = None
    tenant_id: str | None = None
    enqueued_since: datetime | None = None
    finished_since: datetime | None = None

    def matches(self, job: StoredJob, now: datetime) -> bool:
        """Whether ``job`` is one the filter reaches at ``now``: the reference of every store."""
        finished_since = self.finished_since
        return (
            (self.state is None or job.state(now) is self.state)
            and (self.name is None or job.name == self.name)
            and (self.queue is None or job.queue == self.queue)
            and (self.tenant_id is None or job.tenant_id == self.tenant_id)
            and (self.enqueued_since is None or job.enqueued_at >= self.enqueued_since)
            and (
                finished_since is None
                or (job.finished_at is not None and job.finished_at >= finished_since)
            )
        )


@dataclass(frozen=True, slots=True)
class JobPage:
    """A page of a listing, most recently enqueued first (``enqueued_at``, then id, descending).

    ``cursor`` is None on the last page; otherwise given back to ``list_page`` with the same
    filter, by this instance or another on the same data, it answers the next page: the jobs
    after the last of this one in that order, whatever was added or moved since. A page holds
    at most ``limit`` jobs. Listing on an index alone (no filter), every page but the last is
    full and the last is never empty; a filter applied to what the index reads may leave a
    page shorter, even empty, with a cursor, so that what one page reads stays bounded: read
    on until the cursor is None.
    """

    jobs: list[StoredJob]
    cursor: str | None


@dataclass(frozen=True, slots=True)
class JobLease:
    """Proof that a worker runs attempt ``attempt`` of job ``job_id`` until ``expires_at``."""

    job_id: str
    attempt: int
    token: str
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """A job a worker claimed, and the lease its reports name."""

    job: StoredJob
    lease: JobLease


@dataclass(frozen=True, slots=True)
class JobStats:
    """How many jobs each queue holds in each status."""

    counts: Mapping[str, Mapping[JobStatus, int]]
    """``{queue: {status: count}}``; a status with no job is left out."""
    by_name: Mapping[str, Mapping[JobStatus, int]] = field(default_factory=dict)
    """``{job name: {status: count}}``, the same jobs counted by name."""

    def total(self, status: JobStatus) -> int:
        return sum(by_status.get(status, 0) for by_status in self.counts.values())


@dataclass(frozen=True, slots=True)
class Dispatch:
    """A job the relay must publish: its id, name and queue, and its attempts so far."""

    job_id: str
    name: str
    queue: str
    attempts: int = 0
    """The attempts made before this wake-up: its Celery ``retries``, as Flower shows it."""


_T = TypeVar("_T")


class Batch(list[_T]):
    """The answer of a relay query (``take_due``, ``expire_leases``): a list, and ``dropped``.

    ``dropped`` counts the index entries that named a job whose record is gone (a Redis key
    evicted under ``maxmemory``, deleted by hand): the store drops them and goes on, so one
    lost record never fails a whole pass; the relay can log the count. A store without such
    indexes returns a plain list (``dropped_of`` reads 0).
    """

    dropped: int

    def __init__(self, items: Iterable[_T] = (), *, dropped: int = 0) -> None:
        super().__init__(items)
        self.dropped = dropped


def dropped_of(answer: Sequence[object]) -> int:
    """``answer.dropped`` of a ``Batch``, 0 for any other list."""
    return answer.dropped if isinstance(answer, Batch) else 0


ADD_MANY_BATCH = 1_000
"""Jobs one write of ``add_many`` holds at most where a store splits it (a Redis script, a
PostgreSQL statement's parameters): no write holds the store for long."""


def dispatched_now(job: NewJob, dispatched: bool) -> bool:
    """Whether ``add_many(dispatched=dispatched)`` dispatches ``job``: it is due when enqueued."""
    return dispatched and job.run_at <= job.enqueued_at


class LostLeaseError(DddCeleryError, RuntimeError):
    """A report named a lease that is no longer the job's: the store changed nothing."""


class JobStore(ABC):
    """Every background job's record; each method is atomic for the job it names.

    ``transactional`` says whether ``add`` writes in the caller's unit of work (a SQL store on
    the use case's connection): then the row is the outbox and the queue publishes after the
    commit. A store that is not (Redis, memory) is added to after the commit instead. Raises
    ``ConnectionError`` (a subclass of it) when the store cannot be asked.

    A job's payload, progress and checkpoint come back from the store as plain JSON, a copy of
    their own: changing what was enqueued, or what an attempt got, changes nothing stored.
    """

    transactional: bool = False

    def store_time(self) -> datetime | None:
        """The store's own clock, aware UTC (Redis ``TIME``, PostgreSQL ``clock_timestamp()``).

        None for a store whose clock is the caller's (memory, SQLite): the default. A driver
        measures its offset to this clock and passes store time as every ``now``, so due times
        and leases are judged on one clock whatever the skew between processes.

        Raises:
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """
        return None

    @abstractmethod
    def add(self, job: NewJob, *, dispatched: bool) -> str:
        """Keep ``job`` queued and return its id.

        When a job of the same tenant already has ``job.idempotency_key``, nothing is added and
        that job's id is returned. ``dispatched`` says the caller publishes its wake-up now (a
        job due at once): the relay then leaves it alone unless no worker claims it within its
        ``redispatch_after_ms``. A job not dispatched (delayed) waits for the relay.

        Raises:
            ValueError: an instant given is naive.
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """

    @abstractmethod
    def add_many(self, jobs: Sequence[NewJob], *, dispatched: bool) -> list[str]:
        """Keep every job of ``jobs`` queued at once; the id kept for each, in their order.

        What ``add`` of each in turn would keep and answer, in one write (a statement, a
        script per ``ADD_MANY_BATCH`` jobs): a job whose idempotency key its tenant already
        has, in the store or earlier in ``jobs``, adds nothing and answers that job's id; a
        job whose id is kept already adds nothing. ``dispatched`` says the caller publishes
        now the wake-up of each job due when enqueued (``dispatched_now``); a job due later
        waits for the relay. Sent again with the same jobs (a reply lost), it keeps one of
        each and answers the same ids. A transactional store writes in the caller's unit of
        work, all of them or none.

        Raises:
            ValueError: an instant given is naive (nothing is added).
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """

    @abstractmethod
    def claim_job(
        self,
        job_id: str,
        *,
        now: datetime,
        lease_ms: int,
        token: str | None = None,
        worker: str | None = None,
    ) -> ClaimedJob | None:
        """Claim one job for an attempt (a Celery message naming it).

        Succeeds when the job is queued or failed and its ``run_at`` is not after ``now``:
        it becomes running, ``attempts`` counts one more, and the lease lasts ``lease_ms``.
        Returns None, changing nothing, for a job that is unknown, not due, running under
        another lease, or finished: a message published twice runs once.

        ``token`` names the attempt (the lease's ``token``); None: the store makes one, once per
        call, so its own retries send the same. A claim repeated with the token of the lease the
        job is running under answers that lease again (the same attempt, not counted again),
        its expiry moved to ``now + lease_ms``: a claim whose reply was lost is not lost.

        The claim appends an ``AttemptRecord`` (started ``now``, on ``worker``) to the job's
        ``history``; each conclusion (``complete``, ``fail``, ``release``, ``cancel``,
        ``expire_leases``) ends it. A repeated claim appends nothing.

        Raises:
            ValueError: an instant given is naive, or ``lease_ms`` is not positive.
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """

    @abstractmethod
    def claim_due(
        self,
        queues: Sequence[str],
        *,
        now: datetime,
        lease_ms: int,
        limit: int,
        token: str | None = None,
        worker: str | None = None,
    ) -> list[ClaimedJob]:
        """Claim up to ``limit`` due jobs of ``queues``, earliest ``run_at`` first (a poller).

        ``token`` names the call (None: the store makes one): the ``i``-th job claimed (from 0)
        gets the lease token ``f"{token}:{i}"``. Repeated with the same token, it answers again
        the jobs that call claimed and still run under those leases (expiries moved to
        ``now + lease_ms``), and claims nothing more.

        Raises:
            ValueError: an instant given is naive, or ``lease_ms`` is not positive.
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """

    @abstractmethod
    def heartbeat(self, lease: JobLease, *, now: datetime, lease_ms: int) -> JobLease:
        """Extend ``lease`` to ``now + lease_ms``; ``LostLeaseError`` when it is not the job's.

        The lease returned and the one claimed name the same attempt (same token): a report may
        name either. Sent twice, the second extends it again.

        Raises:
            LostLeaseError: ``lease`` is no longer the job's; nothing changed.
            ValueError: an instant given is naive, or ``lease_ms`` is not positive.
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """

    @abstractmethod
    def update(
        self,
        lease: JobLease,
        *,
        progress: JsonValue = None,
        checkpoint: JsonValue = None,
        set_progress: bool = False,
        set_checkpoint: bool = False,
    ) -> None:
        """Save the attempt's progress and/or checkpoint (each only when its ``set_`` is True).

        Raises:
            LostLeaseError: ``lease`` is no longer the job's; nothing changed.
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """

    @abstractmethod
    def complete(self, lease: JobLease, *, now: datetime) -> None:
        """The attempt succeeded: the job is ``succeeded``, its ``last_error_*`` cleared.

        Repeated by the attempt that completed it, no error and no change (the same holds for
        ``fail`` and ``release``: a report sent twice is one).

        Raises:
            LostLeaseError: ``lease`` is no longer the job's; nothing changed.
            ValueError: an instant given is naive.
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """

    @abstractmethod
    def fail(
        self,
        lease: JobLease,
        *,
        now: datetime,
        error_code: str,
        error_type: str,
        retry_at: datetime | None,
    ) -> None:
        """The attempt failed: ``failed`` until ``retry_at``, or ``dead`` when it is None.

        The decision is the core's (``rules.after_failure``); the store applies it. A job to
        retry is not dispatched: the relay publishes it once ``retry_at`` comes.

        Raises:
            LostLeaseError: ``lease`` is no longer the job's; nothing changed.
            ValueError: an instant given is naive.
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """

    @abstractmethod
    def release(self, lease: JobLease, *, now: datetime) -> None:
        """Give the job back, queued and due now, its attempt not counted (a worker stopping).

        Raises:
            LostLeaseError: ``lease`` is no longer the job's; nothing changed.
            ValueError: an instant given is naive.
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """

    @abstractmethod
    def cancel(self, job_id: str, *, tenant_id: str | None, now: datetime) -> bool:
        """Cancel a queued, failed or running job; True when the job is cancelled after the call.

        So a cancel sent twice answers True twice; False for a job unknown, another tenant's,
        or finished otherwise (succeeded, dead). ``tenant_id`` None reaches every job;
        otherwise only that tenant's; ``""`` raises ``ValueError``. A running job's lease is
        then lost: its worker's next report gets ``LostLeaseError`` and aborts it.

        Raises:
            ValueError: ``tenant_id`` is the empty text.
            ValueError: an instant given is naive.
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """

    @abstractmethod
    def find(self, job_id: str, *, tenant_id: str | None) -> StoredJob | None:
        """The job, or None when unknown or another tenant's (``tenant_id`` None: any).

        ``tenant_id=""`` raises ``ValueError``: no tenant is named by the empty text.

        Raises:
            ValueError: ``tenant_id`` is the empty text.
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """

    @abstractmethod
    def retry_dead(self, job_id: str, *, tenant_id: str | None, now: datetime) -> bool:
        """Queue a dead job again, due now, with its attempts reset; False if it is not dead.

        The job is not dispatched: the relay publishes it (or the caller, through the queue).
        ``tenant_id`` as for ``cancel``.

        Raises:
            ValueError: ``tenant_id`` is the empty text.
            ValueError: an instant given is naive.
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """

    @abstractmethod
    def list_page(
        self, where: JobFilter, *, now: datetime, limit: int = 50, cursor: str | None = None
    ) -> JobPage:
        """A page of the jobs ``where`` reaches at ``now``, most recently enqueued first.

        Read on an index: a page costs about the same among 1,000 jobs as among 1,000,000
        (a filter on a status, a name or a tenant reads that index; other filters are applied
        to what it reads). ``cursor`` is a page's ``cursor``; one this store did not give raises
        ``ValueError``.

        Raises:
            ValueError: ``where.tenant_id`` is the empty text, ``limit`` is not positive, an
                instant given is naive, or ``cursor`` is not one of this store's.
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """

    def list_jobs(
        self, *, status: JobStatus | None = None, tenant_id: str | None = None, limit: int = 100
    ) -> list[StoredJob]:
        """Jobs of ``status`` (any when None), most recently enqueued first: for operators.

        ``tenant_id`` as for ``cancel``; ``list_page`` is the paged and filtered form.

        Raises:
            ValueError: ``tenant_id`` is the empty text.
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """
        # At the earliest instant every queued job is still to come: SCHEDULED reads them all.
        state = None if status is None else _STATE_OF_STATUS.get(status, JobState.SCHEDULED)
        where = JobFilter(state=state, tenant_id=tenant_id)
        found: list[StoredJob] = []
        cursor: str | None = None
        while len(found) < limit:
            page = self.list_page(where, now=_EARLIEST, limit=limit - len(found), cursor=cursor)
            found.extend(page.jobs)
            cursor = page.cursor
            if cursor is None:
                break
        return found

    @abstractmethod
    def purge_finished(
        self,
        *,
        before: datetime,
        statuses: Collection[JobStatus] = FINISHED_STATUSES,
        limit: int | None = None,
    ) -> int:
        """Delete up to ``limit`` jobs of ``statuses`` finished before ``before``; how many.

        ``statuses`` are finished ones (``ValueError`` otherwise); ``limit`` None: all of them.
        A job finished at ``before`` itself is kept.
        The jobs are found on an index of ``finished_at``, oldest first, so a retention pass
        of bounded batches costs its batch whatever the store holds. The idempotency keys of
        the jobs deleted are freed.

        Raises:
            ValueError: an instant given is naive, a status is not finished, or ``limit`` is
                not positive.
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """

    @abstractmethod
    def stats(self) -> JobStats:
        """Counts per queue and status, and per job name and status (``JobStats.by_name``).

        Kept as counters where a store moves jobs in scripts (memory, Redis); counted on two
        narrow indexes in SQL (an index-only scan, no job row read: counters there would be one
        contended row updated by every claim and completion).

        Raises:
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """

    @abstractmethod
    def take_due(
        self,
        *,
        now: datetime,
        limit: int,
        redispatch_after_ms: int,
        token: str | None = None,
    ) -> list[Dispatch]:
        """The relay's one query: jobs to publish now, marked dispatched at ``now``.

        Claimable jobs whose ``run_at`` is not after ``now`` and that were never dispatched, or
        were dispatched and not claimed since (a message lost, a publish after the commit that
        never happened, a worker killed with the message prefetched), earliest ``run_at`` first.
        A job is sent again ``redispatch_after_ms`` after its dispatch, then after twice that,
        four times, and eight times for every further re-send (``rules.redispatch_wait_ms``),
        so a backlog nobody claims is not sent again and again; the count starts over each
        time the job becomes claimable again.

        ``token`` names the call (None: the store makes one, once per call): repeated with the
        same token (a reply lost), it answers the same dispatches again and takes no more. A
        relay draining a backlog calls again with another token. May return a ``Batch``
        (``dropped``: stale index entries skipped).

        Raises:
            ValueError: an instant given is naive.
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """

    @abstractmethod
    def expire_leases(self, *, now: datetime, limit: int) -> list[StoredJob]:
        """Running jobs whose lease expired before ``now`` (their worker died), handed back.

        Each becomes ``failed`` due now (to run again) or ``dead`` when its attempts are
        exhausted, its error code ``JOB_INTERRUPTED``; returned as they are now. A lease
        expired is concluded: that attempt's later reports get ``LostLeaseError``. May return a
        ``Batch`` (``dropped``: stale index entries skipped).

        Raises:
            ValueError: an instant given is naive.
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """
