"""The worker side of background jobs: the Celery task of each job, woken by a job id.

The task reads the job id, claims the job in the store and runs one attempt through the shared
attempt API (``ddd_celery.background.attempt``), as ``QueueWorker`` does: the same scope, the
same payload validation, the same conclusion and the same record. Around the attempt, the
process's ``Heartbeats`` extend the lease (and abort the signal once it is lost: a cancel), and
the job's ``timeout_ms`` is enforced twice, as for scheduled jobs: Celery's soft time limit on
prefork, a watchdog that aborts the signal on every pool. A worker that stops gives the attempt
its grace, as it gives a scheduled run (``celery/shutdown.py``): a job that returns within
``ddd_celery_grace_ms`` is completed, and only then is its signal aborted with a
``JobAbortedError``, which gives the job back uncounted (``released``).

Delivery is at least once and a claim makes it at most one attempt at a time: the task is
acknowledged late and rejected when its worker is lost, so a message whose worker was killed
comes back; its claim then fails while the dead attempt's lease lasts, and the relay hands the
job back once it expires. A message that does nothing (the job is cancelled, done, running
elsewhere, not due yet) is logged and acknowledged. A message that cannot be read, or names a
job the store does not have, is recorded as a refusal and acknowledged: it never reaches
Celery's retries, and the worker goes on.

Every call may lose its reply (a timeout after the store did the work), so each delivery names
its attempt with a token of its own, and a claim or a conclusion the store could not answer is
sent again, a few times over a few seconds (``STORE_RETRY_PAUSES_S``), with the same token or
lease: the store answers a repeat as it did the first (the same lease, no change). A store that
still cannot be asked fails the task: a claim never made leaves the job queued for the relay;
a claim made whose answer never came leaves it running until its lease expires. A wake-up that
comes a little before its job is due (two processes' measures of the store's clock disagree by
a few milliseconds) waits for it, up to ``EARLY_WAKEUP_S``, and claims again.

A failed attempt ends the task once it is recorded, as Celery's own retries end one: an attempt
that will be retried raises ``AttemptFailedError``, a ``celery.exceptions.Retry`` (state
``RETRY``, ``task_retry``, Celery's INFO "retry" line) that sends no message, since the store's
backoff and the relay are the retry; only the attempt that leaves the job dead is a ``FAILURE``
(``AttemptsExhaustedError``, Celery's ERROR "raised unexpected" and ``task_failure``). Either
carries the job's own frames. Celery is given the job's error, message included, as the cause
of either, unless ``ddd_celery_traceback_messages`` is false: then it gets the frames alone and
only the error's code and type, as the records and the log fields always do. The task's
``request.retries`` is the attempt's number less one, and each wake-up's ``root_id`` is the job
id, so Celery's tools link the attempts of one job.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, TypeVar

from celery.exceptions import Retry, SoftTimeLimitExceeded

from ddd_celery.background.attempt import (
    AttemptOutcome,
    conclude,
    run_claimed_sync,
)
from ddd_celery.background.errors import AttemptsExhaustedError, UnknownBackgroundJobError
from ddd_celery.background.observability import BackgroundJobRun
from ddd_celery.background.rules import RunStatus
from ddd_celery.background.store import CLAIMABLE, ClaimedJob, JobStatus, StoredJob
from ddd_celery.celery.background.message import GUARDED_STRATEGY, read_job_id
from ddd_celery.celery.background.registry import BackgroundJobs, background_jobs_of
from ddd_celery.celery.config import app_config
from ddd_celery.celery.logs import render_fields_in_celery_logs
from ddd_celery.celery.message import UnreadableMessageError
from ddd_celery.celery.shutdown import RUNS
from ddd_celery.celery.tasks import time_limits
from ddd_celery.declarations.background import BackgroundJobDeclaration
from ddd_celery.kernel.abort import AbortController
from ddd_celery.kernel.errors import UNEXPECTED_ERROR, JobAbortedError, JobError, JobTimeoutError
from ddd_celery.kernel.instants import iso_ms

STORE_RETRY_PAUSES_S = (0.1, 0.4, 1.0, 2.0)
"""The pauses before each new try of a claim or a conclusion the store could not answer: about
3.5 s of an outage (a failover, a reply later than the client's timeout) costs nothing."""
EARLY_WAKEUP_S = 1.0
"""How early a wake-up may come and still wait for its job: more than two measures of the
store's clock disagree by, far less than a relay's redispatch."""

_T = TypeVar("_T")


class AttemptFailedError(JobError, Retry):  # type: ignore[misc]
    """What the task raises after recording a failed attempt that will be retried: Celery's
    ``Retry``, so the task ends in ``RETRY``, and no message is sent (the relay publishes the
    job at ``retry_at``, Celery's ``when``).

    Its message names the job, the attempt and the code and type of what the job raised, never
    that error's message (it may quote data); ``code`` is that error's code. ``exc`` is the job's
    error, or None when Celery is not given error messages (``ddd_celery_traceback_messages``).
    """

    def __init__(
        self,
        message: str,
        exc: BaseException | None = None,
        when: datetime | None = None,
        *,
        job: str | None = None,
        code: str = UNEXPECTED_ERROR,
    ) -> None:
        Retry.__init__(self, message, exc=exc, when=when)
        self.job = job
        self.code = code

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled with its job and code (a prefork child hands it to its parent)."""
        return type(self), (self.message, self.exc, self.when), {"job": self.job, "code": self.code}


def register_background_task(app: Any, declaration: BackgroundJobDeclaration) -> None:
    """Register the Celery task that runs ``declaration``'s attempts, named after the job.

    Acknowledged late and rejected when the worker is lost (at least once), JSON only, no result
    kept: attempts go to the store, the logs, the metrics and ``on_run``. Its ``Strategy``
    drops a message Celery itself would crash on (``guarded_strategy``). The worker's log lines
    show the library's fields (``correlation_id=``...) as they do for scheduled jobs, in an app
    with background jobs only too.
    """
    render_fields_in_celery_logs()

    def run_background_job(task: Any, *args: Any, **kwargs: Any) -> None:
        run_message(task.app, declaration.name, args, kwargs, request=task.request)

    run_background_job.__doc__ = f"Run one attempt of the background job {declaration.name}."
    app.task(
        run_background_job,
        name=declaration.name,
        bind=True,
        shared=False,
        acks_late=True,
        reject_on_worker_lost=True,
        ignore_result=True,
        serializer="json",
        Strategy=GUARDED_STRATEGY,
        **time_limits(declaration.options.timeout_ms),
    )


def run_message(
    app: Any,
    name: str,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    *,
    request: Any = None,
) -> None:
    """Run the attempt a task message wakes, if the job can be claimed.

    ``request`` is the task's (Celery's ``Context``): its ``hostname`` names the worker in the
    claim, and its ``retries`` is set to the attempt's number less one. Raises only after
    recording a failed attempt: ``AttemptFailedError`` (``RETRY``) when it will be retried,
    ``AttemptsExhaustedError`` (``FAILURE``) once the job is dead.
    """
    registry = background_jobs_of(app)
    try:
        job_id = read_job_id(args, kwargs)
    except UnreadableMessageError as refused:
        registry.recorder.could_not_follow(
            name, "", refused, what=f"read the task message: {refused}"
        )
        return
    declaration = registry.jobs[name]
    token = uuid.uuid4().hex  # this delivery's attempt, whatever the store is asked again
    worker = getattr(request, "hostname", None)
    claimed, claimed_at = _claim(registry, job_id, token, worker)
    if claimed is None:
        job = registry.store.find(job_id, tenant_id=None)
        early_s = _early_s(job, registry.clock.now())
        if early_s is not None:
            time.sleep(early_s)
            claimed, claimed_at = _claim(registry, job_id, token, worker)
            if claimed is None:
                job = registry.store.find(job_id, tenant_id=None)
    if claimed is None:
        _explain_no_claim(registry, name, job_id, job)
        return
    if claimed.job.name != name:
        lease = claimed.lease
        _asking(lambda: registry.store.release(lease, now=registry.clock.now()))
        registry.recorder.could_not_follow(
            name,
            job_id,
            UnknownBackgroundJobError(f"job {job_id!r} is a {claimed.job.name}", job=name),
            what=f"run the job: the message's task is {name}, the job's {claimed.job.name}",
        )
        return
    if request is not None:
        request.retries = claimed.lease.attempt - 1
    Attempt(registry, declaration, claimed, claimed_at).run()


def _claim(
    registry: BackgroundJobs, job_id: str, token: str, worker: str | None
) -> tuple[ClaimedJob | None, float]:
    """Claim under ``token`` for ``worker``, asked again while the store cannot answer; what it
    answered and when the claim that answered was sent (``time.monotonic``), where its lease
    starts."""
    sent = time.monotonic()

    def claim() -> ClaimedJob | None:
        nonlocal sent
        sent = time.monotonic()
        return registry.store.claim_job(
            job_id,
            now=registry.clock.now(),
            lease_ms=registry.worker.lease_ms,
            token=token,
            worker=worker,
        )

    claimed = _asking(claim)
    return claimed, sent


def _asking(call: Callable[[], _T]) -> _T:
    """``call()``, tried again after each of ``STORE_RETRY_PAUSES_S`` while it raises a
    ``ConnectionError`` (the store could not be asked); the last one's error propagates."""
    for pause in STORE_RETRY_PAUSES_S:
        try:
            return call()
        except ConnectionError:
            time.sleep(pause)
    return call()


