"""``celery -A app jobs list`` and ``celery -A app jobs run-now <name>``.

Installed through the ``celery.commands`` entry point, so the commands take ``-A`` like every
other ``celery`` command and read the jobs ``install_jobs`` put on the app.

A fresh process has handled no occurrence itself: beat and the workers have. ``list`` shows what
the shared stores can tell (the run in progress from the run state, the last occurrence handled
from the checkpoints, the latest outcome from the last runs) and says when it cannot know.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TypeVar

import click
from celery.bin.base import CeleryCommand

from ddd_celery.celery.background_cli import background
from ddd_celery.celery.registry import CeleryJob, CeleryJobs, jobs_of
from ddd_celery.celery.tasks import run_here
from ddd_celery.kernel.instants import iso_ms
from ddd_celery.scheduling.errors import UnknownJobError
from ddd_celery.scheduling.instants import next_occurrence
from ddd_celery.scheduling.outcomes import JobRun
from ddd_celery.scheduling.run_state import InMemoryJobRunState

UNKNOWN = "unknown"
UNAVAILABLE = "unavailable"
UNTRACKED = "untracked"
"""RUNNING and LAST OUTCOME of a ``beat_schedule`` entry: its task is the app's own, which
reports neither its end nor its outcome."""
COLUMNS = (
    "NAME",
    "SCHEDULE",
    "ENABLED",
    "QUEUE",
    "NEXT RUN",
    "RUNNING",
    "LAST HANDLED",
    "LAST OUTCOME",
)

_T = TypeVar("_T")


@click.group(name="jobs")
def jobs() -> None:
    """The scheduled jobs installed on the app: list them, run one now."""


jobs.add_command(background)


@jobs.command(name="list", cls=CeleryCommand)
@click.pass_context
def list_jobs(ctx: click.Context) -> None:
    """Each job: schedule, enabled, queue, next run, run in progress, last handled, last outcome."""
    registry = _registry(ctx)
    now = registry.clock.now()
    rows = [_row(registry, job, now) for job in registry.jobs.values()]
    widths = [max(len(row[i]) for row in [COLUMNS, *rows]) for i in range(len(COLUMNS))]
    for row in [COLUMNS, *rows]:
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        click.echo("  ".join(cells).rstrip())
    for note in _notes(registry):
        click.echo(note)


@jobs.command(name="run-now", cls=CeleryCommand)
@click.argument("name")
@click.pass_context
def run_now_command(ctx: click.Context, name: str) -> None:
    """Run the job NAME once, in this process, as a worker would (no lock)."""
    registry = _registry(ctx)
    try:
        record, error = run_here(registry, name)
    except UnknownJobError:
        known = ", ".join(sorted(registry.jobs)) or "none"
        raise click.BadParameter(
            f"no job is named {name!r}; the jobs are: {known}", param_hint="NAME"
        ) from None
    except TypeError as refused:  # a beat_schedule entry
        raise click.UsageError(str(refused)) from None
    ran = (
        f"in {record.duration_ms or 0:.0f} ms (scheduled_at {iso_ms(record.scheduled_at)}, "
        f"correlation id {record.correlation_id})"
    )
    if error is not None:
        # The code and type only, as the log line: an error's message may quote data.
        click.echo(f"{name} failed: {record.error_code} ({record.error_type}) {ran}", err=True)
        ctx.exit(1)
    click.echo(f"{name} succeeded {ran}")


def _registry(ctx: click.Context) -> CeleryJobs:
    try:
        return jobs_of(ctx.obj.app)
    except LookupError as error:
        raise click.UsageError(str(error)) from None


def _row(registry: CeleryJobs, job: CeleryJob, now: datetime) -> tuple[str, ...]:
    enabled = job.schedule.options.enabled
    return (
        job.name,
        job.schedule.description,
        "yes" if enabled else "no",
        job.queue or "(task's own)",
        iso_ms(next_occurrence(job.schedule, now)) if enabled else "never by time",
        _running(registry, job),
        _last_handled(registry, job.name),
        _last_outcome(registry, job),
    )


def _running(registry: CeleryJobs, job: CeleryJob) -> str:
    if not job.declared:
        return UNTRACKED
    if isinstance(registry.run_state, InMemoryJobRunState):
        return UNKNOWN
    return _asked(lambda: registry.run_state.running(job.name), none="no", show=iso_ms)


def _last_handled(registry: CeleryJobs, name: str) -> str:
    checkpoints = registry.checkpoints
    if checkpoints is None:
        return UNKNOWN
    return _asked(lambda: checkpoints.read(name), none="never", show=iso_ms)


def _last_outcome(registry: CeleryJobs, job: CeleryJob) -> str:
    if not job.declared:
        return UNTRACKED
    last_runs = registry.last_runs
    if last_runs is None:
        return UNKNOWN
    return _asked(lambda: last_runs.read(job.name), none="none yet", show=_outcome)


def _outcome(run: JobRun) -> str:
    """``failed JOB_TIMEOUT 2026-03-02T06:00:00.000Z``: the code, never the message, as logged."""
    return " ".join(filter(None, (run.outcome.value, run.error_code, iso_ms(run.scheduled_at))))


def _asked(ask: Callable[[], _T | None], *, none: str, show: Callable[[_T], str]) -> str:
    """What a store answers, or ``unavailable`` when it cannot be asked: listing never fails."""
    try:
        answer = ask()
    except Exception:
        return UNAVAILABLE
    return none if answer is None else show(answer)


def _notes(registry: CeleryJobs) -> list[str]:
    notes: list[str] = []
    if isinstance(registry.run_state, InMemoryJobRunState):
        notes.append(
            f"RUNNING is {UNKNOWN}: the run state is in process memory; "
            "install_jobs(run_state=RedisJobRunState(...)) shares it."
        )
    if registry.checkpoints is None:
        notes.append(
            f"LAST HANDLED is {UNKNOWN}: no checkpoints; "
            "install_jobs(checkpoints=RedisJobCheckpoints(...)) keeps them."
        )
    if registry.last_runs is None:
        notes.append(
            f"LAST OUTCOME is {UNKNOWN}: no last runs; "
            "install_jobs(last_runs=RedisJobLastRuns(...)) keeps them."
        )
    return notes
