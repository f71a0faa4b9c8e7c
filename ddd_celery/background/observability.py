"""How each attempt of a background job is recorded: one log entry, the metrics, ``on_run``.

Both drivers (``QueueWorker`` and the Celery tasks) record through ``BackgroundRecorder``, so
they write the same lines and the same series. A log entry carries structured fields in
``extra`` and never an error's message: it quotes data.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ddd_celery.background.errors import AttemptsExhaustedError
from ddd_celery.background.rules import RunStatus
from ddd_celery.background.store import StoredJob
from ddd_celery.kernel.errors import DomainError
from ddd_celery.kernel.instants import iso_ms
from ddd_celery.kernel.metrics import Metrics, NoMetrics
from ddd_celery.kernel.reporting import ErrorReporter

BACKGROUND_RUNS_COUNTER = "background_job_runs_total"
BACKGROUND_DURATION_HISTOGRAM = "background_job_duration_ms"
DEFAULT_LOGGER = "ddd_celery.background"

LOG_LINES: dict[RunStatus, tuple[str, int]] = {
    RunStatus.SUCCEEDED: ("Background job succeeded", logging.INFO),
    RunStatus.RETRIED: ("Background job failed, retrying", logging.WARNING),
    RunStatus.DEAD: ("Background job dead", logging.ERROR),
    RunStatus.RELEASED: ("Background job released", logging.INFO),
    RunStatus.INTERRUPTED: ("Background job interrupted", logging.WARNING),
}
"""The message and level of each status of an attempt."""

COULD_NOT_FOLLOW = "Background job could not be followed"
LEASE_EXPIRED = "Background job handed back: its lease expired"


@dataclass(frozen=True, slots=True)
class BackgroundJobRun:
    """The record of one attempt, as logged, counted and passed to ``on_run``.

    ``scheduled_at`` is the instant the attempt was due (its ``run_at``). ``error_code`` and
    ``error_type`` are those of what the attempt raised (for ``dead``, of the last attempt);
    ``retry_at`` is when a ``retried`` job runs again.
    """

    job: str
    job_id: str
    context: str
    queue: str
    attempt: int
    status: RunStatus
    scheduled_at: datetime
    started_at: datetime
    duration_ms: float
    error_code: str | None = None
    error_type: str | None = None
    correlation_id: str | None = None
    tenant_id: str | None = None
    retry_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class BackgroundRunDetail:
    """What ``on_run`` gets beside the record and the error."""

    correlation_id: str | None
    tenant_id: str | None


OnBackgroundRun = Callable[[BackgroundJobRun, BaseException | None, BackgroundRunDetail], None]
"""An observer of every attempt, with what it raised (``AttemptsExhaustedError`` when dead
after its last attempt, whose ``__cause__`` is what that attempt raised)."""


class BackgroundRecorder:
    """Records each attempt: a log entry, the two metrics, the ``on_run`` observer."""

    def __init__(
        self,
        *,
        logger: logging.Logger | None = None,
        metrics: Metrics | None = None,
        on_run: OnBackgroundRun | None = None,
    ) -> None:
        self._logger = logger or logging.getLogger(DEFAULT_LOGGER)
        self._metrics = metrics or NoMetrics()
        self._on_run = on_run

    def record(self, run: BackgroundJobRun, error: BaseException | None = None) -> None:
        """Log, count and observe ``run``; never raises, so it cannot stop a worker."""
        message, level = LOG_LINES[run.status]
        if self._logger.isEnabledFor(level):
            self._guarded(run, lambda: self._logger.log(level, message, extra=log_fields(run)))
        self._guarded(run, lambda: self._count(run))
        if self._on_run is not None:
            on_run = self._on_run
            detail = BackgroundRunDetail(run.correlation_id, run.tenant_id)
            self._guarded(run, lambda: on_run(run, error, detail))

    def could_not_follow(self, job: str, job_id: str, error: BaseException, *, what: str) -> None:
        """Log what went wrong around an attempt (a heartbeat, a release); the worker goes on."""
        self._logger.error(
            COULD_NOT_FOLLOW,
            extra={
                "job": job,
                "job_id": job_id,
                "operation": what,
                "error_type": type(error).__name__,
            },
        )

    def _count(self, run: BackgroundJobRun) -> None:
        labels = {
            "job": run.job,
            "context": run.context,
            "status": run.status.value,
            "error_code": run.error_code or "",
        }
        self._metrics.increment(BACKGROUND_RUNS_COUNTER, labels)
        self._metrics.observe(BACKGROUND_DURATION_HISTOGRAM, run.duration_ms, labels)

    def _guarded(self, run: BackgroundJobRun, action: Callable[[], None]) -> None:
        try:
            action()
        except Exception as error:  # an observer's failure must not stop the worker
            self._logger.exception(
                COULD_NOT_FOLLOW,
                extra={"job": run.job, "job_id": run.job_id, "error_type": type(error).__name__},
            )


def log_fields(run: BackgroundJobRun) -> dict[str, Any]:
    """The structured fields of the log entry of ``run``; never the error's message."""
    fields: dict[str, Any] = {
        "job": run.job,
        "job_id": run.job_id,
        "context": run.context,
        "queue": run.queue,
        "attempt": run.attempt,
        "status": run.status.value,
        "scheduled_at": iso_ms(run.scheduled_at),
        "duration_ms": run.duration_ms,
    }
    optional = {
        "error_code": run.error_code,
        "error_type": run.error_type,
        "correlation_id": run.correlation_id,
        "tenant_id": run.tenant_id,
        "retry_at": None if run.retry_at is None else iso_ms(run.retry_at),
    }
    fields.update({key: value for key, value in optional.items() if value is not None})
    return fields


def log_lease_expired(logger: logging.Logger, job: StoredJob) -> None:
    """Log a job whose worker was lost, as ``expire_leases`` handed it back (to run or dead).

    The polling worker and the relay both sweep leases: they say it in the same words.
    """
    logger.warning(
        LEASE_EXPIRED,
        extra={
            "job": job.name,
            "job_id": job.id,
            "attempt": job.attempts,
            "status": job.status.value,
            "error_code": job.last_error_code,
        },
    )


def report_failed_background_jobs(reporter: ErrorReporter) -> OnBackgroundRun:
    """The observer that sends each attempt that failed unexpectedly to ``reporter``.

    An attempt ``retried`` or ``dead`` is reported unless what it raised is a ``DomainError``
    (a refusal of the model, expected); released and interrupted attempts are not failures.
    """

    def observe(
        run: BackgroundJobRun, error: BaseException | None, detail: BackgroundRunDetail
    ) -> None:
        if run.status not in (RunStatus.RETRIED, RunStatus.DEAD) or error is None:
            return
        cause = error.__cause__ if isinstance(error, AttemptsExhaustedError) else error
        if isinstance(cause, DomainError):
            return
        reporter.report(
            error,
            {
                "job": run.job,
                "job_id": run.job_id,
                "attempt": run.attempt,
                "status": run.status.value,
                "correlation_id": detail.correlation_id,
                "tenant_id": detail.tenant_id,
                "error_code": run.error_code,
            },
        )

    return observe