def _early_s(job: StoredJob | None, now: datetime) -> float | None:
    """How long to wait before claiming again a claimable job due within ``EARLY_WAKEUP_S``
    (0 for one due already: it came due between the claim and this read); None otherwise."""
    if job is None or job.status not in CLAIMABLE:
        return None
    early = (job.run_at - now) / timedelta(seconds=1)
    return max(early, 0.0) if early <= EARLY_WAKEUP_S else None


class Attempt:
    """One claimed attempt run in this task's thread, its lease kept and its timeout watched."""

    def __init__(
        self,
        registry: BackgroundJobs,
        declaration: BackgroundJobDeclaration,
        claimed: ClaimedJob,
        claimed_at: float,
    ) -> None:
        self._registry = registry
        self._declaration = declaration
        self._claimed = claimed
        self._claimed_at = claimed_at
        self._controller = AbortController()

    def run(self) -> None:
        registry, claimed = self._registry, self._claimed
        with registry.heartbeats.keep(
            claimed.lease,
            job=claimed.job.name,
            controller=self._controller,
            claimed_at=self._claimed_at,
        ) as kept:
            RUNS.add(self)  # a worker that stops gives it grace_ms, then aborts it
            try:
                outcome = self._attempt()
            finally:
                RUNS.discard(self)
        if kept.lease is not claimed.lease:  # extended by a beat: the conclusion names the latest
            claimed = ClaimedJob(claimed.job, kept.lease)
        # asked again with the same lease, instant and draw: a repeat answers as the first did
        now, draw = registry.clock.now(), random.random()
        try:
            conclusion = _asking(
                lambda: conclude(
                    registry.store,
                    claimed,
                    outcome,
                    options=self._declaration.options,
                    now=now,
                    random=lambda: draw,
                )
            )
        except ConnectionError as error:  # the lease expires; the relay hands the job back
            registry.recorder.could_not_follow(
                claimed.job.name, claimed.job.id, error, what="conclude the attempt"
            )
            raise
        registry.recorder.record(conclusion.run, conclusion.error)
        run, raised = conclusion.run, outcome.error
        if (run.status is RunStatus.DEAD or run.status is RunStatus.RETRIED) and raised is not None:
            messages = app_config(registry.app).traceback_messages
            _raise_failed(run, claimed.job.max_attempts, raised, messages=messages)

    @property
    def grace_ms(self) -> int:
        """How long the attempt may go on once its worker stops (``ddd_celery_grace_ms``)."""
        return app_config(self._registry.app).grace_ms

    def abort_for_stop(self) -> None:
        """The worker stopped and the grace passed: abort the signal, so the attempt ends
        ``released`` (its job given back uncounted) once the job returns."""
        self._controller.abort(
            JobAbortedError(
                f"the worker stopped and the attempt outlived grace_ms={self.grace_ms}",
                job=self._declaration.name,
            )
        )

    def _attempt(self) -> AttemptOutcome:
        """Run the job; the watchdog aborts its signal at ``timeout_ms`` on pools without limits.

        A soft time limit raised outside the job (between two steps of the attempt) is the
        attempt's timeout too.
        """
        registry, declaration = self._registry, self._declaration
        started_at = registry.clock.now()
        watchdog = self._watchdog()
        try:
            return run_claimed_sync(
                self._claimed,
                registry.registration(declaration.name),
                scope=registry.scope,
                clock=registry.clock,
                store=registry.store,
                controller=self._controller,
                timeout_errors=(SoftTimeLimitExceeded,),
            )
        except SoftTimeLimitExceeded as exceeded:
            timeout = self._timed_out()
            timeout.__cause__ = exceeded
            return AttemptOutcome.abandoned(
                timeout, started_at=started_at, ended_at=registry.clock.now()
            )
        finally:
            if watchdog is not None:
                watchdog.cancel()

    def _watchdog(self) -> threading.Timer | None:
        timeout_ms = self._declaration.options.timeout_ms
        if timeout_ms is None:
            return None
        timer = threading.Timer(timeout_ms / 1000, self._timed_out)
        timer.daemon = True
        timer.start()
        return timer

    def _timed_out(self) -> BaseException:
        """Abort the signal with a ``JobTimeoutError`` (the first reason wins) and return it."""
        timeout = JobTimeoutError(
            f"the attempt outlived timeout_ms={self._declaration.options.timeout_ms}",
            job=self._declaration.name,
        )
        self._controller.abort(timeout)
        return self._controller.signal.reason or timeout


