"""How an occurrence's outcome is recorded: one log entry, the metrics, the last runs, ``on_run``.

Every driver records through ``RunRecorder``, so the beat process, the worker and the in-process
scheduler write the same lines, the same series and the same shared record of each job's latest
occurrence.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ddd_celery.kernel.errors import DomainError
from ddd_celery.kernel.instants import iso_ms
from ddd_celery.kernel.metrics import Metrics, NoMetrics
from ddd_celery.kernel.reporting import ErrorReporter
from ddd_celery.scheduling.last_runs import JobLastRuns
from ddd_celery.scheduling.outcomes import JobRun, Outcome

RUNS_COUNTER = "scheduled_job_runs_total"
DURATION_HISTOGRAM = "scheduled_job_duration_ms"

LOG_LINES: dict[Outcome, tuple[str, int]] = {
    Outcome.SUCCEEDED: ("Scheduled job succeeded", logging.INFO),
    Outcome.FAILED: ("Scheduled job failed", logging.ERROR),
    Outcome.SKIPPED_OVERLAP: (
        "Scheduled job skipped: the previous run is still in progress",
        logging.WARNING,
    ),
    Outcome.SKIPPED_LOCKED: (
        "Scheduled job skipped: another instance runs this occurrence",
        logging.DEBUG,
    ),
    Outcome.MISSED: ("Scheduled job missed", logging.WARNING),
    Outcome.SKIPPED_PAUSED: ("Scheduled job skipped: paused by an operator", logging.INFO),
}
"""The message and level of each outcome, as the seeds write them."""

_STATUS = {outcome: outcome.value for outcome in Outcome}
"""Each outcome's string: an enum's ``.value`` is a property, paid per record of a burst."""

COULD_NOT_FOLLOW = "Scheduled job could not be followed"

DEFAULT_LOGGER = "ddd_celery.scheduling"


@dataclass(frozen=True, slots=True)
class RunDetail:
    """What ``on_run`` gets beside the record: the correlation id of the run."""

    correlation_id: str | None


OnRun = Callable[[JobRun, BaseException | None, RunDetail], None]
"""An observer of every occurrence handled, with what the job raised."""

FLUSH_AT = 1_000
"""Records a batch (``RunRecorder.batch``) holds before it writes them: one round trip each."""


@dataclass(slots=True)
class _Batch:
    """What a batch of this thread holds back: the records to keep, then the observers' calls."""

    keep: list[JobRun] = field(default_factory=list)
    observe: list[tuple[JobRun, BaseException | None]] = field(default_factory=list)


