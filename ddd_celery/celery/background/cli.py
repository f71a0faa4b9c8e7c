"""``celery -A app jobs background stats | dead | find <id> | cancel <id> | retry-dead <id>``.

The operator's view of the background jobs, read from the ``JobStore`` that
``install_background_jobs`` put on the app: the store is the record of every job, so any
process can answer, whatever the broker holds. An operator reaches every tenant's jobs unless
``--tenant`` narrows it to one; the error of a job shows as its code and type, never its message
(it may quote data), as in the logs. What the store holds is printed with its control
characters escaped (``printable``): an actor or a job id with a newline or a terminal escape in
it cannot forge a line of the output.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import NoReturn

import click
from celery.bin.base import CeleryCommand

from ddd_celery.background.store import JobStatus, StoredJob
from ddd_celery.celery.app import check_configuration
from ddd_celery.celery.background.registry import BackgroundJobs, background_jobs_of
from ddd_celery.celery.config import JobsConfigError
from ddd_celery.kernel.instants import iso_ms

STATUS_COLUMNS = (
    JobStatus.QUEUED,
    JobStatus.RUNNING,
    JobStatus.FAILED,
    JobStatus.DEAD,
    JobStatus.SUCCEEDED,
    JobStatus.CANCELLED,
)


def _no_empty_tenant(ctx: click.Context, _param: click.Parameter, tenant: str | None) -> str | None:
    """``--tenant ''`` names no tenant: refused in one line, rather than read as every job."""
    if tenant == "":
        click.echo(
            "--tenant '' names no tenant: give a tenant's id, or leave --tenant out to reach "
            "every job",
            err=True,
        )
        ctx.exit(2)
    return tenant


_TENANT = click.option(
    "--tenant",
    default=None,
    callback=_no_empty_tenant,
    help="Reach the jobs of this tenant only (default: every job).",
)


@click.group(name="background")
def background() -> None:
    """The background jobs in the store: count, list the dead, find, cancel, retry."""


@background.command(name="stats", cls=CeleryCommand)
@click.pass_context
def stats_command(ctx: click.Context) -> None:
    """How many jobs each queue holds in each status."""
    stats = _registry(ctx).store.stats()
    header = ("QUEUE", *(status.value.upper() for status in STATUS_COLUMNS))
    rows = [
        (queue, *(str(counts.get(status, 0)) for status in STATUS_COLUMNS))
        for queue, counts in sorted(stats.counts.items())
    ]
    rows.append(("(all)", *(str(stats.total(status)) for status in STATUS_COLUMNS)))
    _table(header, rows)


@background.command(name="dead", cls=CeleryCommand)
@click.option("--limit", default=20, show_default=True, type=click.IntRange(min=1))
@_TENANT
@click.pass_context
def dead_command(ctx: click.Context, limit: int, tenant: str | None) -> None:
    """The dead jobs (attempts exhausted), most recently enqueued first."""
    dead = _registry(ctx).store.list_jobs(status=JobStatus.DEAD, tenant_id=tenant, limit=limit)
    if not dead:
        click.echo("no dead job")
        return
    header = ("ID", "NAME", "ATTEMPTS", "LAST ERROR", "FINISHED AT", "TENANT")
    _table(
        header,
        [
            (
                job.id,
                job.name,
                _attempts(job),
                _error(job),
                _instant(job.finished_at),
                job.tenant_id or "-",
            )
            for job in dead
        ],
    )


@background.command(name="find", cls=CeleryCommand)
@click.argument("job_id")
@_TENANT
@click.pass_context
def find_command(ctx: click.Context, job_id: str, tenant: str | None) -> None:
    """Show the job JOB_ID: status, attempts, when it runs, progress, last error, tenant."""
    job = _registry(ctx).store.find(job_id, tenant_id=tenant)
    if job is None:
        _not_found(ctx, job_id, tenant)
        return
    fields = (
        ("id", job.id),
        ("name", job.name),
        ("queue", job.queue),
        ("status", job.status.value),
        ("attempts", _attempts(job)),
        ("run at", _instant(job.run_at)),
        ("enqueued at", _instant(job.enqueued_at)),
        ("finished at", _instant(job.finished_at)),
        ("progress", "-" if job.progress is None else json.dumps(job.progress)),
        ("last error", _error(job)),
        ("tenant", job.tenant_id or "-"),
        ("actor", job.enqueued_by.actor or "-"),
        ("correlation id", job.enqueued_by.correlation_id or "-"),
    )
    width = max(len(name) for name, _ in fields)
    for name, value in fields:
        click.echo(f"{name.ljust(width)}  {printable(value)}")


@background.command(name="cancel", cls=CeleryCommand)
@click.argument("job_id")
@_TENANT
@click.pass_context
def cancel_command(ctx: click.Context, job_id: str, tenant: str | None) -> None:
    """Cancel the job JOB_ID if it is queued, failed or running (a running one is aborted)."""
    registry = _registry(ctx)
    if registry.store.cancel(job_id, tenant_id=tenant, now=registry.clock.now()):
        click.echo(f"{printable(job_id)} cancelled")
        return
    _refused(ctx, registry, job_id, tenant, "only a queued, failed or running job is cancelled")


@background.command(name="retry-dead", cls=CeleryCommand)
@click.argument("job_id")
@_TENANT
@click.pass_context
def retry_dead_command(ctx: click.Context, job_id: str, tenant: str | None) -> None:
    """Queue the dead job JOB_ID again, its attempts reset; the relay publishes it."""
    registry = _registry(ctx)
    if registry.store.retry_dead(job_id, tenant_id=tenant, now=registry.clock.now()):
        click.echo(f"{printable(job_id)} queued again; beat's relay publishes it at its next tick")
        return
    _refused(ctx, registry, job_id, tenant, "only a dead job is retried")


def _registry(ctx: click.Context) -> BackgroundJobs:
    """The app's background jobs, once its configuration is known to be usable."""
    try:
        registry = background_jobs_of(ctx.obj.app)
    except LookupError as error:
        raise click.UsageError(str(error)) from None
    try:
        check_configuration(ctx.obj.app)
    except JobsConfigError as refused:
        refuse_configuration(ctx, refused)
    return registry