def _raise_failed(
    run: BackgroundJobRun, max_attempts: int, error: BaseException, *, messages: bool
) -> None:
    """End the task of a failed attempt, once it is recorded: ``RETRY`` when it is retried,
    ``FAILURE`` once the job is dead; the traceback holds the frames of ``error``.

    With ``messages``, chained to ``error``, whose message Celery then prints; otherwise only
    its frames are carried over, and Celery sees its code and type alone.
    """
    failure = f"{run.error_code} ({run.error_type})"
    where = f"{run.job} {run.job_id} attempt {run.attempt}/{max_attempts}"
    raised: JobError
    if run.status is RunStatus.DEAD:
        raised = AttemptsExhaustedError(f"{where} failed with {failure}: dead", job=run.job)
    else:
        retry = "" if run.retry_at is None else f", retried at {iso_ms(run.retry_at)}"
        raised = AttemptFailedError(
            f"{where} failed with {failure}{retry}",
            error if messages else None,
            run.retry_at,
            job=run.job,
            code=run.error_code or UNEXPECTED_ERROR,
        )
    if messages:
        raise raised from error
    raise raised.with_traceback(_frames_of(error)) from None


def _frames_of(error: BaseException) -> TracebackType | None:
    """The traceback of ``error``, or of the first of its causes that has one (a timeout made
    by the worker has none, the job's ``SoftTimeLimitExceeded`` it stands for has the frames)."""
    cause: BaseException | None = error
    while cause is not None and cause.__traceback__ is None:
        cause = cause.__cause__
    return None if cause is None else cause.__traceback__


def _explain_no_claim(
    registry: BackgroundJobs, name: str, job_id: str, job: StoredJob | None
) -> None:
    """Say why a message does nothing; a job id the store does not know is a refusal."""
    if job is None:
        registry.recorder.could_not_follow(
            name,
            job_id,
            UnknownBackgroundJobError(f"no background job has the id {job_id!r}", job=name),
            what="claim the job: the store has no job with this id",
        )
        return
    if job.status.finished:
        why = f"it is {job.status.value}"
    elif job.status is JobStatus.RUNNING:
        why = "another attempt holds its lease"
    else:
        why = f"it is {job.status.value}, due at {iso_ms(job.run_at)}"
    registry.logger.info(
        "Background job message ignored: %s",
        why,
        extra={"job": name, "job_id": job_id, "status": job.status.value},
    )