class RunRecorder:
    """Records each outcome: a log entry, the metrics, the last runs, the ``on_run`` observer.

    ``last_runs`` keeps every record but ``skipped-locked``: that occurrence is another
    instance's, which records its real outcome, and a skip must not hide it. The store is
    written before ``on_run`` is called, so an observer finds the record already kept.
    """

    def __init__(
        self,
        *,
        logger: logging.Logger | None = None,
        metrics: Metrics | None = None,
        on_run: OnRun | None = None,
        last_runs: JobLastRuns | None = None,
    ) -> None:
        self._logger = logger or logging.getLogger(DEFAULT_LOGGER)
        self._metrics = metrics or NoMetrics()
        self._counting = type(self._metrics) is not NoMetrics
        """Without metrics a record builds no labels: a burst's 100,000 records are beat's."""
        self._on_run = on_run
        self._last_runs = last_runs
        self._batches = threading.local()
        """This thread's ``_Batch`` while it is in ``batch``: beat's system jobs record on
        threads of their own, each record kept at once."""

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Keep the records of this thread together until the block ends (a ``FLUSH_AT`` at a
        time), then call ``on_run`` for each, in order, the store written first as ever.

        Inside, ``record`` returns None: what could not be kept is logged when written. A batch
        inside a batch joins it. The records are written however the block ends, a stop
        (``SystemExit``) included.
        """
        if getattr(self._batches, "current", None) is not None:
            yield
            return
        self._batches.current = _Batch()
        try:
            yield
        finally:
            batch, self._batches.current = self._batches.current, None
            self._flush(batch)

    def record(
        self,
        run: JobRun,
        error: BaseException | None = None,
        *,
        kept: bool = False,
        quiet: bool = False,
    ) -> BaseException | None:
        """Log, count, keep and observe ``run``; never raises, so it cannot stop a scheduler.

        Returns the error of the last runs that could not keep ``run`` (logged too), None when
        kept or not this call's to keep: an operator's ``run-now`` says its record was lost.

        ``kept``: the caller already wrote ``run`` to the last runs (a worker, with the end of
        its run in one round trip), so it is not written again. ``quiet``: a success or a miss
        is logged at DEBUG (a system job's tick, which logs what it did itself, and the gap its
        beat's restart left, which its next tick makes up for).
        """
        message, level = LOG_LINES[run.outcome]
        if quiet and run.outcome in (Outcome.SUCCEEDED, Outcome.MISSED):
            level = logging.DEBUG
        if self._logger.isEnabledFor(level):
            self._guarded(run.job, lambda: self._logger.log(level, message, extra=log_fields(run)))
        if self._counting:
            try:  # not _guarded: a burst's records pay for no closure each
                self._count(run)
            except Exception as failure:
                self._could_not_observe(run.job, failure)
        keep = not kept and _kept(run.outcome)
        batch: _Batch | None = getattr(self._batches, "current", None)
        if batch is not None:
            if keep and self._last_runs is not None:
                batch.keep.append(run)
            batch.observe.append((run, error))
            if len(batch.observe) >= FLUSH_AT:
                self._flush(batch)
            return None
        unkept = None
        if keep and self._last_runs is not None:
            unkept = self._keep(self._last_runs, run)
        self._observe(run, error)
        return unkept

    def heard(self, outcome: Outcome) -> bool:
        """Whether a record of ``outcome`` (as ``record`` without ``quiet``) reaches anyone: a
        logger enabled for its level, metrics, ``on_run``, or last runs that keep it.

        A beat that shares a burst with others loses most of it: 100,000 ``skipped-locked``
        records at DEBUG, never kept, which it need not build when nobody hears them.
        """
        return (
            self._counting
            or self._on_run is not None
            or (self._last_runs is not None and _kept(outcome))
            or self._logger.isEnabledFor(LOG_LINES[outcome][1])
        )

    def could_not_follow(self, job: str, error: BaseException, *, what: str) -> None:
        """Log what went wrong around the runs (a checkpoint, a lock release); the job goes on."""
        self._logger.error(
            COULD_NOT_FOLLOW,
            extra={
                "job": job,
                "context": job.split(".", 1)[0],
                "operation": what,
                "error_type": type(error).__name__,
            },
        )

    def _flush(self, batch: _Batch) -> None:
        """Keep the batch's records in one call, then observe each; a store that cannot be
        asked is logged for each record, as one by one. A record refused (``ValueError``: a
        naive instant) costs only itself: the batch is then written record by record."""
        keep, batch.keep = batch.keep, []
        observe, batch.observe = batch.observe, []
        if keep and self._last_runs is not None:
            try:
                self._last_runs.write_many(keep)
            except ValueError:
                for run in keep:
                    self._keep(self._last_runs, run)
            except Exception as error:
                for run in keep:
                    self.could_not_follow(run.job, error, what="write the last run")
        for run, raised in observe:
            self._observe(run, raised)

    def _observe(self, run: JobRun, error: BaseException | None) -> None:
        if self._on_run is not None:
            on_run = self._on_run
            self._guarded(run.job, lambda: on_run(run, error, RunDetail(run.correlation_id)))

    def _keep(self, last_runs: JobLastRuns, run: JobRun) -> Exception | None:
        """Write the last run; a store that cannot be asked is logged like a checkpoint's."""
        try:
            last_runs.write(run)
        except Exception as error:
            self.could_not_follow(run.job, error, what="write the last run")
            return error
        return None

    def _count(self, run: JobRun) -> None:
        labels = {
            "job": run.job,
            "context": run.context,
            "status": _STATUS[run.outcome],
            "error_code": run.error_code or "",
        }
        self._metrics.increment(RUNS_COUNTER, labels)
        if run.duration_ms is not None:
            self._metrics.observe(DURATION_HISTOGRAM, run.duration_ms, labels)

    def _guarded(self, job: str, action: Callable[[], None]) -> None:
        try:
            action()
        except Exception as error:
            self._could_not_observe(job, error)

    def _could_not_observe(self, job: str, error: Exception) -> None:
        """An observer's failure (a log handler, the metrics, ``on_run``) must not stop the
        scheduler: it is logged."""
        self._logger.exception(
            COULD_NOT_FOLLOW, extra={"job": job, "error_type": type(error).__name__}
        )


def _kept(outcome: Outcome) -> bool:
    """Whether the last runs keep a record of ``outcome``: all but ``skipped-locked``, another
    instance's occurrence, whose real outcome a skip must not hide."""
    return outcome is not Outcome.SKIPPED_LOCKED


def log_fields(run: JobRun) -> dict[str, Any]:
    """The structured fields of the log entry of ``run``; never the error's message."""
    fields: dict[str, Any] = {
        "job": run.job,
        "context": run.context,
        "outcome": run.outcome.value,
        "scheduled_at": iso_ms(run.scheduled_at),
    }
    optional = {
        "duration_ms": run.duration_ms,
        "correlation_id": run.correlation_id,
        "error_code": run.error_code,
        "error_type": run.error_type,
        "tenant_id": run.tenant_id,
    }
    fields.update({key: value for key, value in optional.items() if value is not None})
    return fields


def report_failed_runs(reporter: ErrorReporter) -> OnRun:
    """The observer that reports every failed run to ``reporter``, but a ``DomainError``."""

    def observe(run: JobRun, error: BaseException | None, detail: RunDetail) -> None:
        if run.outcome is not Outcome.FAILED or error is None or isinstance(error, DomainError):
            return
        reporter.report(
            error,
            {
                "job": run.job,
                "scheduled_at": iso_ms(run.scheduled_at),
                "correlation_id": detail.correlation_id,
                "error_code": run.error_code,
            },
        )

    return observe