def refuse_configuration(ctx: click.Context, refused: JobsConfigError) -> NoReturn:
    """One line, ``ddd_celery refuses the configuration: <what, naming the setting>``; exit 1."""
    click.echo(f"ddd_celery refuses the configuration: {printable(str(refused))}", err=True)
    ctx.exit(1)


def printable(text: str) -> str:
    """``text`` with each character that is not printable escaped (``\\n``, ``\\x1b``,
    ``\\u202e``): a value read from a store cannot forge a line or move the cursor."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def _not_found(ctx: click.Context, job_id: str, tenant: str | None) -> None:
    whose = f" of tenant {tenant!r}" if tenant is not None else ""
    click.echo(f"no background job{whose} has the id {job_id!r}", err=True)
    ctx.exit(1)


def _refused(
    ctx: click.Context, registry: BackgroundJobs, job_id: str, tenant: str | None, rule: str
) -> None:
    job = registry.store.find(job_id, tenant_id=tenant)
    if job is None:
        _not_found(ctx, job_id, tenant)
        return
    click.echo(f"{printable(job_id)} is {job.status.value}: {rule}", err=True)
    ctx.exit(1)


def _attempts(job: StoredJob) -> str:
    return f"{job.attempts}/{job.max_attempts}"


def _error(job: StoredJob) -> str:
    if job.last_error_code is None:
        return "-"
    return f"{job.last_error_code} ({job.last_error_type or 'unknown type'})"


def _instant(at: datetime | None) -> str:
    return "-" if at is None else iso_ms(at)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """The rows in aligned columns, each cell's text ``printable``: it comes from the store."""
    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        click.echo("  ".join(cells).rstrip())
