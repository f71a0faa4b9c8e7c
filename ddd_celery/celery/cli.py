"""``celery -A app jobs list`` and ``celery -A app jobs run-now <name>``.

Installed through the ``celery.commands`` entry point, so the commands take ``-A`` like every
other ``celery`` command and read the jobs ``install_jobs`` put on the app.

A fresh process knows little about runs: outcomes live in the logs and metrics of the processes
that handled them. ``list`` shows what the shared stores can tell (the run in progress from the
run state, the last occurrence handled from the checkpoints) and says when it cannot know.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import click
from celery.bin.base import CeleryCommand

from ddd_celery.celery.registry import CeleryJob, CeleryJobs, jobs_of
from ddd_celery.celery.tasks import run_here
from ddd_celery.kernel.instants import iso_ms
from ddd_celery.scheduling.errors import UnknownJobError
from ddd_celery.scheduling.instants import next_occurrence
from ddd_celery.scheduling.run_state import InMemoryJobRunState

UNKNOWN = "unknown"
UNAVAILABLE = "unavailable"
UNTRACKED = "untracked"
"""The RUNNING of a ``beat_schedule`` entry: its task is the app's own and reports no end."""
COLUMNS = ("NAME", "SCHEDULE", "ENABLED", "QUEUE", "NEXT RUN", "RUNNING", "LAST HANDLED")


@click.group(name="jobs")
def jobs() -> None:
    """The scheduled jobs installed on the app: list them, run one now."""


@jobs.command(name="list", cls=CeleryCommand)
@click.pass_context
def list_jobs(ctx: click.Context) -> None:
    """Each job: schedule, enabled, queue, next run, run in progress, last occurrence handled."""
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
    )


def _running(registry: CeleryJobs, job: CeleryJob) -> str:
    if not job.declared:
        return UNTRACKED
    if isinstance(registry.run_state, InMemoryJobRunState):
        return UNKNOWN
    return _asked(lambda: registry.run_state.running(job.name), none="no")


def _last_handled(registry: CeleryJobs, name: str) -> str:
    checkpoints = registry.checkpoints
    if checkpoints is None:
        return UNKNOWN
    return _asked(lambda: checkpoints.read(name), none="never")


def _asked(ask: Callable[[], datetime | None], *, none: str) -> str:
    """What a store answers, or ``unavailable`` when it cannot be asked: listing never fails."""
    try:
        answer = ask()
    except Exception:
        return UNAVAILABLE
    return none if answer is None else iso_ms(answer)


def _notes(registry: CeleryJobs) -> list[str]:
    notes = ["Outcomes are in the logs and metrics of beat and the workers; this lists none."]
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
    return notes
