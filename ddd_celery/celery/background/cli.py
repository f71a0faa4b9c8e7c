"""``celery -A app jobs background list | stats | find | cancel | retry-dead | purge``.

The operator's view of the background jobs, read from the ``JobStore`` that
``install_background_jobs`` put on the app: the store is the record of every job, so any
process can answer, whatever the broker holds. The queries and commands are
``ddd_celery.background.operations``'s, which a web page shares; this module only formats.

An operator reaches every tenant's jobs unless ``--tenant`` narrows it to one; the error of a job
shows as its code and type, never its message (it may quote data), and its payload as its shape,
never its values. What the store holds is printed with its control characters escaped
(``printable``): an actor or a job id with a newline or a terminal escape in it cannot forge a
line of the output. A bulk command says how many jobs it matched and asks before it acts
(``--yes`` does not ask). Every command fails in one line (``JobsCommand``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, NoReturn, TypeVar

import click

from ddd_celery.background.operations import (
    CANCELLABLE_STATES,
    Answer,
    Counts,
    JobAnswer,
    JobStory,
    ProcessTimeout,
    Selection,
    StatsView,
    cancel_job,
    cancel_selected,
    json_text,
    page_data,
    parse_age,
    parse_since,
    printable,
    purge,
    queued_again,
    retry_dead_job,
    retry_selected,
    select_dead,
    select_to_cancel,
    stats_view,
    story,
    total,
)
from ddd_celery.background.store import JobFilter, JobState, JobStatus, StoredJob
from ddd_celery.celery.app import check_configuration
from ddd_celery.celery.background.registry import BackgroundJobs, background_jobs_of
from ddd_celery.celery.cli_errors import JobsCommand
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
LIST_COLUMNS = (
    "ID",
    "NAME",
    "QUEUE",
    "STATE",
    "ATTEMPTS",
    "ENQUEUED AT",
    "RUN AT",
    "FINISHED AT",
    "LAST ERROR",
    "TENANT",
)
ATTEMPT_COLUMNS = ("ATTEMPT", "STARTED AT", "ENDED AT", "WORKER", "OUTCOME", "ERROR")
ORIGIN_TEXT = {
    "application": "application",
    "process-timeout": "library (a process manager's timeout)",
    "process-commands": "library (the outbox of a process step's commands)",
}

__all__ = ["background", "printable", "refuse_configuration"]
"""``printable`` is ``operations``'s, also reached from here, where the commands first had it."""

_F = TypeVar("_F", bound=Callable[..., Any])


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
_JSON = click.option("--json", "as_json", is_flag=True, help="Print it as JSON.")
_YES = click.option("--yes", is_flag=True, help="Do not ask for a confirmation.")


def _filters(states: Sequence[JobState] | None) -> Callable[[_F], _F]:
    """The options that choose jobs: a state among ``states`` (none: no ``--state``), a name,
    a queue, a tenant, enqueued or finished since."""

    def decorate(command: _F) -> _F:
        options = [
            click.option("--name", default=None, help="Jobs of this name only."),
            click.option("--queue", default=None, help="Jobs of this queue only."),
            _TENANT,
            click.option(
                "--enqueued-since",
                default=None,
                metavar="INSTANT|AGE",
                help="Enqueued at or after an ISO instant (2026-03-02T09:00:00Z) or an age "
                "ago (30m, 2h, 7d).",
            ),
            click.option(
                "--finished-since",
                default=None,
                metavar="INSTANT|AGE",
                help="Finished at or after an ISO instant or an age ago.",
            ),
        ]
        if states is not None:
            options.insert(
                0,
                click.option(
                    "--state",
                    type=click.Choice([state.value for state in states]),
                    default=None,
                    help="Jobs in this state only (scheduled: queued, not due yet; ready: "
                    "due, waiting for a worker; retrying: failed, waiting for its retry).",
                ),
            )
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


@click.group(name="background")
def background() -> None:
    """The background jobs in the store: list, count, find, cancel, retry, purge."""


