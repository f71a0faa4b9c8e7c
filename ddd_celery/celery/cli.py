"""``celery -A app jobs list | next | history | run-now``: the operator's commands.

Installed through the ``celery.commands`` entry point, so the commands take ``-A`` like every
other ``celery`` command and read the jobs ``install_jobs`` put on the app. Each fails the same
way (``JobsCommand``): a store that cannot be asked is one line and exit 1.

A fresh process has handled no occurrence itself: beat and the workers have. ``list`` shows what
the shared stores can tell (the run in progress from the run state, the last occurrence handled
from the checkpoints and the last runs, the latest outcome from the last runs), says when it
cannot know, and exits 1 naming the store it could not ask and why; ``history`` shows a job's
recent records. Instants are shown in UTC and on the clocks of the job's zone, which is what a
cron is read on.
"""

from __future__ import annotations

import gc
import json
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import click

from ddd_celery.celery.background.cli import background, printable
from ddd_celery.celery.cli_errors import JOBS_GROUP, JobsCommand, why
from ddd_celery.celery.cli_pause import pause_command, registry_of, resume_command
from ddd_celery.celery.cli_web import web_command
from ddd_celery.celery.describe import next_run_at
from ddd_celery.celery.registry import CeleryJob, CeleryJobs
from ddd_celery.celery.run_now import (
    NotAnOccurrenceError,
    OccurrenceNotSentError,
    SentOccurrence,
    run_here,
    send_to_workers,
)
from ddd_celery.celery.views import (
    CHECKPOINTS,
    LAST_RUNS,
    PAUSES,
    RUN_STATE,
    UNKNOWN,
    JobsKnown,
    local_time,
    next_instants,
    on_schedule,
    zone_of,
)
from ddd_celery.declarations.schedule import CronRule, IntervalRule
from ddd_celery.kernel.instants import iso_ms, typed_instant
from ddd_celery.scheduling.errors import UnknownJobError
from ddd_celery.scheduling.outcomes import JobRun
from ddd_celery.scheduling.pauses import Pause
from ddd_celery.scheduling.run_state import InMemoryJobRunState

NEVER_BY_TIME = "never by time"
COLUMNS = (
    "NAME",
    "SCHEDULE",
    "ENABLED",
    "QUEUE",
    "NEXT RUN (UTC)",
    "NEXT RUN (JOB'S ZONE)",
    "RUNNING",
    "LAST HANDLED",
    "LAST OUTCOME",
)
HISTORY_COLUMNS = (
    "SCHEDULED AT (UTC)",
    "OUTCOME",
    "ERROR",
    "STARTED AT (UTC)",
    "DURATION",
    "CORRELATION ID",
    "TENANT",
    "NOTE",
)
OFF_SCHEDULE = "off schedule"
"""NOTE of a record whose instant is not one of the schedule's: a ``run-now`` without ``--at``
(run at the instant it was asked), or an occurrence of a schedule since changed."""
PAUSED_LISTED = 20
"""How many paused jobs the table's notes name one by one; ``--json`` gives every pause."""
NEXT_COUNT = 5
HISTORY_COUNT = 20


@click.group(name=JOBS_GROUP)
@click.option(
    "--traceback",
    "show_traceback",
    is_flag=True,
    help="When a command fails, print the traceback above its one-line error.",
)
@click.pass_context
def jobs(ctx: click.Context, show_traceback: bool) -> None:
    """The scheduled jobs installed on the app: list them, show their next runs and their
    history, run one now."""
    ctx.meta["ddd_celery.traceback"] = show_traceback


jobs.add_command(background)
jobs.add_command(pause_command)
jobs.add_command(resume_command)
jobs.add_command(web_command)


