"""The rules of a background job, in one place that does no I/O and never sleeps.

Every store and driver asks this module rather than deciding for itself: which moves a job's
status may make (``MOVES``), when a failed attempt runs again (exponential backoff with jitter)
or dies, how an attempt's end becomes the status of its ``BackgroundJobRun``, how long a lease
lasts and how often it is renewed, how often an unclaimed job is sent again, and how a tenant
scopes an idempotency key. A job moves through::

    queued --claim--> running --complete--> succeeded
    failed --claim--> running --retry--> failed        running --die--> dead
    running --release--> queued (the attempt uncounted)    dead --retry_dead--> queued
    queued | failed | running --cancel--> cancelled
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Collection
from datetime import datetime, timedelta
from enum import StrEnum

from ddd_celery.background.errors import JobInterruptedError
from ddd_celery.background.store import FINISHED_STATUSES, EnqueuedBy, JobFilter, JobStatus
from ddd_celery.declarations.background import BackgroundOptions
from ddd_celery.kernel.errors import DddCeleryError, JobAbortedError
from ddd_celery.kernel.instants import require_aware

DEFAULT_LEASE_MS = 30_000
"""How long a claim holds a job without a heartbeat: a dead worker's job waits this long."""


class JobEvent(StrEnum):
    """What happened to a job, as a store applies it."""

    CLAIM = "claim"
    COMPLETE = "complete"
    RETRY = "retry"
    """An attempt failed (or its lease expired) with attempts left."""
    DIE = "die"
    """An attempt failed (or its lease expired) with none left."""
    RELEASE = "release"
    CANCEL = "cancel"
    RETRY_DEAD = "retry_dead"


MOVES: dict[tuple[JobStatus, JobEvent], JobStatus] = {
    (JobStatus.QUEUED, JobEvent.CLAIM): JobStatus.RUNNING,
    (JobStatus.FAILED, JobEvent.CLAIM): JobStatus.RUNNING,
    (JobStatus.RUNNING, JobEvent.COMPLETE): JobStatus.SUCCEEDED,
    (JobStatus.RUNNING, JobEvent.RETRY): JobStatus.FAILED,
    (JobStatus.RUNNING, JobEvent.DIE): JobStatus.DEAD,
    (JobStatus.RUNNING, JobEvent.RELEASE): JobStatus.QUEUED,
    (JobStatus.QUEUED, JobEvent.CANCEL): JobStatus.CANCELLED,
    (JobStatus.FAILED, JobEvent.CANCEL): JobStatus.CANCELLED,
    (JobStatus.RUNNING, JobEvent.CANCEL): JobStatus.CANCELLED,
    (JobStatus.DEAD, JobEvent.RETRY_DEAD): JobStatus.QUEUED,
}
"""Every legal move of a job's status; the diagram above is drawn from this table."""


class IllegalJobMoveError(DddCeleryError, RuntimeError):
    """A move the table does not have; the job did not change."""


def move(status: JobStatus, event: JobEvent) -> JobStatus:
    """The status ``event`` takes a job in ``status`` to; ``IllegalJobMoveError`` if none."""
    target = MOVES.get((status, event))
    if target is None:
        raise IllegalJobMoveError(f"a {status} job cannot {event}")
    return target


def can_move(status: JobStatus, event: JobEvent) -> bool:
    return (status, event) in MOVES


def backoff_ms(attempt: int, options: BackgroundOptions, random: Callable[[], float]) -> int:
    """The wait after failed attempt ``attempt`` (from 1): ``backoff_ms * 2**(attempt-1)``.

    Capped at ``max_backoff_ms``, then jittered into its upper half with ``random()`` (a float
    in [0, 1)), so jobs that failed together do not all come back at once, and a wait is never
    zero: ``ceil(capped / 2 + random() * capped / 2)``.
    """
    if attempt < 1:
        raise ValueError(f"attempt counts from 1, got {attempt}")
    exponent = min(attempt - 1, 62)  # past 2**62 every base is capped anyway
    capped = min(options.max_backoff_ms, options.backoff_ms << exponent)
    return max(1, math.ceil(capped / 2 + random() * capped / 2))


def after_failure(
    attempt: int,
    max_attempts: int,
    now: datetime,
    options: BackgroundOptions,
    random: Callable[[], float],
) -> datetime | None:
    """When failed attempt ``attempt`` runs again; None when it was the last (the job dies)."""
    require_aware(now, "now")
    if attempt >= max_attempts:
        return None
    return now + timedelta(milliseconds=backoff_ms(attempt, options, random))