@background.command(name="stats", cls=JobsCommand)
@_JSON
@click.pass_context
def stats_command(ctx: click.Context, as_json: bool) -> None:
    """How many jobs each queue and each job name holds in each status; the library's own
    jobs (process timeouts, commands' outbox) counted apart from the application's."""
    registry = _registry(ctx)
    view = stats_view(registry.store, registry.origins())
    if as_json:
        click.echo(json_text(view.as_data()))
        return
    _table(_counts_header("QUEUE"), _counts_rows(view.queues, "(all)"))
    click.echo()
    _table(_counts_header("JOB"), _name_rows(view))


@background.command(name="list", cls=JobsCommand)
@_filters(list(JobState))
@click.option("--limit", default=50, show_default=True, type=click.IntRange(min=1, max=1000))
@click.option("--cursor", default=None, help="The page after the one that printed it.")
@_JSON
@click.pass_context
def list_command(
    ctx: click.Context, /, *, limit: int, cursor: str | None, as_json: bool, **where: str | None
) -> None:
    """The jobs, most recently enqueued first, a page at a time."""
    _list(ctx, where, limit=limit, cursor=cursor, as_json=as_json)


@background.command(name="dead", cls=JobsCommand)
@_filters(None)
@click.option("--limit", default=50, show_default=True, type=click.IntRange(min=1, max=1000))
@click.option("--cursor", default=None, help="The page after the one that printed it.")
@_JSON
@click.pass_context
def dead_command(
    ctx: click.Context, /, *, limit: int, cursor: str | None, as_json: bool, **where: str | None
) -> None:
    """The dead jobs (attempts exhausted): ``list --state dead``."""
    _list(ctx, {**where, "state": JobState.DEAD.value}, limit=limit, cursor=cursor, as_json=as_json)


@background.command(name="find", cls=JobsCommand)
@click.argument("job_id")
@_TENANT
@_JSON
@click.pass_context
def find_command(ctx: click.Context, job_id: str, tenant: str | None, as_json: bool) -> None:
    """The story of the job JOB_ID: what the store holds of it, then each of its attempts."""
    registry = _registry(ctx)
    told = story(
        registry.store,
        job_id,
        tenant_id=tenant,
        now=registry.clock.now(),
        origins=registry.origins(),
    )
    if told is None:
        _not_found(ctx, job_id, tenant)
    if as_json:
        click.echo(json_text(told.as_data()))
        return
    fields = _story_fields(told)
    width = max(len(field) for field, _ in fields)
    for field, value in fields:
        click.echo(f"{field.ljust(width)}  {printable(value)}")
    click.echo()
    _attempts_table(told)


@background.command(name="cancel", cls=JobsCommand)
@click.argument("job_id", required=False)
@click.option("--all", "every", is_flag=True, help="Cancel every job the filters reach.")
@_filters(CANCELLABLE_STATES)
@click.option(
    "--force",
    is_flag=True,
    help="Cancel a process manager's armed timeout too (its instance then waits for good).",
)
@_YES
@click.pass_context
def cancel_command(
    ctx: click.Context,
    /,
    job_id: str | None,
    *,
    every: bool,
    force: bool,
    yes: bool,
    **where: str | None,
) -> None:
    """Cancel the job JOB_ID, or with --all every job the filters reach, if it is scheduled,
    ready, retrying or running (a running one is aborted). A process manager's armed timeout is
    refused (bulk: skipped) unless --force."""
    _one_or_all(ctx, job_id, every, where)
    tenant = where["tenant"]
    registry = _registry(ctx)
    now = registry.clock.now()
    if job_id is None:
        selection = select_to_cancel(
            registry.store,
            _filter(ctx, now, where),
            now=now,
            origins=registry.origins(),
            force=force,
        )
        skipped = selection.skipped_timeouts
        note = (
            f" ({skipped} armed process timeout(s) skipped: --force cancels them too)"
            if skipped
            else ""
        )
        if _confirmed(
            selection, f"{len(selection.job_ids)} job(s) match{note}", "cancel them", yes
        ):
            done = cancel_selected(registry.store, selection, tenant_id=tenant, now=now)
            click.echo(f"cancelled {done} of {len(selection.job_ids)}")
        return
    answer = cancel_job(
        registry.store, job_id, tenant_id=tenant, now=now, origins=registry.origins(), force=force
    )
    if answer.answer is Answer.ARMED_TIMEOUT:
        assert answer.timeout is not None
        refused = (
            f"{job_id} is {_timeout_text(answer.timeout)}, still to fire: cancelled, the "
            "instance would wait for it for good. Step the instance instead, or give --force "
            "to cancel it anyway"
        )
        click.echo(printable(refused), err=True)
        ctx.exit(1)
    _answered(ctx, answer, job_id, tenant, now=now, done="cancelled", rule=_CANCEL_RULE)


