"""The JobScheduler port: what an application asks of whatever runs its scheduled jobs.

The in-process scheduler, the manual one of specs and the Celery beat driver implement it, and
each passes ``ddd_celery.testing.contracts.job_scheduler``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from ddd_celery.declarations.errors import DeclarationError
from ddd_celery.declarations.names import check_job_name
from ddd_celery.declarations.options import Tenancy
from ddd_celery.declarations.schedule import ParsedJobSchedule, parse_job_schedule
from ddd_celery.scheduling.execution import JobCallable
from ddd_celery.scheduling.outcomes import JobRun

ScheduleInput = Mapping[str, Any] | ParsedJobSchedule
"""A schedule as written (``{"every": "15m", "overlap": "queue"}``) or already parsed."""


def registered_schedule(
    name: str, schedule: ScheduleInput, tenancy: Tenancy | str | None
) -> ParsedJobSchedule:
    """The schedule ``register`` keeps: parsed, with ``tenancy`` in place of its own if given.

    The name follows the rule of the declarations: a name with a newline or no context would be
    a lock key, a metric label and a log field that nothing else can match.
    """
    check_job_name(name)
    parsed = parse_job_schedule(schedule, job=name)
    if tenancy is None:
        return parsed
    try:
        chosen = Tenancy(tenancy)
    except ValueError:
        raise DeclarationError(
            f"tenancy must be one of {', '.join(t.value for t in Tenancy)}, not {tenancy!r}",
            job=name,
        ) from None
    return replace(parsed, options=replace(parsed.options, tenancy=chosen))


@dataclass(frozen=True, slots=True)
class JobDescription:
    """What ``describe()`` tells of one job, as data for a screen or the ``jobs list`` command."""

    name: str
    schedule: str
    """``every 15m`` or ``cron 0 7 * * 1-5 (Europe/Paris)``."""
    enabled: bool
    running: bool
    """A run of the job is in progress in this instance."""
    next_run_at: datetime | None
    """The next instant this instance waits for; None when stopped or disabled."""
    last_run: JobRun | None
    """The last occurrence this instance handled, whatever its outcome."""


class JobScheduler(ABC):
    """Runs registered jobs at the instants of their schedules, and on demand.

    Every instant comes from the scheduler's ``Clock``. Each occurrence handled has exactly one
    outcome, logged, counted and passed to the ``on_run`` observer. A failing job stops neither
    the scheduler nor the other jobs.
    """

    @abstractmethod
    def register(
        self,
        *,
        name: str,
        schedule: ScheduleInput,
        run: JobCallable,
        tenancy: Tenancy | str | None = None,
    ) -> None:
        """Add a job; ``run(execution)`` is a sync or async callable.

        ``tenancy``, when given, replaces the schedule's. Raises ``DeclarationError`` for a
        schedule or option that cannot be read, ``InvalidJobScheduleError`` for a name already
        registered or a per-tenant job on a scheduler without a tenant directory. A job
        registered after ``start()`` is scheduled at once.
        """

    @abstractmethod
    async def start(self) -> None:
        """Start running jobs by time, each from its checkpoint or from now.

        Returns once the jobs are scheduled; raises ``RuntimeError`` if already started.
        """

    @abstractmethod
    async def stop(self) -> None:
        """Start nothing new; wait for the runs in progress up to the grace period, then abort.

        A run still in progress after the grace has its signal aborted with a
        ``JobAbortedError`` and is recorded ``failed``, ``JOB_ABORTED``; an occurrence queued
        behind a run is dropped and recorded ``missed``. Returns without waiting for aborted
        runs to end. Stopping a scheduler that is not started does nothing.
        """

    @abstractmethod
    async def run_now(self, name: str) -> None:
        """Run the job once, now, as the scheduler would, and raise what it raised.

        The run gets the execution scope of a scheduled one (origin ``schedule``, the job's
        system actor, a fresh correlation id, ``scheduled_at`` the instant it was asked) and
        takes no lock. It works on a disabled job and on a scheduler that is not started.
        Raises ``UnknownJobError`` for a name no job has.
        """

    @abstractmethod
    def describe(self) -> list[JobDescription]:
        """Every registered job, in the order of registration."""