@jobs.command(name="list", cls=JobsCommand)
@click.option("--json", "as_json", is_flag=True, help="Print the jobs as JSON.")
@click.pass_context
def list_jobs(ctx: click.Context, as_json: bool) -> None:
    """Each job: schedule, enabled (or paused), queue, next run, run in progress, last handled,
    last outcome.

    Exits 1 when a store could not be asked (the table still lists what is known).
    """
    registry = registry_of(ctx)
    now = registry.clock.now()
    with _cycles_not_collected():
        known = JobsKnown.read(registry, list(registry.jobs.values()))
        lister = _Lister(now, known)
        if as_json:
            listed = [lister.json(job) for job in registry.jobs.values()]
            click.echo(_as_json(ctx, now, listed, registry, known))
        elif not registry.jobs:
            click.echo(_no_jobs(ctx))
        else:
            _table([COLUMNS, *(lister.row(job) for job in registry.jobs.values())])
            for note in [*lister.paused_notes(), *_notes(registry)]:
                click.echo(note)
    for store, (adapter, error) in known.unavailable.items():
        click.echo(f"The {store} ({adapter}) could not be asked: {why(error)}", err=True)
    if known.unavailable:
        ctx.exit(1)


@jobs.command(name="next", cls=JobsCommand)
@click.argument("name")
@click.option(
    "--count",
    default=NEXT_COUNT,
    show_default=True,
    type=click.IntRange(min=1, max=1000),
    help="How many instants to show.",
)
@click.pass_context
def next_command(ctx: click.Context, name: str, count: int) -> None:
    """The next instants of the job NAME, in UTC and on the clocks of its zone.

    The way to check a cron across a change of daylight saving time before it bites: a time
    that does not exist that day is skipped, one that occurs twice runs once.
    """
    registry = registry_of(ctx)
    job = _job(registry, name)
    zone = zone_of(job)
    click.echo(f"{job.name}: {job.schedule.description}")
    if not job.schedule.options.enabled:
        click.echo("disabled: never started by time; these are the instants it would have")
    rows: list[tuple[str, ...]] = [("UTC", f"{zone} (the job's zone)")]
    for at in next_instants(job, registry.clock.now(), count):
        rows.append((iso_ms(at), local_time(at, zone)))
    _table(rows)


class InstantType(click.ParamType):  # type: ignore[type-arg]
    """An ISO 8601 instant with its UTC offset (``Z`` for UTC), read as an aware ``datetime``."""

    name = "INSTANT"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, datetime):
            return value
        try:
            at = datetime.fromisoformat(str(value))
        except ValueError:
            self.fail(f"{value!r} is not an ISO 8601 instant such as 2026-03-02T06:00:00Z")
        if at.tzinfo is None:
            self.fail(f"{value!r} has no UTC offset: write Z for UTC, or +02:00 say")
        try:
            return typed_instant(at, str(value))
        except ValueError as refused:
            self.fail(str(refused))


@jobs.command(name="history", cls=JobsCommand)
@click.argument("name")
@click.option(
    "--limit",
    default=HISTORY_COUNT,
    show_default=True,
    type=click.IntRange(min=1, max=1000),
    help="How many records to show, newest first (the store keeps a bounded number).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the records as JSON.")
@click.pass_context
def history_command(ctx: click.Context, name: str, limit: int, as_json: bool) -> None:
    """The last outcomes of the job NAME, newest first, as beats and workers recorded them.

    Every record but ``skipped-locked`` (that occurrence is another beat's, which records its
    real outcome). Exits 1 when the last runs are not kept or cannot be asked, 2 for a name no
    job has.
    """
    registry = registry_of(ctx)
    job = _job(registry, name)
    if registry.last_runs is None:
        click.echo(f"{name}: no history: {_NO_LAST_RUNS}", err=True)
        ctx.exit(1)
    runs = registry.last_runs.history(name, limit)
    if as_json:
        records = [_history_data(job, run) for run in runs]
        document = {"job": name, "schedule": job.schedule.description, "runs": records}
        click.echo(json.dumps(document, indent=2))
        return
    if not runs:
        click.echo(f"{name}: {job.schedule.description}; no outcome recorded yet")
        return
    shown = "the newest record" if len(runs) == 1 else f"the newest {len(runs)} records"
    click.echo(f"{name}: {job.schedule.description}; {shown}, newest first")
    _table([HISTORY_COLUMNS, *(_history_row(job, run) for run in runs)])


