"""``run_now``: a scheduled job run once in this process, as a worker would run it.

For a test, a script or ``celery jobs run-now``: the run takes no lock, leaves the run state
alone and is recorded like any run (``OccurrenceRun``, the worker's own run of an occurrence).
"""

from __future__ import annotations

from typing import Any

from ddd_celery.celery.registry import CeleryJobs, jobs_of
from ddd_celery.celery.tasks import OccurrenceRun
from ddd_celery.scheduling.outcomes import JobRun


def run_now(target: Any, name: str) -> JobRun:
    """Run the job ``name`` once in this process, as a worker would, and raise what it raised.

    ``target`` is the Celery app or its ``CeleryJobs``. The run gets the scope of a scheduled
    one (origin ``schedule``, the job's system actor, a fresh correlation id, ``scheduled_at``
    the instant it was asked), takes no lock, leaves the run state alone, and is recorded like
    any run. It works on a disabled job and in a process where ``RUN_JOBS`` is false. Raises
    ``UnknownJobError`` for a name no job has, ``TypeError`` for a ``beat_schedule`` entry
    (its own task runs it) and for a system job (beat runs it), ``JobTimeoutError`` for a run
    that outlived ``timeout_ms``; returns the record of a run that succeeded. Call it from
    synchronous code (an async caller uses ``asyncio.to_thread``): it runs its own event loop
    for an async job.
    """
    record, error = run_here(target, name)
    if error is not None:
        raise error
    return record


def run_here(target: Any, name: str) -> tuple[JobRun, BaseException | None]:
    """``run_now`` that returns the record and the error instead of raising what the job raised.

    For a caller that reports the run itself, such as ``celery jobs run-now``.
    """
    registry = target if isinstance(target, CeleryJobs) else jobs_of(target)
    job = registry.job(name)
    if job.inline is not None:
        raise TypeError(
            f"{name} is a system job that runs inside beat, under beat's lock (the relay of "
            "background jobs runs there every second): it has no task, and run_now does not "
            "run it; a running beat is what runs it"
        )
    if not job.declared:
        raise TypeError(
            f"{name} is a beat_schedule entry: its task {job.task_name!r} runs it "
            "(celery call), not run_now"
        )
    run = OccurrenceRun(
        registry,
        job,
        scheduled_at=registry.clock.now(),
        correlation_id=registry.ids.next_id(),
        tenant_id=None,
        app=None,
    )
    return run.execute()