def heartbeat_interval_ms(lease_ms: int) -> int:
    """How often a lease is renewed: three times per lease, so one late beat loses nothing."""
    return max(1, lease_ms // 3)


class AttemptEnd(StrEnum):
    """How an attempt ended, before the store is told."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    """It raised, timed out, or its payload no longer validates: retried or dead."""
    RELEASED = "released"
    """The worker stopped and aborted it: the job goes back, the attempt uncounted."""
    INTERRUPTED = "interrupted"
    """It lost its lease (cancelled, or expired and claimed elsewhere): nothing to report."""


class RunStatus(StrEnum):
    """The status of a ``BackgroundJobRun``: what became of one attempt."""

    SUCCEEDED = "succeeded"
    RETRIED = "retried"
    DEAD = "dead"
    RELEASED = "released"
    INTERRUPTED = "interrupted"


def end_of(error: BaseException | None, abort_reason: BaseException | None) -> AttemptEnd:
    """How an attempt ended: once its signal is aborted, the reason decides.

    A ``JobAbortedError`` (the worker stops) releases the job, a ``JobInterruptedError`` (lease
    lost) interrupts it, any other reason (a timeout) fails it, whatever the job did after.
    """
    decisive = abort_reason if abort_reason is not None else error
    if isinstance(decisive, JobAbortedError):
        return AttemptEnd.RELEASED
    if isinstance(decisive, JobInterruptedError):
        return AttemptEnd.INTERRUPTED
    if decisive is None:
        return AttemptEnd.SUCCEEDED
    return AttemptEnd.FAILED


def run_status(end: AttemptEnd, retry_at: datetime | None) -> RunStatus:
    """The record's status: a failed attempt is ``retried`` with a ``retry_at``, else ``dead``."""
    if end is AttemptEnd.FAILED:
        return RunStatus.DEAD if retry_at is None else RunStatus.RETRIED
    return RunStatus(end.value)


def tenant_key_of(enqueued_by: EnqueuedBy) -> str:
    """The tenant part of an idempotency key: the tenant, or the empty text.

    For a store that keeps ``(tenant_key, idempotency_key)`` in a unique index, where a NULL
    would never collide.
    """
    return enqueued_by.tenant_id or ""


def scoped_idempotency_key(tenant_id: str | None, key: str) -> str:
    """One text naming ``key`` in its tenant, such that no two (tenant, key) pairs collide.

    ``f"{n}:{tenant}:{key}"`` where ``n`` is the tenant's length in UTF-8 bytes (what Lua's
    ``#`` counts, so a Redis script builds the same): read back, ``n`` says where the tenant
    ends, so tenant ``org`` with key ``42:inv-1`` and tenant ``org:42`` with key ``inv-1``
    differ. No tenant (None) is the empty tenant. Every store and the derived job id use it.
    """
    tenant = tenant_id or ""
    return f"{len(tenant.encode())}:{tenant}:{key}"


KEYED_IDS = uuid.UUID("0b6f1e4e-4d0c-4b61-9a53-5f3f7d2c8a10")
"""The namespace of the job ids derived from an idempotency key (UUID version 5)."""


def keyed_job_id(tenant_id: str | None, key: str) -> str:
    """The id of the job enqueued with idempotency ``key`` in a tenant: derived, so the same
    key in the same tenant names the same job even before the add (waiting for a commit)."""
    return str(uuid.uuid5(KEYED_IDS, scoped_idempotency_key(tenant_id, key)))


def tenant_filter(tenant_id: str | None) -> str | None:
    """``tenant_id`` as ``find``, ``cancel``, ``retry_dead`` and ``list_jobs`` take it.

    None reaches every job (an operator); the empty text names no tenant and is refused with
    ``ValueError``, on every store alike, rather than read as "the jobs of no tenant".
    """
    if tenant_id == "":
        raise ValueError("a tenant id is never empty: pass None to reach every job (an operator)")
    return tenant_id


def check_listing(where: JobFilter, now: datetime, limit: int) -> None:
    """What every store's ``list_page`` refuses, before it reads anything (``ValueError``).

    A naive ``now`` or filter instant, the empty tenant id, a ``limit`` that is not a positive
    number of jobs; a cursor is each store's own and each checks its own.
    """
    require_aware(now, "now")
    tenant_filter(where.tenant_id)
    for name, instant in (
        ("enqueued_since", where.enqueued_since),
        ("finished_since", where.finished_since),
    ):
        if instant is not None:
            require_aware(instant, name)
    if isinstance(limit, bool) or limit <= 0:
        raise ValueError(f"a page's limit is a positive number of jobs, not {limit}")


def purged_statuses(statuses: Collection[JobStatus], limit: int | None) -> list[JobStatus]:
    """The statuses a ``purge_finished`` deletes, in one order for every store.

    Refuses (``ValueError``) a status that is not finished and a ``limit`` that is not a
    positive number of jobs (None: no limit).
    """
    chosen = sorted({JobStatus(status) for status in statuses})
    unfinished = [status.value for status in chosen if status not in FINISHED_STATUSES]
    if unfinished:
        raise ValueError(f"only finished jobs are purged, not {', '.join(unfinished)} ones")
    if limit is not None and (isinstance(limit, bool) or limit <= 0):
        raise ValueError(f"a purge's limit is a positive number of jobs, not {limit}")
    return chosen


REDISPATCH_BACKOFF_CAP = 8
"""The most a re-send's wait grows to, in multiples of ``redispatch_after_ms``."""


def redispatch_wait_ms(redispatch_after_ms: int, resends: int) -> int:
    """How long after its last dispatch an unclaimed job is sent again, ``resends`` re-sends
    made since it became claimable: ``redispatch_after_ms * min(2**resends, 8)``.

    The first re-send comes after ``redispatch_after_ms``, the next after twice that, then four
    and eight times: a backlog that no worker claims is not published again at every pass.
    ``lua/job_take_due.lua`` computes the same.
    """
    if resends < 0:
        raise ValueError(f"resends counts from 0, got {resends}")
    return redispatch_after_ms * min(1 << min(resends, 3), REDISPATCH_BACKOFF_CAP)