@jobs.command(name="run-now", cls=JobsCommand)
@click.argument("name")
@click.option(
    "--at",
    type=InstantType(),
    help="Replay the occurrence of INSTANT (ISO 8601 with its offset, 2026-03-02T06:00:00Z): "
    "refused unless it is an instant of the job's schedule that came.",
)
@click.option(
    "--on-workers",
    is_flag=True,
    help="Send the occurrence to the workers as beat does, under its lock "
    "job:<name>:<instant>, instead of running it here; without --at, the latest instant of "
    "the schedule.",
)
@click.option(
    "--traceback",
    "show_traceback",
    is_flag=True,
    help="On failure, print the error's message and traceback (they may quote data).",
)
@click.pass_context
def run_now_command(
    ctx: click.Context, name: str, at: datetime | None, on_workers: bool, show_traceback: bool
) -> None:
    """Run the job NAME once, in this process, as a worker would (no lock), or send it to the
    workers (``--on-workers``).

    Exits 0 when it succeeded (or was sent), 1 when it failed, was refused, could not be sent
    or its record could not be kept, 2 for a name no job has.
    """
    registry = registry_of(ctx)
    _job(registry, name)
    try:
        if on_workers:
            _sent(send_to_workers(ctx.obj.app, name, at=at))
            return
        here = run_here(registry, name, at=at)
    except TypeError as refused:  # a beat_schedule entry, or a system job beat runs
        raise click.UsageError(str(refused)) from None
    except (NotAnOccurrenceError, OccurrenceNotSentError) as refused:
        click.echo(f"ddd_celery: jobs run-now refused: {why(refused)}", err=True)
        ctx.exit(1)
    record, error = here.record, here.error
    replayed = "" if at is None else ", replayed"
    ran = (
        f"in {record.duration_ms or 0:.0f} ms (scheduled_at {iso_ms(record.scheduled_at)}"
        f"{replayed}, correlation id {record.correlation_id})"
    )
    if error is not None:
        # The code and type only by default, as the log line: an error's message may quote data.
        click.echo(f"{name} failed: {record.error_code} ({record.error_type}) {ran}", err=True)
        if show_traceback:
            click.echo("".join(traceback.format_exception(error)).rstrip(), err=True)
        else:
            click.echo("--traceback shows the error's message and traceback", err=True)
    else:
        click.echo(f"{name} succeeded {ran}")
    if here.unkept is not None:
        store = type(registry.last_runs).__name__
        click.echo(
            f"ddd_celery: jobs run-now: {name} {record.outcome.value} but its record could not "
            f"be kept in the last runs ({store}), so its history will not show it: "
            f"{why(here.unkept)}",
            err=True,
        )
    if error is not None or here.unkept is not None:
        ctx.exit(1)


def _sent(sent: SentOccurrence) -> None:
    at = iso_ms(sent.scheduled_at)
    lock = "" if sent.lock_key is None else f", lock {sent.lock_key}"
    if sent.task_id is None:
        behind = "" if sent.queued_behind is None else f" of {iso_ms(sent.queued_behind)}"
        click.echo(
            f"{sent.job}: the occurrence of {at} is queued behind the run in progress{behind} "
            f"(overlap queue{lock}): the worker that ends that run sends it"
        )
        return
    click.echo(
        f"{sent.job}: sent the occurrence of {at} to the workers: task {sent.task_id}, "
        f"queue {sent.queue or '(the default)'}, correlation id {sent.correlation_id}{lock}, "
        f"expires {iso_ms(sent.expires_at)}"
    )
    click.echo(f"`jobs history {sent.job}` shows its outcome once a worker has run it")


