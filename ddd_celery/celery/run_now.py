"""``run_now``: a scheduled job run once in this process, as a worker would run it; and
``send_to_workers``: one occurrence sent to the workers, as beat sends it.

For a test, a script or ``celery jobs run-now``. Run here, the run takes no lock, leaves the run
state alone and is recorded like any run (``OccurrenceRun``, the worker's own run of an
occurrence). Sent, the occurrence goes through what beat's does (its lock ``job:<name>:<instant>``,
its checkpoint, its claim in the run state), so a beat or another operator never sends it twice.
A given instant (``at``) replays that occurrence, and must be one of the schedule's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from ddd_celery.celery.message import OccurrenceMessage
from ddd_celery.celery.registry import CeleryJob, CeleryJobs, jobs_of
from ddd_celery.celery.tasks import OccurrenceRun
from ddd_celery.celery.tracing import send_span
from ddd_celery.declarations.cron_evaluator import latest_occurrence, next_occurrence
from ddd_celery.declarations.options import OverlapPolicy
from ddd_celery.kernel.errors import DddCeleryError
from ddd_celery.kernel.instants import iso_ms, to_utc
from ddd_celery.scheduling.occurrence import lock_key, lock_ttl_ms, run_ttl_ms
from ddd_celery.scheduling.occurrence_store import Beginning
from ddd_celery.scheduling.outcomes import JobRun
from ddd_celery.scheduling.run_state import Claim

_TICK = timedelta(microseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class NotAnOccurrenceError(DddCeleryError, ValueError):
    """An instant that is not an occurrence of the job that came: nothing is run or sent.

    Its message names the job, the instant and the schedule's instants on either side of it.
    """


class OccurrenceNotSentError(DddCeleryError):
    """The occurrence was not sent to the workers: its lock is held, a run is in progress, or
    the broker did not take the message (``__cause__``). Nothing is left claimed."""


@dataclass(frozen=True, slots=True)
class SentOccurrence:
    """What ``send_to_workers`` did with an occurrence."""

    job: str
    scheduled_at: datetime
    correlation_id: str
    task_id: str | None
    """The id of the task message sent; None when the occurrence was queued instead."""
    queue: str | None
    lock_key: str | None
    """The lock taken for the occurrence, held until ``expires_at``; None without one."""
    expires_at: datetime
    """When the message expires unrun (the lock's end): a worker later than that drops it."""
    queued_behind: datetime | None = None
    """The run in progress the occurrence waits behind (``overlap='queue'``): the worker that
    ends that run sends it."""


@dataclass(frozen=True, slots=True)
class RanHere:
    """What ``run_here`` did: the run's record, what the job raised, and why the record was
    not kept (the last runs' error, None when kept)."""

    record: JobRun
    error: BaseException | None
    unkept: BaseException | None


def run_now(target: Any, name: str, *, at: datetime | None = None) -> JobRun:
    """Run the job ``name`` once in this process, as a worker would, and raise what it raised.

    ``target`` is the Celery app or its ``CeleryJobs``. The run gets the scope of a scheduled
    one (origin ``schedule``, the job's system actor, a fresh correlation id, ``scheduled_at``
    the instant it was asked, or ``at``: an occurrence of the schedule replayed), takes no lock,
    leaves the run state alone, and is recorded like any run. It works on a disabled job and in
    a process where ``RUN_JOBS`` is false. Raises ``UnknownJobError`` for a name no job has,
    ``TypeError`` for a ``beat_schedule`` entry (its own task runs it) and for a system job
    (beat runs it), ``NotAnOccurrenceError`` for an ``at`` that is not an instant of the
    schedule or is still to come, ``JobTimeoutError`` for a run that outlived ``timeout_ms``;
    returns the record of a run that succeeded. Call it from synchronous code (an async caller
    uses ``asyncio.to_thread``): it runs its own event loop for an async job.
    """
    ran = run_here(target, name, at=at)
    if ran.error is not None:
        raise ran.error
    return ran.record


def run_here(target: Any, name: str, *, at: datetime | None = None) -> RanHere:
    """``run_now`` that returns what it did instead of raising what the job raised.

    For a caller that reports the run itself, such as ``celery jobs run-now``: a run whose
    record the last runs could not keep is a run nobody will find in its history.
    """
    registry = target if isinstance(target, CeleryJobs) else jobs_of(target)
    job = _runnable(registry, name, "run_now")
    now = registry.clock.now()
    run = OccurrenceRun(
        registry,
        job,
        scheduled_at=now if at is None else occurrence_of(job, at, now),
        correlation_id=registry.ids.next_id(),
        tenant_id=None,
        app=None,
    )
    record, error = run.execute()
    return RanHere(record, error, run.unkept)


def send_to_workers(app: Any, name: str, *, at: datetime | None = None) -> SentOccurrence:
    """Send an occurrence of the job ``name`` to the workers, as beat sends it.

    The occurrence is ``at`` (an instant of the schedule that came), by default the latest that
    came. It goes through what beat's goes through: its lock (``job:<name>:<instant>``, for a
    ``single_instance`` job), its checkpoint, its claim in the run state; then its task message,
    which expires with the lock. The lease is kept to its end, so a beat reaching the same
    occurrence records ``skipped-locked``. Raises what ``run_now`` raises for the name and the
    instant, ``OccurrenceNotSentError`` when the lock is held, a run is in progress
    (``overlap='skip'``) or the broker does not take the message, and the store's error when a
    store cannot be asked; in each case nothing stays claimed and the lock is released.
    """
    registry = jobs_of(app)
    job = _runnable(registry, name, "send_to_workers")
    now = registry.clock.now()
    scheduled_at = latest_instant(job, now) if at is None else occurrence_of(job, at, now)
    options, rules = job.schedule.options, registry.rules
    beginning = Beginning(
        job=name,
        scheduled_at=scheduled_at,
        lock_key=lock_key(name, scheduled_at) if options.single_instance else None,
        lock_ttl_ms=lock_ttl_ms(options, rules),
        claim=True,
        queue=options.overlap is OverlapPolicy.QUEUE,
        run_ttl_ms=run_ttl_ms(options, rules),
    )
    store = registry.occurrences()
    store.begin([beginning])
    try:
        _begun(registry, beginning)
    except BaseException:
        _undo(registry, beginning)
        raise
    lease = beginning.lease
    expires_at = now + timedelta(milliseconds=beginning.lock_ttl_ms)
    sent = SentOccurrence(
        job=name,
        scheduled_at=scheduled_at,
        correlation_id=registry.ids.next_id(),
        task_id=None,
        queue=job.queue,
        lock_key=beginning.lock_key,
        expires_at=expires_at if lease is None else lease.expires_at,
    )
    if beginning.claimed is Claim.QUEUED:
        return replace(sent, queued_behind=_running(registry, name))
    message = OccurrenceMessage(scheduled_at, sent.correlation_id)
    try:
        with send_span(name, scheduled_at, sent.correlation_id) as headers:
            result = app.send_task(
                job.task_name,
                kwargs=message.to_kwargs(),
                queue=job.queue,
                expires=sent.expires_at,
                serializer="json",
                headers=headers,
            )
    except Exception as error:
        _undo(registry, beginning)
        raise OccurrenceNotSentError(
            f"{name}: the broker did not take the message of {iso_ms(scheduled_at)}; "
            "nothing was sent"
        ) from error
    return replace(sent, task_id=str(result.id))


def occurrence_of(job: CeleryJob, at: datetime, now: datetime) -> datetime:
    """``at`` in UTC, once known to be an instant of the job's schedule no later than ``now``.

    Raises ``NotAnOccurrenceError`` naming the schedule's instants on either side of it, and
    ``ValueError`` for a naive ``at``.
    """
    at = to_utc(at, "at")
    schedule = job.schedule
    if at > now:
        raise NotAnOccurrenceError(
            f"{job.name}: {iso_ms(at)} is still to come (now is {iso_ms(now)}); "
            "only an occurrence that came is replayed"
        )
    if next_occurrence(schedule, at - _TICK) == at:
        return at
    before = latest_occurrence(schedule, after=_EPOCH, not_after=at)
    around = f"the nearest are {iso_ms(before)} and " if before is not None else "the next is "
    raise NotAnOccurrenceError(
        f"{job.name}: {iso_ms(at)} is not an instant of its schedule ({schedule.description}); "
        f"{around}{iso_ms(next_occurrence(schedule, at))}"
    )


def latest_instant(job: CeleryJob, now: datetime) -> datetime:
    """The latest instant of the job's schedule at or before ``now``."""
    latest = latest_occurrence(job.schedule, after=_EPOCH, not_after=now)
    if latest is None:
        raise NotAnOccurrenceError(f"{job.name}: no instant of its schedule has come yet")
    return latest


def _runnable(registry: CeleryJobs, name: str, caller: str) -> CeleryJob:
    job = registry.job(name)
    if job.inline is not None:
        raise TypeError(
            f"{name} is a system job that runs inside beat, under beat's lock (the relay of "
            f"background jobs runs there every second): it has no task, and {caller} does not "
            "run it; a running beat is what runs it"
        )
    if not job.declared:
        raise TypeError(
            f"{name} is a beat_schedule entry: its task {job.task_name!r} runs it "
            f"(celery call), not {caller}"
        )
    return job


def _begun(registry: CeleryJobs, beginning: Beginning) -> None:
    """Raise unless the occurrence is locked and claimed; write its checkpoint if ``begin``
    did not, as beat does once it sends."""
    at, name = iso_ms(beginning.scheduled_at), beginning.job
    if beginning.error is not None:
        raise beginning.error
    if beginning.lock_held:
        raise OccurrenceNotSentError(
            f"{name}: another beat or run-now holds the occurrence of {at} (its lock "
            f"{beginning.lock_key} is taken); nothing was sent"
        )
    if beginning.claimed is Claim.BUSY:
        running = _running(registry, name)
        since = "" if running is None else f" (the occurrence of {iso_ms(running)})"
        raise OccurrenceNotSentError(
            f"{name}: a run is in progress{since} and its overlap is skip: the occurrence of "
            f"{at} was not sent"
        )
    if not beginning.checkpointed and registry.checkpoints is not None:
        registry.checkpoints.write(name, beginning.scheduled_at)


def _undo(registry: CeleryJobs, beginning: Beginning) -> None:
    """End the claim of an occurrence not sent and release its lock; best effort, as the
    error already raised is the one to report."""
    try:
        if beginning.claimed is Claim.STARTED or beginning.claimed is Claim.QUEUED:
            registry.occurrences().free(beginning)
        if beginning.lease is not None:
            registry.lock.release(beginning.lease)
    except Exception:  # the original error says what went wrong; the lock expires anyway
        return


def _running(registry: CeleryJobs, name: str) -> datetime | None:
    """The run in progress, for the message only: a store that cannot say leaves it out."""
    try:
        return registry.run_state.running(name)
    except Exception:
        return None
