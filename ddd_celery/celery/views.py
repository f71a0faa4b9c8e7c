"""What the operator's faces show of the scheduled jobs, read once from the shared stores.

``celery jobs list`` and the web page (``ddd_celery.web``) show the same things of a job: the
run in progress (the run state), the last occurrence handled (the checkpoints, or the last run
when later), the last outcome (the last runs) and the pause an operator set (the pauses). Each
store is asked once for all the jobs shown (``running_many``, ``read_many``, ``paused``), never
once per job, and a store that cannot be asked makes its answers a word (``UNAVAILABLE``)
instead of stopping the rest. ``JobsKnown`` holds what they answered; its methods say, job by
job, what a face shows.

The rules of pausing are here too (``pausable``, ``shared_pauses``): the CLI and the page
refuse the same jobs, in the same words.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Literal, TypeVar

from ddd_celery.celery.pauses import paused_jobs
from ddd_celery.celery.registry import CeleryJob, CeleryJobs
from ddd_celery.declarations.cron_evaluator import next_occurrence
from ddd_celery.declarations.schedule import CronRule
from ddd_celery.kernel.errors import DddCeleryError
from ddd_celery.scheduling.errors import UnknownJobError
from ddd_celery.scheduling.outcomes import JobRun
from ddd_celery.scheduling.pauses import InMemoryJobPauses, JobPauses, Pause
from ddd_celery.scheduling.run_state import InMemoryJobRunState

UNKNOWN = "unknown"
"""The store that would tell is not kept (in process memory, or not installed)."""
UNAVAILABLE = "unavailable"
"""The store could not be asked."""
UNTRACKED = "untracked"
"""A ``beat_schedule`` entry: its task is the app's own, which reports neither its end nor its
outcome."""
RUN_STATE, CHECKPOINTS, LAST_RUNS, PAUSES = "run state", "checkpoints", "last runs", "pauses"
_TICK = timedelta(microseconds=1)

_T = TypeVar("_T")


class NotPausableError(DddCeleryError, ValueError):
    """A job no pause is kept for: the library's own system job, or pauses that no beat would
    read (kept in this process's memory)."""


@dataclass
class JobsKnown:
    """What the shared stores answered for a set of jobs, each store asked once.

    A mapping is None when its store could not be asked (``unavailable`` says why), empty when
    it was not asked (not kept, or no job of the set is one it knows of).
    """

    registry: CeleryJobs
    in_progress: Mapping[str, datetime | None] | None
    checkpointed: Mapping[str, datetime | None] | None
    outcomes: Mapping[str, JobRun | None] | None
    pauses: Mapping[str, Pause] | None
    unavailable: dict[str, tuple[str, BaseException]] = field(default_factory=dict)
    """``{store: (its adapter's class, the first error)}``."""

    @classmethod
    def read(cls, registry: CeleryJobs, jobs: Sequence[CeleryJob]) -> JobsKnown:
        """Ask each store once for ``jobs`` (``read_many`` and the like); never raises for a
        store that cannot be asked."""
        unavailable: dict[str, tuple[str, BaseException]] = {}

        def ask(store: str, adapter: object, call: Callable[[], _T]) -> _T | None:
            try:
                return call()
            except Exception as error:
                unavailable.setdefault(store, (type(adapter).__name__, error))
                return None

        run_state, checkpoints, last_runs = (
            registry.run_state,
            registry.checkpoints,
            registry.last_runs,
        )
        running: Mapping[str, datetime | None] | None = {}
        declared = [job.name for job in jobs if job.declared]
        if declared and not isinstance(run_state, InMemoryJobRunState):
            running = ask(RUN_STATE, run_state, lambda: run_state.running_many(declared))
        handled: Mapping[str, datetime | None] | None = {}
        if checkpoints is not None and jobs:
            names = [job.name for job in jobs]
            handled = ask(CHECKPOINTS, checkpoints, lambda: checkpoints.read_many(names))
        outcomes: Mapping[str, JobRun | None] | None = {}
        tracked = [job.name for job in jobs if job.declared or job.inline is not None]
        if last_runs is not None and tracked:
            outcomes = ask(LAST_RUNS, last_runs, lambda: last_runs.read_many(tracked))
        pauses: Mapping[str, Pause] | None = {}
        if jobs and not isinstance(registry.pauses, InMemoryJobPauses):
            pauses = ask(PAUSES, registry.pauses, lambda: paused_jobs(registry))
        return cls(registry, running, handled, outcomes, pauses, unavailable)

    def running(self, job: CeleryJob) -> datetime | str | None:
        """The instant of the run in progress, None when none is, or the word for why it is
        not known (``UNTRACKED``, ``UNKNOWN``, ``UNAVAILABLE``)."""
        if not job.declared:
            return UNTRACKED
        if isinstance(self.registry.run_state, InMemoryJobRunState):
            return UNKNOWN
        if self.in_progress is None:
            return UNAVAILABLE
        return self.in_progress.get(job.name)

    def last_run(self, job: CeleryJob) -> JobRun | str | None:
        """The job's last run, None when it has none yet, or the word for why it is unknown."""
        if not job.declared and job.inline is None:
            return UNTRACKED
        if self.registry.last_runs is None:
            return UNKNOWN
        if self.outcomes is None:
            return UNAVAILABLE
        return self.outcomes.get(job.name)

    def last_handled(self, job: CeleryJob) -> datetime | str | None:
        """The latest instant handled: the checkpoint beat wrote, or the instant of the last
        run recorded when later (a ``run-now`` counts, as its outcome does); None: never; a
        word when neither store can tell."""
        handled: datetime | None = None
        word: str | None = None
        if self.registry.checkpoints is None:
            word = UNKNOWN
        elif self.checkpointed is None:
            word = UNAVAILABLE
        else:
            handled = self.checkpointed.get(job.name)
        run = self.last_run(job)
        if isinstance(run, JobRun) and (handled is None or run.scheduled_at > handled):
            handled = run.scheduled_at
        return handled if handled is not None else word

    def pause(self, job: CeleryJob) -> Pause | str | None:
        """The pause an operator set, None when the job runs, or the word for why it is
        unknown (pauses in process memory: ``UNKNOWN``)."""
        if isinstance(self.registry.pauses, InMemoryJobPauses):
            return UNKNOWN
        if self.pauses is None:
            return UNAVAILABLE
        return self.pauses.get(job.name)


def zone_of(job: CeleryJob) -> tzinfo:
    """The zone a job's schedule is read in: its cron's, or UTC for an interval."""
    rule = job.schedule.rule
    return rule.zone if isinstance(rule, CronRule) else UTC


def local_time(at: datetime, zone: tzinfo) -> str:
    """``2026-03-29T03:00:00+02:00 CEST``: the wall clock of ``zone``, its offset and its name."""
    local = at.astimezone(zone)
    spec = "milliseconds" if local.microsecond else "seconds"
    return f"{local.isoformat(timespec=spec)} {local.tzname()}"


def next_instants(job: CeleryJob, now: datetime, count: int) -> list[datetime]:
    """The ``count`` next instants of the job's schedule after ``now`` (those it would have
    when disabled: a disabled job is never started by time)."""
    instants: list[datetime] = []
    at = now
    for _ in range(count):
        at = next_occurrence(job.schedule, at)
        instants.append(at)
    return instants


def on_schedule(job: CeleryJob, at: datetime) -> bool:
    """Whether ``at`` is an instant of the job's schedule (a ``run-now`` without ``--at`` is
    recorded at the instant it was asked, which is not)."""
    try:
        return next_occurrence(job.schedule, at - _TICK) == at
    except (ValueError, OverflowError):
        return False


def pausable(
    registry: CeleryJobs, name: str, *, doing: Literal["pause", "resume"] = "pause"
) -> CeleryJob:
    """The job ``name`` when an operator may pause it (or resume it: ``doing`` words the
    refusal).

    Raises:
        UnknownJobError: no job has the name.
        NotPausableError: it is a system job of ddd_celery (the relay).
    """
    job = registry.jobs.get(name)
    if job is None:
        raise UnknownJobError(f"no job is named {name!r}", job=name)
    if job.inline is not None:
        why = (
            "pausing it would leave them unpublished"
            if doing == "pause"
            else "it is never paused, so there is nothing to resume"
        )
        raise NotPausableError(
            f"{name!r} is a system job of ddd_celery (it publishes the background jobs that are "
            f"due): {why}"
        )
    return job


def shared_pauses(registry: CeleryJobs) -> JobPauses:
    """The pauses every beat reads.

    Raises:
        NotPausableError: they live in this process's memory, where no beat would read them.
    """
    if isinstance(registry.pauses, InMemoryJobPauses):
        raise NotPausableError(
            f"the pauses live in each process's memory (the lock is "
            f"{type(registry.lock).__name__}), where no beat would read them: share them with a "
            "RedisLock or SqlLock (they live beside it) or install_jobs(pauses=RedisJobPauses(...))"
        )
    return registry.pauses