def _history_row(job: CeleryJob, run: JobRun) -> tuple[str, ...]:
    """A record as a row: what the store holds goes through ``printable``."""
    error = "-"
    if run.error_code or run.error_type:
        error = printable(f"{run.error_code or '-'} ({run.error_type or '-'})")
    return (
        iso_ms(run.scheduled_at),
        run.outcome.value,
        error,
        "-" if run.started_at is None else iso_ms(run.started_at),
        "-" if run.duration_ms is None else _duration(run.duration_ms),
        printable(run.correlation_id or "-"),
        printable(run.tenant_id or "-"),
        "" if on_schedule(job, run.scheduled_at) else OFF_SCHEDULE,
    )


def _duration(ms: float) -> str:
    """``212 ms``; a tenth of a millisecond below 10 ms, where a whole number says little."""
    return f"{ms:.1f} ms" if ms < 10 else f"{ms:.0f} ms"


def _history_data(job: CeleryJob, run: JobRun) -> dict[str, Any]:
    return {
        "scheduled_at": iso_ms(run.scheduled_at),
        "outcome": run.outcome.value,
        "error_code": run.error_code,
        "error_type": run.error_type,
        "started_at": None if run.started_at is None else iso_ms(run.started_at),
        "duration_ms": run.duration_ms,
        "correlation_id": run.correlation_id,
        "tenant_id": run.tenant_id,
        "on_schedule": on_schedule(job, run.scheduled_at),
    }


@contextmanager
def _cycles_not_collected() -> Iterator[None]:
    """The cyclic garbage collector held while a listing reads the stores and builds its rows.

    Ten thousand jobs make some 200,000 objects that live until the listing is written, none in
    a cycle; the collections they set off walk the whole app, and were a third of the listing's
    CPU at 10,000 jobs. Reference counting frees them all the same.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _job(registry: CeleryJobs, name: str) -> CeleryJob:
    try:
        return registry.job(name)
    except UnknownJobError:
        known = ", ".join(sorted(registry.jobs)) or "none"
        raise click.BadParameter(
            f"no job is named {name!r}; the jobs are: {known}", param_hint="NAME"
        ) from None


@dataclass(slots=True)
class _Scheduled:
    """What every job on one schedule shows alike, in the table and in ``--json``."""

    description: str
    enabled: bool
    time_zone: str
    next_utc: str | None
    next_local: str | None
    _json_lines: tuple[str, str] | None = field(default=None, init=False)

    def json_lines(self) -> tuple[str, str]:
        """The lines of ``schedule`` to ``enabled``, and those of ``next_run_at`` and
        ``next_run_local``, in a job's JSON object: encoded the first time ``--json`` asks."""
        if self._json_lines is None:
            self._json_lines = (
                _json_lines(
                    schedule=self.description, time_zone=self.time_zone, enabled=self.enabled
                ),
                _json_lines(next_run_at=self.next_utc, next_run_local=self.next_local),
            )
        return self._json_lines


