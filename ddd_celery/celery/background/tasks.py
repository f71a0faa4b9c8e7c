"""The worker side of background jobs: the Celery task of each job, woken by a job id.

The task reads the job id, claims the job in the store and runs one attempt through the shared
attempt API (``ddd_celery.background.attempt``), as ``QueueWorker`` does: the same scope, the
same payload validation, the same conclusion and the same record. Around the attempt, the
process's ``Heartbeats`` extend the lease (and abort the signal once it is lost: a cancel), and
the job's ``timeout_ms`` is enforced twice, as for scheduled jobs: Celery's soft time limit on
prefork, a watchdog that aborts the signal on every pool.

Delivery is at least once and a claim makes it at most one attempt at a time: the task is
acknowledged late and rejected when its worker is lost, so a message whose worker was killed
comes back; its claim then fails while the dead attempt's lease lasts, and the relay hands the
job back once it expires. A message that does nothing (the job is cancelled, done, running
elsewhere, not due yet) is logged and acknowledged. A message that cannot be read, or names a
job the store does not have, is recorded as a refusal and acknowledged: it never reaches
Celery's retries, and the worker goes on.

A failed attempt ends the task in ``FAILURE`` once it is recorded, so Celery's events and
monitors see it; the store's backoff and the relay are its retry, never Celery's.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded

from ddd_celery.background.attempt import (
    AttemptOutcome,
    conclude,
    run_claimed_sync,
)
from ddd_celery.background.errors import AttemptsExhaustedError, UnknownBackgroundJobError
from ddd_celery.background.observability import BackgroundJobRun
from ddd_celery.background.rules import RunStatus
from ddd_celery.background.store import ClaimedJob, JobStatus
from ddd_celery.celery.background.message import read_job_id
from ddd_celery.celery.background.registry import BackgroundJobs, background_jobs_of
from ddd_celery.celery.message import UnreadableMessageError
from ddd_celery.celery.tasks import time_limits
from ddd_celery.declarations.background import BackgroundJobDeclaration
from ddd_celery.kernel.abort import AbortController
from ddd_celery.kernel.instants import iso_ms
from ddd_celery.scheduling.errors import UNEXPECTED_ERROR, JobTimeoutError, SchedulingError


class AttemptFailedError(SchedulingError):
    """What the task raises after recording a failed attempt that will be retried.

    Its message names the job, the attempt and the code and type of what the job raised, never
    that error's message (it may quote data); ``code`` is that error's code.
    """

    def __init__(
        self, message: str, *, job: str | None = None, code: str = UNEXPECTED_ERROR
    ) -> None:
        super().__init__(message, job=job)
        self.code = code


def register_background_task(app: Any, declaration: BackgroundJobDeclaration) -> None:
    """Register the Celery task that runs ``declaration``'s attempts, named after the job.

    Acknowledged late and rejected when the worker is lost (at least once), JSON only, no result
    kept: attempts go to the store, the logs, the metrics and ``on_run``.
    """

    def run_background_job(task: Any, *args: Any, **kwargs: Any) -> None:
        run_message(task.app, declaration.name, args, kwargs)

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
        **time_limits(declaration.options.timeout_ms),
    )


def run_message(app: Any, name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
    """Run the attempt a task message wakes, if the job can be claimed.

    Raises only after recording a failed attempt (``AttemptFailedError``, or
    ``AttemptsExhaustedError`` once the job is dead), so the task ends in ``FAILURE``.
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
    claimed = registry.store.claim_job(
        job_id, now=registry.clock.now(), lease_ms=registry.worker.lease_ms
    )
    if claimed is None:
        _explain_no_claim(registry, name, job_id)
        return
    if claimed.job.name != name:
        registry.store.release(claimed.lease, now=registry.clock.now())
        registry.recorder.could_not_follow(
            name,
            job_id,
            UnknownBackgroundJobError(f"job {job_id!r} is a {claimed.job.name}", job=name),
            what=f"run the job: the message's task is {name}, the job's {claimed.job.name}",
        )
        return
    Attempt(registry, declaration, claimed).run()


class Attempt:
    """One claimed attempt run in this task's thread, its lease kept and its timeout watched."""

    def __init__(
        self, registry: BackgroundJobs, declaration: BackgroundJobDeclaration, claimed: ClaimedJob
    ) -> None:
        self._registry = registry
        self._declaration = declaration
        self._claimed = claimed
        self._controller = AbortController()

    def run(self) -> None:
        registry, claimed = self._registry, self._claimed
        with registry.heartbeats.keep(
            claimed.lease, job=claimed.job.name, controller=self._controller
        ) as kept:
            outcome = self._attempt()
        if kept.lease is not claimed.lease:  # extended by a beat: the conclusion names the latest
            claimed = ClaimedJob(claimed.job, kept.lease)
        conclusion = conclude(
            registry.store,
            claimed,
            outcome,
            options=self._declaration.options,
            now=registry.clock.now(),
            random=random.random,
        )
        registry.recorder.record(conclusion.run, conclusion.error)
        run = conclusion.run
        if run.status is RunStatus.DEAD or run.status is RunStatus.RETRIED:
            _raise_failed(run, claimed.job.max_attempts)

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


def _raise_failed(run: BackgroundJobRun, max_attempts: int) -> None:
    """End the task in ``FAILURE`` for a failed attempt, once it is recorded."""
    failure = f"{run.error_code} ({run.error_type})"
    where = f"{run.job} {run.job_id} attempt {run.attempt}/{max_attempts}"
    if run.status is RunStatus.DEAD:
        raise AttemptsExhaustedError(f"{where} failed with {failure}: dead", job=run.job)
    retry = "" if run.retry_at is None else f", retried at {iso_ms(run.retry_at)}"
    raise AttemptFailedError(
        f"{where} failed with {failure}{retry}",
        job=run.job,
        code=run.error_code or UNEXPECTED_ERROR,
    )


def _explain_no_claim(registry: BackgroundJobs, name: str, job_id: str) -> None:
    """Say why a message does nothing; a job id the store does not know is a refusal."""
    job = registry.store.find(job_id, tenant_id=None)
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