@background.command(name="retry-dead", cls=JobsCommand)
@click.argument("job_id", required=False)
@click.option("--all", "every", is_flag=True, help="Queue every dead job the filters reach.")
@_filters(None)
@_YES
@click.pass_context
def retry_dead_command(
    ctx: click.Context, /, job_id: str | None, *, every: bool, yes: bool, **where: str | None
) -> None:
    """Queue the dead job JOB_ID again, or with --all every dead job the filters reach, its
    attempts reset; beat's relay publishes it."""
    _one_or_all(ctx, job_id, every, where)
    tenant = where["tenant"]
    registry = _registry(ctx)
    now = registry.clock.now()
    if job_id is None:
        selection = select_dead(registry.store, _filter(ctx, now, where), now=now)
        matched = len(selection.job_ids)
        if _confirmed(selection, f"{matched} dead job(s) match", "queue them again", yes):
            done = retry_selected(registry.store, selection, tenant_id=tenant, now=now)
            click.echo(
                f"queued {done} of {matched} again; beat's relay publishes them at its next tick"
            )
        return
    answer = retry_dead_job(registry.store, job_id, tenant_id=tenant, now=now)
    _answered(
        ctx,
        answer,
        job_id,
        tenant,
        now=now,
        done="queued again; beat's relay publishes it at its next tick",
        rule="only a dead job is retried",
    )


@background.command(name="purge", cls=JobsCommand)
@click.option(
    "--older-than",
    "older_than",
    required=True,
    metavar="AGE",
    help="Delete the jobs finished longer ago than this (30m, 12h, 7d).",
)
@click.option("--dead", is_flag=True, help="Delete the dead jobs too (kept otherwise).")
@click.option(
    "--batch",
    default=1_000,
    show_default=True,
    type=click.IntRange(min=1, max=100_000),
    help="How many jobs each call to the store deletes.",
)
@_YES
@click.pass_context
def purge_command(ctx: click.Context, older_than: str, dead: bool, batch: int, yes: bool) -> None:
    """Delete the succeeded and cancelled jobs finished before now - AGE (the dead ones with
    --dead), in batches, oldest first."""
    try:
        age = parse_age(older_than)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--older-than") from None
    registry = _registry(ctx)
    before = registry.clock.now() - age
    which = "succeeded, cancelled and dead" if dead else "succeeded and cancelled"
    click.echo(f"purging the {which} jobs finished before {iso_ms(before)}")
    if not yes:
        click.confirm("purge them?", abort=True)
    progress = _Progress()
    purged = purge(registry.store, before=before, dead=dead, batch=batch, progress=progress)
    progress.end()
    click.echo(f"purged {purged} job(s)")


_CANCEL_RULE = "only a scheduled, ready, retrying or running job is cancelled"


