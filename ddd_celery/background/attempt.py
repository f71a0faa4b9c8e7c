"""One attempt of a background job, shared by every driver: run it, then tell the store.

A driver (``QueueWorker`` on asyncio, the Celery task in a worker thread) does three steps::

    claimed = store.claim_job(job_id, now=clock.now(), lease_ms=lease_ms)  # or claim_due(...)
    if claimed is None: return                      # cancelled, done, or claimed elsewhere
    controller = AbortController()
    outcome = await run_claimed(claimed, registration, scope=scope, clock=clock, store=store,
                                controller=controller, call_sync=...)   # or run_claimed_sync(...)
    conclusion = conclude(store, claimed, outcome, options=registration.options,
                          now=clock.now(), random=random.random)
    recorder.record(conclusion.run, conclusion.error)            # BackgroundRecorder

While the attempt runs, the driver renews the lease every ``heartbeat_interval_ms(lease_ms)``
with ``renew_lease``, which aborts ``controller`` with ``JobInterruptedError`` once the lease is
lost (the job was cancelled, or its lease expired and another worker claimed it). It may abort
``controller`` itself: ``JobTimeoutError`` when ``options.timeout_ms`` passes (the attempt
fails, retried per the rules), ``JobAbortedError`` when it stops (the job is released, the
attempt uncounted). Once the signal is aborted, its reason decides how the attempt ended,
whatever the job does afterwards. A driver that stops waiting for a job still running (a
timeout on a loop) builds the outcome with ``AttemptOutcome.abandoned(reason, ...)``.

``run_claimed`` opens the execution scope of the attempt (origin ``background``; the actor,
correlation id, tenant and traceparent of the work that enqueued, restored from the store),
validates the stored payload against the declared type, builds the job through its factory,
runs it (an ``async def run`` is awaited, a sync one goes through ``call_sync``) and maps what
it raised. Errors listed in ``timeout_errors`` (Celery's ``SoftTimeLimitExceeded``) become a
``JobTimeoutError``. A payload that no longer validates fails the attempt and the job is dead
at once, with ``INVALID_ENQUEUE``: running it again would fail the same way.

``conclude`` applies the end to the store (``complete``, ``fail`` with the retry instant of
``rules.after_failure`` or None for dead, ``release``); a ``LostLeaseError`` there means the job
is no longer this attempt's: the attempt is ``interrupted`` and nothing changes. Other store
errors propagate: the job then comes back when its lease expires (``expire_leases``).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel

from ddd_celery.background.errors import (
    AttemptsExhaustedError,
    InvalidEnqueueError,
    JobInterruptedError,
)
from ddd_celery.background.observability import BackgroundJobRun
from ddd_celery.background.payloads import from_stored, json_problem
from ddd_celery.background.rules import AttemptEnd, after_failure, end_of, run_status
from ddd_celery.background.store import ClaimedJob, JobLease, JobStore, LostLeaseError
from ddd_celery.declarations.background import (
    BackgroundJobExecution,
    BackgroundOptions,
    background_declaration_of,
    background_options,
    check_name,
    payload_type_of,
)
from ddd_celery.declarations.errors import DeclarationError
from ddd_celery.declarations.names import context_of
from ddd_celery.kernel.abort import AbortController
from ddd_celery.kernel.actor import Actor, system_actor
from ddd_celery.kernel.clock import Clock
from ddd_celery.kernel.errors import JobTimeoutError, error_code_of
from ddd_celery.kernel.scope import ExecutionContext, ExecutionScope

BACKGROUND_ORIGIN = "background"

BackgroundCallable = Callable[[Any, BackgroundJobExecution], Any]
"""``run(payload, execution)``, sync or async."""

SyncCall = Callable[[Callable[[], Any]], Awaitable[Any]]
"""How a driver on a loop calls sync work: in a thread (``asyncio.to_thread``) or inline."""


async def call_inline(work: Callable[[], Any]) -> Any:
    """Call sync work in this thread: right where nothing else waits on the loop."""
    return work()


@dataclass(frozen=True, slots=True)
class BackgroundRegistration:
    """What a driver runs for a job name: its options, payload type and ``run``.

    Built from a declared class and a factory (``registration_of``), or from a name, options and
    a callable as the seeds show (``BackgroundRegistration.of_callable``).
    """

    name: str
    options: BackgroundOptions
    run: BackgroundCallable
    """Builds the job (when registered from a class) and runs it, once per attempt."""
    is_async: bool
    """True when ``run`` must be awaited rather than called through ``call_sync``."""
    payload_type: type[BaseModel] | None = None

    @property
    def context(self) -> str:
        return context_of(self.name)

    @property
    def queue(self) -> str:
        return self.options.queue or self.context

    @classmethod
    def of_callable(
        cls,
        *,
        name: str,
        run: BackgroundCallable,
        options: BackgroundOptions | Mapping[str, Any] | None = None,
    ) -> BackgroundRegistration:
        """A registration of ``run(payload, execution)``; the payload type read from it.

        Raises ``DeclarationError`` for a bad name or options, like ``@background``.
        """
        check_name(name)
        checked = background_options(options, job=name)
        if not callable(run):
            raise DeclarationError("run must be a callable run(payload, execution)", job=name)
        return cls(
            name=name,
            options=checked,
            run=run,
            is_async=inspect.iscoroutinefunction(run),
            payload_type=payload_type_of(run, job=name),
        )


def registration_of(
    job_class: type[Any], factory: Callable[[], Any] | None = None
) -> BackgroundRegistration:
    """The registration of a ``@background`` class, built by ``factory()`` for each attempt.

    ``factory`` defaults to the class itself (no argument). The job is built inside the
    attempt's execution scope, so a factory may read it.
    """
    declaration = background_declaration_of(job_class)
    build = factory or job_class

    def run(payload: Any, execution: BackgroundJobExecution) -> Any:
        return build().run(payload, execution)

    return BackgroundRegistration(
        name=declaration.name,
        options=declaration.options,
        run=run,
        is_async=inspect.iscoroutinefunction(job_class.run),
        payload_type=declaration.payload_type,
    )


@dataclass(frozen=True, slots=True)
class AttemptOutcome:
    """How an attempt ended, before the store is told (``conclude``)."""

    end: AttemptEnd
    error: BaseException | None
    started_at: datetime
    ended_at: datetime
    retryable: bool = True
    """False when running again cannot help (a payload that no longer validates)."""

    @classmethod
    def abandoned(
        cls, reason: BaseException, *, started_at: datetime, ended_at: datetime
    ) -> AttemptOutcome:
        """A driver stopped waiting for the job (timeout, stop, lease lost), for ``reason``."""
        return cls(end_of(None, reason), reason, started_at, ended_at)


@dataclass(frozen=True, slots=True)
class Conclusion:
    """What to record: the run, and the error ``on_run`` gets (see ``OnBackgroundRun``)."""

    run: BackgroundJobRun
    error: BaseException | None = field(default=None, compare=False)


async def run_claimed(
    claimed: ClaimedJob,
    registration: BackgroundRegistration,
    *,
    scope: ExecutionScope,
    clock: Clock,
    store: JobStore,
    controller: AbortController,
    call_sync: SyncCall = call_inline,
    timeout_errors: tuple[type[BaseException], ...] = (),
) -> AttemptOutcome:
    """Run the claimed attempt in its execution scope and return how it ended; never raises
    what the job raised (only ``BaseException``s that are not ``Exception``s go through)."""
    started_at = clock.now()
    prepared = _prepare(claimed, registration, store, controller, started_at)
    if isinstance(prepared, AttemptOutcome):
        return prepared
    payload, execution, context = prepared
    error: BaseException | None = None
    with scope.open(context):
        try:
            if registration.is_async:
                result = registration.run(payload, execution)
            else:
                result = await call_sync(lambda: registration.run(payload, execution))
            if inspect.isawaitable(result):
                await result
        except Exception as raised:
            error = _mapped(raised, registration.name, controller, timeout_errors)
    return _ended(error, controller, started_at, clock.now())


def run_claimed_sync(
    claimed: ClaimedJob,
    registration: BackgroundRegistration,
    *,
    scope: ExecutionScope,
    clock: Clock,
    store: JobStore,
    controller: AbortController,
    timeout_errors: tuple[type[BaseException], ...] = (),
) -> AttemptOutcome:
    """``run_claimed`` for a thread with no event loop (a Celery task): a sync job is called
    here, an async one runs on ``asyncio.run``. Not to be called from a running loop."""
    started_at = clock.now()
    prepared = _prepare(claimed, registration, store, controller, started_at)
    if isinstance(prepared, AttemptOutcome):
        return prepared
    payload, execution, context = prepared
    error: BaseException | None = None
    with scope.open(context):
        try:
            result = registration.run(payload, execution)
            if inspect.isawaitable(result):
                asyncio.run(_awaited(result))
        except Exception as raised:
            error = _mapped(raised, registration.name, controller, timeout_errors)
    return _ended(error, controller, started_at, clock.now())


def renew_lease(
    store: JobStore,
    lease: JobLease,
    *,
    now: datetime,
    lease_ms: int,
    controller: AbortController,
    job: str,
) -> JobLease | None:
    """Heartbeat ``lease``; None (``controller`` aborted with ``JobInterruptedError``) once lost.

    Other store errors propagate: the lease is still the job's until it expires.
    """
    try:
        return store.heartbeat(lease, now=now, lease_ms=lease_ms)
    except LostLeaseError:
        controller.abort(_interrupted(job, lease))
        return None


def conclude(
    store: JobStore,
    claimed: ClaimedJob,
    outcome: AttemptOutcome,
    *,
    options: BackgroundOptions,
    now: datetime,
    random: Callable[[], float],
) -> Conclusion:
    """Tell the store how the attempt ended and return what to record.

    ``succeeded`` completes the job; ``failed`` fails it with the retry instant of the rules
    (``retried``) or None (``dead``: attempts exhausted, or not retryable); ``released`` gives it
    back uncounted; ``interrupted`` changes nothing. A ``LostLeaseError`` from the store turns
    the attempt ``interrupted``; other store errors propagate.
    """
    job, lease = claimed.job, claimed.lease
    end, error, retry_at = outcome.end, outcome.error, None
    try:
        if end is AttemptEnd.SUCCEEDED:
            store.complete(lease, now=now)
        elif end is AttemptEnd.FAILED:
            assert error is not None, "a failed attempt has its error"
            if outcome.retryable:
                retry_at = after_failure(lease.attempt, job.max_attempts, now, options, random)
            store.fail(
                lease,
                now=now,
                error_code=error_code_of(error),
                error_type=type(error).__name__,
                retry_at=retry_at,
            )
        elif end is AttemptEnd.RELEASED:
            store.release(lease, now=now)
    except LostLeaseError:
        end, retry_at, error = AttemptEnd.INTERRUPTED, None, _interrupted(job.name, lease)
    status = run_status(end, retry_at)
    run = BackgroundJobRun(
        job=job.name,
        job_id=job.id,
        context=context_of(job.name),
        queue=job.queue,
        attempt=lease.attempt,
        status=status,
        scheduled_at=job.run_at,
        started_at=outcome.started_at,
        duration_ms=(outcome.ended_at - outcome.started_at) / timedelta(milliseconds=1),
        error_code=None if error is None else error_code_of(error),
        error_type=None if error is None else type(error).__name__,
        correlation_id=_correlation_id(claimed),
        tenant_id=job.tenant_id,
        retry_at=retry_at,
    )
    reported = error
    if error is not None and end is AttemptEnd.FAILED and retry_at is None and outcome.retryable:
        reported = AttemptsExhaustedError(
            f"the job is dead after {lease.attempt} attempt(s)", job=job.name
        )
        reported.__cause__ = error
    return Conclusion(run, reported)


def execution_context(
    claimed: ClaimedJob, started_at: datetime, options: BackgroundOptions
) -> ExecutionContext:
    """The scope of an attempt: origin background and the enqueuing work's actor, correlation
    id, tenant and traceparent; the deadline when the job has a timeout."""
    job = claimed.job
    by = job.enqueued_by
    deadline = None
    if options.timeout_ms is not None:
        deadline = started_at + timedelta(milliseconds=options.timeout_ms)
    return ExecutionContext(
        origin=BACKGROUND_ORIGIN,
        actor=_actor(by.actor, job.name),
        correlation_id=_correlation_id(claimed),
        scheduled_at=job.run_at,
        deadline=deadline,
        tenant_id=by.tenant_id,
        traceparent=by.traceparent,
    )


class _StoreReports:
    """``report_progress`` and ``save_checkpoint`` of an attempt, through its lease."""

    def __init__(self, store: JobStore, lease: JobLease, controller: AbortController, job: str):
        self._store = store
        self._lease = lease
        self._controller = controller
        self._job = job

    def report_progress(self, value: Any) -> None:
        self._write(value, what="progress")

    def save_checkpoint(self, value: Any) -> None:
        self._write(value, what="checkpoint")

    def _write(self, value: Any, *, what: str) -> None:
        problem = json_problem(value, what)
        if problem is not None:
            raise ValueError(f"job {self._job!r}: {problem} cannot be carried as JSON")
        try:
            if what == "progress":
                self._store.update(self._lease, progress=value, set_progress=True)
            else:
                self._store.update(self._lease, checkpoint=value, set_checkpoint=True)
        except LostLeaseError:
            interrupted = _interrupted(self._job, self._lease)
            self._controller.abort(interrupted)
            raise interrupted from None


def _prepare(
    claimed: ClaimedJob,
    registration: BackgroundRegistration,
    store: JobStore,
    controller: AbortController,
    started_at: datetime,
) -> tuple[Any, BackgroundJobExecution, ExecutionContext] | AttemptOutcome:
    job, lease = claimed.job, claimed.lease
    try:
        payload = from_stored(job.name, job.payload, registration.payload_type)
    except InvalidEnqueueError as error:
        stale = InvalidEnqueueError(  # anew, never raised: the error's context quotes the payload
            f"the payload stored for job {job.id!r} no longer validates: "
            + str(error).removeprefix(f"job {job.name!r}: "),
            job=job.name,
            field=error.field,
        )
        return AttemptOutcome(AttemptEnd.FAILED, stale, started_at, started_at, retryable=False)
    execution = BackgroundJobExecution(
        job_id=job.id,
        attempt=lease.attempt,
        signal=controller.signal,
        scheduled_at=job.run_at,
        enqueued_at=job.enqueued_at,
        started_at=started_at,
        tenant_id=job.tenant_id,
        checkpoint=job.checkpoint,
        reports=_StoreReports(store, lease, controller, job.name),
    )
    return payload, execution, execution_context(claimed, started_at, registration.options)


def _mapped(
    raised: Exception,
    job: str,
    controller: AbortController,
    timeout_errors: tuple[type[BaseException], ...],
) -> BaseException:
    if timeout_errors and isinstance(raised, timeout_errors):
        timeout = JobTimeoutError("the attempt outlived its time limit", job=job)
        timeout.__cause__ = raised
        controller.abort(timeout)
        return timeout
    return raised


def _ended(
    error: BaseException | None, controller: AbortController, started_at: datetime, now: datetime
) -> AttemptOutcome:
    reason = controller.signal.reason if controller.signal.aborted else None
    return AttemptOutcome(end_of(error, reason), reason or error, started_at, now)


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def lease_outlived(job: str, lease: JobLease, lease_ms: int) -> JobInterruptedError:
    """Why an attempt stops itself when no renewal reached the store for ``lease_ms``: its
    lease has run out, so the relay may hand the job to another worker at any moment."""
    return JobInterruptedError(
        f"attempt {lease.attempt} could not renew its lease within lease_ms={lease_ms} "
        "(the store could not be asked): another attempt may run it now",
        job=job,
    )


def _interrupted(job: str, lease: JobLease) -> JobInterruptedError:
    return JobInterruptedError(
        f"attempt {lease.attempt} lost its lease (cancelled, or claimed again)", job=job
    )


def _correlation_id(claimed: ClaimedJob) -> str:
    """The enqueuing work's correlation id; the job's id when it was enqueued outside any."""
    return claimed.job.enqueued_by.correlation_id or claimed.job.id


def _actor(text: str | None, job: str) -> Actor:
    """The enqueuing actor (``kind:id``); the job's system actor when there was none."""
    if text:
        kind, _, ident = text.partition(":")
        if kind and ident:
            return Actor(kind, ident)
    return system_actor(job)
