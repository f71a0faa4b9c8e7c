"""The scheduled jobs: a page of them, one job's page, pause, resume, run now.

What is shown is what ``celery jobs list``, ``next`` and ``history`` show, read through the same
calls (``celery/views.py``): the registry ``install_jobs`` wired, each shared store asked once
for the jobs of the page. A page holds ``page_size`` jobs in name order, so ten thousand jobs
cost one page's reads. The scheduled jobs are the application's, not a tenant's: a viewer
limited to a tenant is refused them, as their history holds every tenant's runs.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ddd_celery.celery.describe import next_run_at
from ddd_celery.celery.registry import CeleryJob, CeleryJobs, jobs_of
from ddd_celery.celery.run_now import (
    NotAnOccurrenceError,
    OccurrenceNotSentError,
    SentOccurrence,
    send_to_workers,
)
from ddd_celery.celery.views import (
    LAST_RUNS,
    JobsKnown,
    NotPausableError,
    local_time,
    next_instants,
    on_schedule,
    pausable,
    shared_pauses,
    zone_of,
)
from ddd_celery.declarations.names import context_of
from ddd_celery.kernel.instants import iso_ms
from ddd_celery.scheduling.errors import UnknownJobError
from ddd_celery.scheduling.outcomes import JobRun
from ddd_celery.scheduling.pauses import Pause
from ddd_celery.web.access import Viewer
from ddd_celery.web.charts import outcomes_chart, series_of
from ddd_celery.web.core import CONFIRMED, PageError, Web, instant, json_response

HISTORY_ON_PAGE = 20
"""Records of each job read for the list's strips and its chart."""
HISTORY_ON_JOB = 50
ON_DASHBOARD = 12
NEXT_ON_JOB = 5


@dataclass(frozen=True, slots=True)
class Row:
    """One job as the pages show it: every cell a text, a word when a store cannot tell."""

    job: CeleryJob
    context: str
    kind: str
    """``declared``, ``system`` (the relay, run in beat) or ``beat_schedule``."""
    zone: str
    next_at: datetime | None
    next_local: str | None
    running: str
    last_handled: str
    last_run: JobRun | None
    last_word: str | None
    """Why the last outcome is unknown (``unknown``, ``unavailable``, ``untracked``), or None."""
    pause: Pause | None
    pause_word: str | None
    recent: Sequence[JobRun]
    """The newest records first."""

    @property
    def name(self) -> str:
        return self.job.name

    @property
    def strip(self) -> list[tuple[str, str]]:
        """The recent outcomes oldest first, as (series, tooltip), for the list's strip."""
        return [
            (series_of(run.outcome), f"{run.outcome.value} {iso_ms(run.scheduled_at)}")
            for run in reversed(self.recent)
        ]


def kind_of(job: CeleryJob) -> str:
    if job.inline is not None:
        return "system"
    return "declared" if job.declared else "beat_schedule"


def rows(
    registry: CeleryJobs, jobs: Sequence[CeleryJob], now: datetime, history: int
) -> tuple[list[Row], JobsKnown]:
    """The rows of ``jobs``: each store asked once for them all, and ``history`` records of
    each job (a bounded read per job of the page; none for 0)."""
    known = JobsKnown.read(registry, jobs)
    recent: dict[str, list[JobRun]] = {}
    last_runs = registry.last_runs
    if history and last_runs is not None and LAST_RUNS not in known.unavailable:
        for job in jobs:
            try:
                recent[job.name] = last_runs.history(job.name, history)
            except Exception as error:
                known.unavailable.setdefault(LAST_RUNS, (type(last_runs).__name__, error))
                break
    found = []
    for job in jobs:
        zone = zone_of(job)
        next_at = next_run_at(job, now)
        running = known.running(job)
        handled = known.last_handled(job)
        run = known.last_run(job)
        pause = known.pause(job)
        found.append(
            Row(
                job=job,
                context=context_of(job.name) if "." in job.name else "-",
                kind=kind_of(job),
                zone=str(zone),
                next_at=next_at,
                next_local=None if next_at is None else local_time(next_at, zone),
                running=_word(running, "no"),
                last_handled=_word(handled, "never"),
                last_run=run if isinstance(run, JobRun) else None,
                last_word=run if isinstance(run, str) else None,
                pause=pause if isinstance(pause, Pause) else None,
                pause_word=pause if isinstance(pause, str) else None,
                recent=recent.get(job.name, ()),
            )
        )
    return found, known