class _Lister:
    """The cells of one listing's jobs, what jobs share worked out once.

    The next instant and its two clocks once per distinct schedule (rule and enabled), the text
    of an instant once per distinct instant: ten thousand jobs on a few schedules cost a few cron
    evaluations and a look-up per cell, not ten thousand of each.
    """

    def __init__(self, now: datetime, known: JobsKnown) -> None:
        self._now = now
        self._known = known
        self._schedules: dict[tuple[IntervalRule | CronRule, bool], _Scheduled] = {}
        self._instants: dict[datetime, str] = {}
        self._encoded: dict[object, str] = {}

    def row(self, job: CeleryJob) -> tuple[str, ...]:
        """The job's row of the table."""
        scheduled = self._scheduled(job)
        return (
            job.name,
            scheduled.description,
            self._enabled(job, scheduled.enabled),
            job.queue or ("(runs in beat)" if job.inline is not None else "(task's own)"),
            scheduled.next_utc or NEVER_BY_TIME,
            scheduled.next_local or NEVER_BY_TIME,
            self._running(job)[0],
            self._last_handled(job)[0],
            self._last_outcome_text(job),
        )

    def json(self, job: CeleryJob) -> str:
        """The job's object in the ``--json`` document, as ``json.dumps(..., indent=2)`` writes
        it there.

        Each distinct value is encoded once: with an indent, the standard encoder is pure Python
        and took 0.2 s for ten thousand jobs, most of whose values repeat from job to job.
        """
        json_schedule, json_next = self._scheduled(job).json_lines()
        return (
            f'    {{\n      "name": {json.dumps(job.name)},\n{json_schedule}'
            f'      "queue": {self._json(job.queue)},\n{json_next}'
            f'      "paused": {self._json(self._paused_data(job))},\n'
            f'      "running": {self._json(self._running(job)[1])},\n'
            f'      "last_handled": {self._json(self._last_handled(job)[1])},\n'
            f'      "last_outcome": {self._json(self._last_outcome_data(job))}\n    }}'
        )

    def paused_notes(self) -> list[str]:
        """A line per paused job, who paused it, since when and why (texts from the store,
        ``printable``); past ``PAUSED_LISTED``, one line says how many more."""
        paused = sorted((self._known.pauses or {}).values(), key=lambda pause: pause.job)
        notes = [
            f"{pause.job} is paused since {iso_ms(pause.at)} by {printable(pause.by)}"
            + ("" if pause.reason is None else f": {printable(pause.reason)}")
            + f" (`jobs resume {pause.job}` resumes it)"
            for pause in paused[:PAUSED_LISTED]
        ]
        if len(paused) > PAUSED_LISTED:
            notes.append(f"{len(paused) - PAUSED_LISTED} more jobs are paused; --json lists them")
        return notes

    def _enabled(self, job: CeleryJob, enabled: bool) -> str:
        """``yes`` or ``no``, as the wiring decides; ``paused`` for a job an operator paused."""
        if not isinstance(self._known.pause(job), Pause):
            return "yes" if enabled else "no"
        return "paused" if enabled else "no (paused)"

    def _paused_data(self, job: CeleryJob) -> Any:
        pause = self._known.pause(job)
        if not isinstance(pause, Pause):
            return pause
        return {"by": pause.by, "at": self._instant(pause.at), "reason": pause.reason}

    def _scheduled(self, job: CeleryJob) -> _Scheduled:
        schedule = job.schedule
        key = (schedule.rule, schedule.options.enabled)
        scheduled = self._schedules.get(key)
        if scheduled is None:
            zone = zone_of(job)
            at = next_run_at(job, self._now)
            scheduled = self._schedules[key] = _Scheduled(
                schedule.description,
                schedule.options.enabled,
                str(zone),
                None if at is None else self._instant(at),
                None if at is None else local_time(at, zone),
            )
        return scheduled

    def _json(self, value: str | dict[str, Any] | None) -> str:
        """``value`` as JSON at a job's depth, encoded once per distinct value."""
        key = tuple(value.items()) if isinstance(value, dict) else value
        text = self._encoded.get(key)
        if text is None:
            text = self._encoded[key] = _json(value, 3)
        return text

    def _instant(self, at: datetime) -> str:
        text = self._instants.get(at)
        if text is None:
            text = self._instants[at] = iso_ms(at)
        return text

    def _running(self, job: CeleryJob) -> tuple[str, Any]:
        return self._cell(self._known.running(job), "no")

    def _last_handled(self, job: CeleryJob) -> tuple[str, Any]:
        return self._cell(self._known.last_handled(job), "never")

    def _cell(self, known: datetime | str | None, none: str) -> tuple[str, Any]:
        """The table's text and the JSON value of an instant the stores told, a word for why
        they could not, or None (``none`` in the table)."""
        if known is None:
            return none, None
        text = known if isinstance(known, str) else self._instant(known)
        return text, text

    def _last_outcome_text(self, job: CeleryJob) -> str:
        run = self._known.last_run(job)
        if run is None or isinstance(run, str):
            return run or "none yet"
        return _outcome(run, self._instant(run.scheduled_at))

    def _last_outcome_data(self, job: CeleryJob) -> Any:
        run = self._known.last_run(job)
        if run is None or isinstance(run, str):
            return run
        return {
            "outcome": run.outcome.value,
            "error_code": run.error_code,
            "error_type": run.error_type,
            "scheduled_at": self._instant(run.scheduled_at),
        }


