"""``celery -A app jobs pause NAME`` and ``resume NAME``: an operator holds a job at run time.

A pause is kept in the store the beats share (``celery/pauses.py``), so every beat honours it
from the job's next occurrence, recorded ``skipped-paused``, until ``resume``; neither command
restarts anything. The wiring's settings still decide what is declared and enabled: a paused
job stays enabled, and a disabled job is never started by time, paused or not (the command says
so). Both are safe to run twice: a second ``pause`` answers the pause already kept, a second
``resume`` that there is nothing to resume. Every text read back from the store is printed
through ``printable``.
"""

from __future__ import annotations

import getpass
import socket

import click

from ddd_celery.celery.background.cli import printable, refuse_configuration
from ddd_celery.celery.cli_errors import JobsCommand
from ddd_celery.celery.config import JobsConfigError
from ddd_celery.celery.describe import next_run_at
from ddd_celery.celery.registry import CeleryJobs, jobs_of
from ddd_celery.celery.views import pausable, shared_pauses
from ddd_celery.kernel.instants import iso_ms
from ddd_celery.scheduling.errors import UnknownJobError
from ddd_celery.scheduling.pauses import Pause


@click.command(name="pause", cls=JobsCommand)
@click.argument("name")
@click.option("--reason", help="Why, kept with the pause and shown beside it.")
@click.option(
    "--by",
    help="Who pauses it, kept with the pause (default: this shell's user@host).",
)
@click.pass_context
def pause_command(ctx: click.Context, name: str, reason: str | None, by: str | None) -> None:
    """Pause the scheduled job NAME: every beat records its next occurrences skipped-paused
    instead of sending them, until `jobs resume NAME`.

    Exits 2 for a name no job has (as ``next``, ``history`` and ``run-now`` do), 1 for a
    system job or a store that cannot be asked.
    """
    registry = registry_of(ctx)
    try:
        job = pausable(registry, name)
    except UnknownJobError:
        raise _unknown(registry, name) from None
    asked_by, now = by or _operator(), registry.clock.now()
    kept = shared_pauses(registry).pause(name, by=asked_by, at=now, reason=reason)
    if (kept.by, kept.at) == (asked_by, now):
        click.echo(f"paused {printable(name)} {_told(kept)}")
    else:
        click.echo(f"{printable(name)} was already paused {_told(kept)}; nothing changed")
    if not job.schedule.options.enabled:
        click.echo("it is disabled by its settings too: beat starts it by time only once enabled")
        return
    at = next_run_at(job, now)
    if at is not None:
        click.echo(f"its next occurrence, {iso_ms(at)}, is skipped unless it is resumed before")


@click.command(name="resume", cls=JobsCommand)
@click.argument("name")
@click.pass_context
def resume_command(ctx: click.Context, name: str) -> None:
    """Resume the scheduled job NAME: its next occurrence runs.

    A name no job has now is resumed when a pause of it is kept (a job removed since); else it
    exits 2, as ``pause`` does; 1 for a system job or a store that cannot be asked.
    """
    registry = registry_of(ctx)
    job = registry.jobs.get(name)
    if job is not None:
        pausable(registry, name, doing="resume")
    removed = shared_pauses(registry).resume(name)
    if removed is None and job is None:
        raise _unknown(registry, name)
    if removed is None:
        click.echo(f"{printable(name)} was not paused; nothing changed")
    else:
        click.echo(f"resumed {printable(name)} ({_was_paused(removed)})")
    if job is None:
        return
    if not job.schedule.options.enabled:
        click.echo("it is disabled by its settings: beat starts it by time only once enabled")
        return
    at = next_run_at(job, registry.clock.now())
    if at is not None:
        click.echo(f"its next occurrence runs: {iso_ms(at)}")


def registry_of(ctx: click.Context) -> CeleryJobs:
    """The app's jobs; a configuration that cannot run them is one line and exit 1.

    Every scheduled-jobs command's (``cli.py`` imports it from here: this module cannot import
    ``cli.py``, which registers its commands).
    """
    try:
        return jobs_of(ctx.obj.app)
    except LookupError as error:
        raise click.UsageError(str(error)) from None
    except JobsConfigError as refused:
        refuse_configuration(ctx, refused)


def _unknown(registry: CeleryJobs, name: str) -> click.BadParameter:
    """A usage error (exit 2), worded as the other commands word it."""
    known = ", ".join(printable(job) for job in sorted(registry.jobs)) or "none"
    return click.BadParameter(
        f"no job is named {printable(repr(name))}; the jobs are: {known}", param_hint="NAME"
    )


def _told(pause: Pause) -> str:
    """``by ada@ops-1 at 2026-03-02T06:00:00.123Z (invoices wrong)``, escaped."""
    reason = "" if pause.reason is None else f" ({printable(pause.reason)})"
    return f"by {printable(pause.by)} at {iso_ms(pause.at)}{reason}"


def _was_paused(pause: Pause) -> str:
    """``it was paused by ada@ops-1 at 2026-03-02T06:00:00.123Z; reason: invoices wrong``: who
    paused, said of the pause that ended, not as if they had resumed it."""
    reason = "" if pause.reason is None else f"; reason: {printable(pause.reason)}"
    return f"it was paused by {printable(pause.by)} at {iso_ms(pause.at)}{reason}"


def _operator() -> str:
    """``user@host`` of this shell: who a pause is kept as unless ``--by`` says."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a bare container)
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


__all__ = ["pause_command", "registry_of", "resume_command"]