def _word(value: datetime | str | None, none: str) -> str:
    if value is None:
        return none
    return value if isinstance(value, str) else iso_ms(value)


class SortedNames:
    """The app's job names in order, sorted once per set of jobs (the registry's mapping is
    replaced, never changed, when a job is added)."""

    def __init__(self) -> None:
        self._of: tuple[int, list[str]] | None = None

    def of(self, registry: CeleryJobs) -> list[str]:
        key = id(registry.jobs)
        if self._of is None or self._of[0] != key:
            self._of = (key, sorted(registry.jobs))
        return self._of[1]


def page_of(
    names: list[str], *, after: str | None, search: str | None, size: int
) -> tuple[list[str], str | None]:
    """The names after ``after`` (none: from the first) containing ``search``, ``size`` at
    most, and the cursor of the next page (None: the last)."""
    start = 0 if after is None else bisect.bisect_right(names, after)
    needle = (search or "").casefold()
    chosen: list[str] = []
    for index in range(start, len(names)):
        name = names[index]
        if needle and needle not in name.casefold():
            continue
        if len(chosen) == size:
            return chosen, chosen[-1]
        chosen.append(name)
    return chosen, None


class ScheduledPages:
    """The handlers of the scheduled jobs' pages."""

    def __init__(self, web: Web) -> None:
        self.web = web
        self.names = SortedNames()

    def routes(self) -> list[Route]:
        return [
            Route("/scheduled", self.list_page, name="scheduled"),
            Route("/scheduled/job", self.job_page, name="scheduled-job"),
            Route("/scheduled/pause", self.pause, methods=["POST"]),
            Route("/scheduled/resume", self.resume, methods=["POST"]),
            Route("/scheduled/run", self.run_now, methods=["POST"]),
            Route("/api/scheduled", self.list_json),
        ]

    def registry(self) -> CeleryJobs | None:
        """The app's scheduled jobs, None when ``install_jobs`` was never called."""
        try:
            return jobs_of(self.web.celery_app)
        except LookupError:
            return None

    def _viewer_registry(self, request: Request) -> tuple[Viewer, CeleryJobs | None]:
        viewer = self.web.viewer(request)
        if viewer.tenant_id is not None:
            raise PageError(
                403,
                "the scheduled jobs are the application's, not a tenant's: a viewer limited to "
                "a tenant sees that tenant's background jobs and process instances only",
            )
        return viewer, self.registry()

    def summary(self, registry: CeleryJobs, now: datetime) -> dict[str, Any]:
        """The first jobs in name order, for the dashboard (the list pages through them all)."""
        names, _ = page_of(self.names.of(registry), after=None, search=None, size=ON_DASHBOARD)
        jobs = [registry.jobs[name] for name in names]
        found, known = rows(registry, jobs, now, HISTORY_ON_PAGE)
        runs = [run for row in found for run in row.recent]
        return {
            "count": len(registry.jobs),
            "rows": found,
            "unavailable": known.unavailable,
            "chart": outcomes_chart(runs, f"Outcomes of the first {len(found)} jobs, over time"),
        }

    async def list_page(self, request: Request) -> Response:
        viewer, registry = self._viewer_registry(request)
        query = request.query_params
        search, after = query.get("q") or None, query.get("after") or None
        if registry is None:
            return self.web.render(request, viewer, "scheduled.html", {"installed": False})

        def read() -> dict[str, Any]:
            now = registry.clock.now()
            names, cursor = page_of(
                self.names.of(registry),
                after=after,
                search=search,
                size=self.web.settings.page_size,
            )
            jobs = [registry.jobs[name] for name in names]
            found, known = rows(registry, jobs, now, HISTORY_ON_PAGE)
            runs = [run for row in found for run in row.recent]
            return {
                "installed": True,
                "now": now,
                "rows": found,
                "count": len(registry.jobs),
                "search": search or "",
                "after": after,
                "cursor": cursor,
                "unavailable": known.unavailable,
                "chart": outcomes_chart(runs, "Outcomes of the jobs on this page, over time"),
            }

        model = await run_in_threadpool(read)
        return self.web.render(request, viewer, "scheduled.html", model, refresh=True)

    async def list_json(self, request: Request) -> Response:
        _, registry = self._viewer_registry(request)
        if registry is None:
            raise PageError(404, "no scheduled job is installed on this app")
        query = request.query_params

        def read() -> dict[str, Any]:
            now = registry.clock.now()
            names, cursor = page_of(
                self.names.of(registry),
                after=query.get("after") or None,
                search=query.get("q") or None,
                size=self.web.settings.page_size,
            )
            found, known = rows(registry, [registry.jobs[n] for n in names], now, 0)
            return {
                "now": iso_ms(now),
                "jobs": [_row_data(row) for row in found],
                "cursor": cursor,
                "unavailable": sorted(known.unavailable),
            }

        return json_response(await run_in_threadpool(read))

    async def job_page(self, request: Request) -> Response:
        viewer, registry = self._viewer_registry(request)
        name = request.query_params.get("name", "")
        if registry is None or name not in registry.jobs:
            raise PageError(404, f"no scheduled job is named {name!r}")
        job = registry.jobs[name]

        def read() -> dict[str, Any]:
            now = registry.clock.now()
            (row,), known = rows(registry, [job], now, HISTORY_ON_JOB)
            zone = zone_of(job)
            upcoming = [
                (iso_ms(at), local_time(at, zone)) for at in next_instants(job, now, NEXT_ON_JOB)
            ]
            return {
                "row": row,
                "now": now,
                "upcoming": upcoming,
                "history": [(run, on_schedule(job, run.scheduled_at)) for run in row.recent],
                "unavailable": known.unavailable,
                "chart": outcomes_chart(row.recent, f"Outcomes of {job.name}, over time"),
                "pausable": _pausable_why(registry, job),
                "runnable": job.declared,
                "declared_schedule": None
                if job.declared_schedule is None
                else job.declared_schedule.description,
            }

        model = await run_in_threadpool(read)
        # A page that reloads itself would wipe the pause form's reason as the operator types it.
        typing = viewer.may_act and model["pausable"] is None and model["row"].pause is None
        return self.web.render(request, viewer, "scheduled_job.html", model, refresh=not typing)

    # --- actions ------------------------------------------------------------------------

    async def pause(self, request: Request) -> Response:
        return await self._pause_or_resume(request, pause=True)

    async def resume(self, request: Request) -> Response:
        return await self._pause_or_resume(request, pause=False)

    async def _pause_or_resume(self, request: Request, *, pause: bool) -> Response:
        viewer = self.web.actor(request)
        form = await self.web.form(request)
        _, registry = self._viewer_registry(request)
        name = str(form.get("name", ""))
        reason = str(form.get("reason", "")).strip() or None
        action: Literal["pause", "resume"] = "pause" if pause else "resume"
        back = self.web.url(request, "/scheduled/job", name=name)
        if registry is None:
            raise PageError(404, f"no scheduled job is named {name!r}")
        try:
            job = pausable(registry, name, doing=action)
            pauses = shared_pauses(registry)
        except (UnknownJobError, NotPausableError) as refused:
            raise PageError(
                409 if isinstance(refused, NotPausableError) else 404, str(refused)
            ) from None
        if form.get("confirmed") != CONFIRMED:
            what = (
                [
                    f"Every beat records the next occurrences of {name} skipped-paused instead "
                    "of sending them, until it is resumed.",
                ]
                if pause
                else [f"The next occurrence of {name} runs."]
            )
            fields = [("name", name)] + ([("reason", reason)] if reason else [])
            warning = (
                None
                if job.schedule.options.enabled
                else "It is disabled by its settings: beat starts it by time only once enabled."
            )
            return self.web.confirm(
                request,
                viewer,
                action=f"/scheduled/{action}",
                verb=f"{action} it",
                title=f"{action.capitalize()} {name}?",
                what=what,
                fields=fields,
                back=back,
                warning=warning,
            )

        def act() -> str:
            if pause:
                now = registry.clock.now()
                kept = pauses.pause(name, by=viewer.name, at=now, reason=reason)
                return "paused" if (kept.by, kept.at) == (viewer.name, now) else "already-paused"
            return "resumed" if pauses.resume(name) is not None else "not-paused"

        answer = await run_in_threadpool(act)
        return self.web.acted(
            request,
            viewer,
            action=action,
            target=name,
            answer=answer,
            back=self.web.redirect(request, "/scheduled/job", name=name, done=answer),
            reason=reason,
        )

    async def run_now(self, request: Request) -> Response:
        viewer = self.web.actor(request)
        form = await self.web.form(request)
        _, registry = self._viewer_registry(request)
        name = str(form.get("name", ""))
        if registry is None or name not in registry.jobs:
            raise PageError(404, f"no scheduled job is named {name!r}")
        if form.get("confirmed") != CONFIRMED:
            return self.web.confirm(
                request,
                viewer,
                action="/scheduled/run",
                verb="send it",
                title=f"Run {name} now, on the workers?",
                what=[
                    "The latest occurrence of its schedule is sent to the workers as beat sends "
                    "it: under its lock, so no beat sends it again.",
                    "Its outcome shows in its history once a worker has run it.",
                ],
                fields=[("name", name)],
                back=self.web.url(request, "/scheduled/job", name=name),
            )

        def act() -> SentOccurrence:
            return send_to_workers(self.web.celery_app, name)

        try:
            sent = await run_in_threadpool(act)
        except TypeError as refused:  # a beat_schedule entry, or a system job beat runs
            raise PageError(409, str(refused)) from None
        except (NotAnOccurrenceError, OccurrenceNotSentError) as refused:
            raise PageError(409, f"not sent: {refused}") from None
        answer = "queued" if sent.task_id is None else "sent"
        return self.web.acted(
            request,
            viewer,
            action="run-now",
            target=name,
            answer=answer,
            back=self.web.redirect(request, "/scheduled/job", name=name, done=answer),
            scheduled_at=iso_ms(sent.scheduled_at),
            task_id=sent.task_id,
            correlation_id=sent.correlation_id,
        )


def _pausable_why(registry: CeleryJobs, job: CeleryJob) -> str | None:
    """None when the job can be paused from here, else why not."""
    try:
        pausable(registry, job.name)
        shared_pauses(registry)
    except NotPausableError as refused:
        return str(refused)
    return None


def _row_data(row: Row) -> dict[str, Any]:
    run = row.last_run
    return {
        "name": row.name,
        "context": row.context,
        "kind": row.kind,
        "schedule": row.job.schedule.description,
        "time_zone": row.zone,
        "enabled": row.job.schedule.options.enabled,
        "queue": row.job.queue,
        "next_run_at": instant(row.next_at) if row.next_at else None,
        "next_run_local": row.next_local,
        "running": row.running,
        "last_handled": row.last_handled,
        "last_outcome": row.last_word
        if run is None
        else {
            "outcome": run.outcome.value,
            "error_code": run.error_code,
            "error_type": run.error_type,
            "scheduled_at": iso_ms(run.scheduled_at),
        },
        "paused": row.pause_word
        if row.pause is None
        else {"by": row.pause.by, "at": iso_ms(row.pause.at), "reason": row.pause.reason},
    }