def _outcome(run: JobRun, at: str) -> str:
    """``failed JOB_TIMEOUT 2026-03-02T06:00:00.000Z``: the code, never the message, as logged;
    ``printable``, as it comes from the last runs' store."""
    code = run.error_code
    return f"{run.outcome.value} {printable(code)} {at}" if code else f"{run.outcome.value} {at}"


def _table(rows: list[tuple[str, ...]]) -> None:
    """The rows in aligned columns, written at once: ten thousand jobs are one write."""
    widths = [max(map(len, column)) for column in zip(*rows, strict=True)]
    line = "  ".join(f"{{:<{width}}}" for width in widths).format
    click.echo("\n".join([line(*row).rstrip() for row in rows]))


def _no_jobs(ctx: click.Context) -> str:
    return (
        f"No job is installed on app {getattr(ctx.obj.app, 'main', None)!r}. "
        "If install_jobs(app, jobs=collect_scheduled_jobs('<context>')) names your contexts, "
        "check that each context folder, and each folder down to the job's module, is a package "
        "(holds an __init__.py) and that the job's class is decorated with @scheduled."
    )


def _as_json(
    ctx: click.Context,
    now: datetime,
    listed: list[str],
    registry: CeleryJobs,
    known: JobsKnown,
) -> str:
    """The listing as ``json.dumps(..., indent=2)`` writes it, each job's object given as text."""
    adapters = {
        RUN_STATE: registry.run_state,
        CHECKPOINTS: registry.checkpoints,
        LAST_RUNS: registry.last_runs,
        PAUSES: registry.pauses,
    }
    asked = {
        name.replace(" ", "_"): {
            "adapter": None if adapter is None else type(adapter).__name__,
            "unavailable": (why(known.unavailable[name][1]) if name in known.unavailable else None),
        }
        for name, adapter in adapters.items()
    }
    jobs = "[\n" + ",\n".join(listed) + "\n  ]" if listed else "[]"
    return (
        f'{{\n  "app": {_json(getattr(ctx.obj.app, "main", None), 1)},\n'
        f'  "now": {_json(iso_ms(now), 1)},\n'
        f'  "jobs": {jobs},\n'
        f'  "stores": {_json(asked, 1)}\n}}'
    )


def _json_lines(**values: Any) -> str:
    """The lines of ``values`` in a job's JSON object, each ending with its comma."""
    return "".join(
        f"      {json.dumps(key)}: {_json(value, 3)},\n" for key, value in values.items()
    )


def _json(value: Any, depth: int) -> str:
    """``value`` as ``json.dumps(..., indent=2)`` writes it ``depth`` levels down a document.

    A JSON text holds no line break but those of its indent, so each one takes the indent of
    the depth.
    """
    if not isinstance(value, dict | list):
        return json.dumps(value)
    return json.dumps(value, indent=2).replace("\n", "\n" + "  " * depth)


def _notes(registry: CeleryJobs) -> list[str]:
    how = "set app.conf.ddd_celery_redis_url (a Redis broker is used by default) or pass"
    notes: list[str] = []
    if isinstance(registry.run_state, InMemoryJobRunState):
        notes.append(
            f"RUNNING is {UNKNOWN}: the run state is in process memory; "
            f"{how} install_jobs(run_state=RedisJobRunState(...)) to share it."
        )
    if registry.checkpoints is None:
        known = UNKNOWN if registry.last_runs is None else "the last outcome's instant only"
        notes.append(
            f"LAST HANDLED is {known}: no checkpoints; "
            f"{how} install_jobs(checkpoints=RedisJobCheckpoints(...)) to keep them."
        )
    if registry.last_runs is None:
        notes.append(f"LAST OUTCOME is {UNKNOWN}: {_NO_LAST_RUNS}")
    return notes


_NO_LAST_RUNS = (
    "no last runs; set app.conf.ddd_celery_redis_url (a Redis broker is used by default) or "
    "pass install_jobs(last_runs=RedisJobLastRuns(...)) to keep them."
)