def _list(
    ctx: click.Context,
    where: Mapping[str, str | None],
    *,
    limit: int,
    cursor: str | None,
    as_json: bool,
) -> None:
    registry = _registry(ctx)
    now = registry.clock.now()
    chosen = _filter(ctx, now, where)
    try:
        page = registry.store.list_page(chosen, now=now, limit=limit, cursor=cursor)
    except ValueError as error:
        if cursor is None:
            raise
        raise click.BadParameter(str(error), param_hint="--cursor") from None
    origins = registry.origins()
    if as_json:
        document = {"now": iso_ms(now), "jobs": page_data(page, now, origins)}
        click.echo(json_text({**document, "cursor": page.cursor}))
        return
    if page.jobs:
        _table(LIST_COLUMNS, [_list_row(job, now) for job in page.jobs])
    else:
        # a filtered page may be empty and still have a cursor: its reads are bounded
        none = f"no {chosen.state.value} job" if chosen.state is not None else "no job"
        click.echo(none if page.cursor is None else f"{none} on this page")
    if page.cursor is not None:
        click.echo(f"next page: --cursor {printable(page.cursor)}")


def _filter(ctx: click.Context, now: datetime, where: Mapping[str, str | None]) -> JobFilter:
    """The filter options as a ``JobFilter``; an instant that cannot be read exits 2 naming it.

    ``retry-dead`` has no ``--state``: it reaches the dead jobs.
    """
    since: dict[str, datetime | None] = {}
    for option in ("enqueued_since", "finished_since"):
        text = where[option]
        try:
            since[option] = None if text is None else parse_since(text, now)
        except ValueError as error:
            hint = "--" + option.replace("_", "-")
            raise click.BadParameter(str(error), ctx=ctx, param_hint=hint) from None
    state = where.get("state", JobState.DEAD.value)
    return JobFilter(
        state=None if state is None else JobState(state),
        name=where["name"],
        queue=where["queue"],
        tenant_id=where["tenant"],
        enqueued_since=since["enqueued_since"],
        finished_since=since["finished_since"],
    )


def _one_or_all(
    ctx: click.Context, job_id: str | None, every: bool, where: Mapping[str, str | None]
) -> None:
    """A job id, or ``--all`` with the filters: never both, never neither."""
    narrowed = any(value is not None for value in where.values())
    if job_id is not None and (every or narrowed):
        raise click.UsageError("give a job id, or --all with filters, not both", ctx=ctx)
    if job_id is None and not every:
        hint = " (the filters need --all)" if narrowed else ""
        raise click.UsageError(f"give a job id, or --all to reach every job{hint}", ctx=ctx)


def _confirmed(selection: Selection, matched: str, question: str, yes: bool) -> bool:
    """Print what matched; ask before acting (not with ``--yes``, not when nothing matched)."""
    click.echo(matched)
    if not selection.job_ids:
        return False
    if not yes:
        click.confirm(f"{question}?", abort=True)
    return True


def _answered(
    ctx: click.Context,
    answer: JobAnswer,
    job_id: str,
    tenant: str | None,
    *,
    now: datetime,
    done: str,
    rule: str,
) -> None:
    """What a command on one job answers: done, not found, or the rule its state breaks, in
    the words of ``list`` and of the rule (``retrying``, not its status ``failed``)."""
    job = answer.job
    if answer.answer is Answer.DONE:
        click.echo(f"{printable(job_id)} {done}")
        return
    if answer.answer is Answer.NOT_FOUND or job is None:
        _not_found(ctx, job_id, tenant)
    click.echo(f"{printable(job_id)} is {job.state(now).value}: {rule}", err=True)
    ctx.exit(1)


class _Progress:
    """The purge's progress line on stderr: rewritten in place on a terminal, a line a batch
    elsewhere (a log keeps each)."""

    def __init__(self) -> None:
        self._tty = sys.stderr.isatty()
        self._shown = False

    def __call__(self, purged: int) -> None:
        self._shown = True
        start = "\r" if self._tty else ""
        click.echo(f"{start}purged {purged} so far", err=True, nl=not self._tty)

    def end(self) -> None:
        if self._tty and self._shown:
            click.echo(err=True)


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


