"""Ending a run in the run state, and sending on the occurrence queued behind it.

With ``overlap: 'queue'``, an occurrence due while its job runs waits in the run state; the end
of the run promotes it. Beat cannot know when a run ends, so the worker that ends it (or that
drops an occurrence unrun: ``on_task_revoked``) sends the promoted occurrence itself. One that
cannot be sent is recorded ``failed`` and ended in turn, so it does not hold the job busy.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ddd_celery.celery.message import OccurrenceMessage
from ddd_celery.celery.registry import CeleryJob, CeleryJobs
from ddd_celery.celery.tracing import send_span
from ddd_celery.scheduling.execution import not_run
from ddd_celery.scheduling.occurrence import run_ttl_ms
from ddd_celery.scheduling.occurrence_store import RunEnd
from ddd_celery.scheduling.outcomes import JobRun, Outcome


def send_occurrence(app: Any, registry: CeleryJobs, job: CeleryJob, scheduled_at: datetime) -> None:
    """Send the task of one occurrence, with a fresh correlation id.

    It expires when its run would stop counting as in progress: run later than that, it could
    overlap the next one.
    """
    message = OccurrenceMessage(scheduled_at, registry.ids.next_id())
    with send_span(job.name, scheduled_at, message.correlation_id) as headers:
        app.send_task(
            job.task_name,
            kwargs=message.to_kwargs(),
            queue=job.queue,
            expires=run_ttl_ms(job.schedule.options, registry.rules) / 1000,
            serializer="json",
            headers=headers,
        )


def end_run(app: Any, registry: CeleryJobs, job: CeleryJob, scheduled_at: datetime) -> None:
    """End the run of ``scheduled_at`` in the run state; send on the occurrence queued behind.

    Beat cannot know when a run ends, so the worker sends the queued occurrence itself. One that
    cannot be sent is recorded ``failed`` and ended in turn, so it does not hold the job busy.
    """
    ended = registry.occurrences().end(
        job.name,
        scheduled_at,
        ttl_ms=run_ttl_ms(job.schedule.options, registry.rules),
        last_run=None,
    )
    _send_on(app, registry, job, ended)


def conclude_run(
    app: Any, registry: CeleryJobs, job: CeleryJob, record: JobRun, error: BaseException | None
) -> None:
    """Keep the run's record and end it in one round trip, record its outcome, send on.

    The last run is written with the end of the run (``OccurrenceStore.end``), before the log
    line, the metrics and ``on_run``, so an observer finds the record already kept, as
    ``RunRecorder`` promises.
    """
    ended = registry.occurrences().end(
        job.name,
        record.scheduled_at,
        ttl_ms=run_ttl_ms(job.schedule.options, registry.rules),
        last_run=record,
    )
    if ended.last_run_error is not None:
        registry.recorder.could_not_follow(
            job.name, ended.last_run_error, what="write the last run"
        )
    registry.recorder.record(record, error, kept=True)
    _send_on(app, registry, job, ended)


def _send_on(app: Any, registry: CeleryJobs, job: CeleryJob, ended: RunEnd) -> None:
    """Send the occurrence promoted behind an ended run; one that cannot be sent is ended too."""
    ttl_ms = run_ttl_ms(job.schedule.options, registry.rules)
    while True:
        if ended.finish_error is not None:
            registry.recorder.could_not_follow(job.name, ended.finish_error, what="finish the run")
            return
        promoted = ended.promoted
        if promoted is None:
            return
        try:
            send_occurrence(app, registry, job, promoted)
            return
        except Exception as error:
            registry.recorder.record(
                not_run(job.name, promoted, Outcome.FAILED, error=error), error
            )
        ended = registry.occurrences().end(job.name, promoted, ttl_ms=ttl_ms, last_run=None)
