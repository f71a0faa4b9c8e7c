"""The jobs of a Celery app described as the ``JobScheduler`` port's ``describe()`` gives them.

Read from what ``install_jobs`` wired: the registry, the shared run state, the last runs. The
``celery jobs list`` command and the contract of the port read the same answers, so a screen
built on either shows what the drivers recorded, not a value computed again beside them.
"""

from __future__ import annotations

from datetime import datetime

from ddd_celery.celery.registry import CeleryJob, CeleryJobs
from ddd_celery.declarations.cron_evaluator import next_occurrence
from ddd_celery.declarations.schedule import CronRule, IntervalRule
from ddd_celery.scheduling.scheduler import JobDescription


def next_run_at(job: CeleryJob, now: datetime) -> datetime | None:
    """The job's next instant after ``now`` while beat schedules it; None for a disabled job."""
    return next_occurrence(job.schedule, now) if job.schedule.options.enabled else None


class NextRuns:
    """Each job's ``next_run_at`` after one ``now``, computed once per distinct schedule.

    The instant depends only on the rule and whether the job is enabled: ten thousand jobs on a
    few schedules cost a few cron evaluations.
    """

    def __init__(self, now: datetime) -> None:
        self._now = now
        self._found: dict[tuple[IntervalRule | CronRule, bool], datetime | None] = {}

    def of(self, job: CeleryJob) -> datetime | None:
        key = (job.schedule.rule, job.schedule.options.enabled)
        if key not in self._found:
            self._found[key] = next_run_at(job, self._now)
        return self._found[key]


def describe_jobs(registry: CeleryJobs, now: datetime) -> list[JobDescription]:
    """Each job: its schedule, whether a run is in progress (the run state), its next instant,
    and its latest outcome (the last runs; None without that store). Each store is read in
    batches (``read_many``), not once per job.

    Raises what a store raises when it cannot be asked; ``celery jobs list`` asks each store
    itself to say which one could not answer.
    """
    declared = [job.name for job in registry.jobs.values() if job.declared]
    running = registry.run_state.running_many(declared)
    last_runs = {} if registry.last_runs is None else registry.last_runs.read_many(registry.jobs)
    next_runs = NextRuns(now)
    return [
        JobDescription(
            name=job.name,
            schedule=job.schedule.description,
            enabled=job.schedule.options.enabled,
            running=running.get(job.name) is not None,
            next_run_at=next_runs.of(job),
            last_run=last_runs.get(job.name),
        )
        for job in registry.jobs.values()
    ]