def _not_found(ctx: click.Context, job_id: str, tenant: str | None) -> NoReturn:
    whose = f" of tenant {printable(repr(tenant))}" if tenant is not None else ""
    click.echo(f"no background job{whose} has the id {printable(repr(job_id))}", err=True)
    ctx.exit(1)


def _story_fields(told: JobStory) -> list[tuple[str, str]]:
    job, by = told.job, told.job.enqueued_by
    fields = [
        ("id", job.id),
        ("name", job.name),
        ("origin", ORIGIN_TEXT[told.origin.value]),
        ("queue", job.queue),
        ("state", f"{told.state.value} (status {job.status.value})"),
        ("attempts", _attempts(job)),
        ("run at", _instant(job.run_at)),
        ("enqueued at", _instant(job.enqueued_at)),
        ("finished at", _instant(job.finished_at)),
        ("progress", "-" if job.progress is None else json_text(job.progress).replace("\n", " ")),
        ("last error", _error(job.last_error_code, job.last_error_type)),
        ("tenant", job.tenant_id or "-"),
        ("actor", by.actor or f"- (its attempts run as {told.runs_as})"),
        (
            "correlation id",
            by.correlation_id or "- (enqueued outside any work: its attempts log the job's id)",
        ),
        ("traceparent", by.traceparent or "-"),
        ("payload", told.payload_shape),
    ]
    if told.timeout is not None:
        still = "" if job.status.finished else ", armed"
        fields.append(("fires", f"{_timeout_text(told.timeout)}{still}"))
    return fields


def _attempts_table(told: JobStory) -> None:
    history = told.history
    if not history:
        click.echo("no attempt recorded")
        return
    earlier = history[0].number - 1
    if earlier > 0:
        click.echo(f"attempts 1 to {earlier} are no longer kept")
    _table(
        ATTEMPT_COLUMNS,
        [
            (
                f"{attempt.number} (queued again)" if again else str(attempt.number),
                _instant(attempt.started_at),
                _instant(attempt.ended_at),
                attempt.worker or "-",
                attempt.outcome.value,
                _error(attempt.error_code, attempt.error_type),
            )
            for attempt, again in zip(history, queued_again(history), strict=True)
        ],
    )


def _timeout_text(timeout: ProcessTimeout) -> str:
    return (
        f"the timeout {timeout.timeout!r} of process {timeout.process!r}, instance "
        f"{timeout.instance!r}"
    )


def _list_row(job: StoredJob, now: datetime) -> tuple[str, ...]:
    return (
        job.id,
        job.name,
        job.queue,
        job.state(now).value,
        _attempts(job),
        _instant(job.enqueued_at),
        _instant(job.run_at),
        _instant(job.finished_at),
        _error(job.last_error_code, job.last_error_type),
        job.tenant_id or "-",
    )


def _counts_header(first: str) -> tuple[str, ...]:
    return (first, *(status.value.upper() for status in STATUS_COLUMNS))


def _counts_rows(rows: Mapping[str, Counts], total_label: str) -> list[tuple[str, ...]]:
    lines = [_counts_row(label, counts) for label, counts in rows.items()]
    return [*lines, _counts_row(total_label, total(rows.values()))]


def _name_rows(view: StatsView) -> list[tuple[str, ...]]:
    return [
        *_counts_rows(view.application, "(application)"),
        *_counts_rows(view.library, "(library: process timeouts, commands' outbox)"),
    ]


def _counts_row(label: str, counts: Counts) -> tuple[str, ...]:
    return (label, *(str(counts.get(status, 0)) for status in STATUS_COLUMNS))


def _attempts(job: StoredJob) -> str:
    return f"{job.attempts}/{job.max_attempts}"


def _error(code: str | None, kind: str | None) -> str:
    if code is None:
        return "-"
    return f"{code} ({kind or 'unknown type'})"


def _instant(at: datetime | None) -> str:
    return "-" if at is None else iso_ms(at)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """The rows in aligned columns, each cell's text ``printable``: it comes from the store."""
    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        click.echo("  ".join(cells).rstrip())
