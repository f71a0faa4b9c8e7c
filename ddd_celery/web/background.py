"""The background jobs: a page of them by state and filters, one job's story, retry, cancel.

Every read is a call of ``ddd_celery.background.operations`` or of the ``JobStore`` port, as
``celery jobs background`` makes it: a page is one ``list_page`` with its cursor, the counts are
``stats()``'s counters, a job is ``find``. A viewer limited to a tenant has that tenant given
to every call (a filter for another tenant is refused) and sees no count: the counters are the
whole store's. A payload, a checkpoint and a progress show as their shape unless the page was
made with ``show_payloads``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ddd_celery.background.operations import (
    CANCELLABLE_STATES,
    Answer,
    JobStory,
    Selection,
    StatsView,
    cancel_job,
    json_text,
    page_data,
    parse_since,
    payload_shape,
    retry_dead_job,
    retry_selected,
    stats_view,
    story,
    total,
)
from ddd_celery.background.store import JobFilter, JobPage, JobState, JobStatus
from ddd_celery.celery.background.registry import BackgroundJobs, background_jobs_of
from ddd_celery.kernel.instants import iso_ms
from ddd_celery.web.access import Viewer
from ddd_celery.web.charts import NARROW, Bucket, bucketed, name_bars, stacked_bars
from ddd_celery.web.core import CONFIRMED, PageError, Web, json_response

logger = logging.getLogger("ddd_celery.web")

MAX_LIMIT = 200
COUNTS_MAX_AGE_S = 5.0
"""How old the counts a page shows may be (they are read again in the background after)."""
MAX_SELECTED = 500
"""The most jobs one "retry selected" queues: a page's worth, never the whole store."""
RECENT = 200
"""Finished jobs of each state read for the chart of recent throughput: one page each."""
NAMES_CHARTED = 12
NAME_SERIES = ("succeeded", "running", "queued", "retrying", "dead", "cancelled")
STATUS_SERIES = {
    JobStatus.SUCCEEDED: "succeeded",
    JobStatus.RUNNING: "running",
    JobStatus.QUEUED: "queued",
    JobStatus.FAILED: "retrying",
    JobStatus.DEAD: "dead",
    JobStatus.CANCELLED: "cancelled",
}
FILTERS = ("state", "name", "queue", "tenant", "enqueued_since", "finished_since")


def _counts_series(counts: Mapping[JobStatus, int]) -> dict[str, int]:
    return {STATUS_SERIES[status]: count for status, count in counts.items()}


def name_chart(view: StatsView) -> Any:
    """The application's job names with the most jobs, each name's jobs by status."""
    ranked = sorted(view.application.items(), key=lambda item: -sum(item[1].values()))
    rows = [(name, _counts_series(counts)) for name, counts in ranked[:NAMES_CHARTED]]
    return name_bars(rows, NAME_SERIES, "Jobs kept per job name, by status")


def throughput_chart(store_page: Any, now: datetime, tenant_id: str | None) -> Any:
    """The latest ``RECENT`` succeeded and ``RECENT`` dead jobs by when they finished."""
    instants: list[tuple[datetime, str]] = []
    for state, series in ((JobState.SUCCEEDED, "succeeded"), (JobState.DEAD, "dead")):
        page: JobPage = store_page(
            JobFilter(state=state, tenant_id=tenant_id), now=now, limit=RECENT
        )
        instants.extend((job.finished_at, series) for job in page.jobs if job.finished_at)
    buckets: list[Bucket] = bucketed(instants)
    return stacked_bars(
        buckets,
        ("succeeded", "dead"),
        f"Throughput and failures: the latest {RECENT} succeeded and dead jobs, by when they "
        "finished",
        width=NARROW,
    )


class CachedStats:
    """The store's counts as the pages show them: read again at most every ``max_age_s``, in a
    thread of their own once they were read, the pages meanwhile showing the last ones read.

    Counting is the one read of a page that grows with the store (``SqlJobStore`` counts on its
    index: most of a second at a million jobs), and several operators' pages reload every few
    seconds: they would count it over and over. Only the first page waits for a count.
    """

    def __init__(self, max_age_s: float) -> None:
        self._max_age_s = max_age_s
        self._mutex = threading.Lock()
        self._kept: tuple[float, datetime, StatsView] | None = None
        self._counting = False

    def view(self, registry: BackgroundJobs) -> tuple[StatsView, datetime]:
        """The counts and when they were read."""
        with self._mutex:
            kept = self._kept
            stale = kept is None or time.monotonic() - kept[0] >= self._max_age_s
            recount = stale and kept is not None and not self._counting
            if recount:
                self._counting = True
        if kept is None:
            return self._count(registry)
        if recount:
            threading.Thread(target=self._recount, args=(registry,), daemon=True).start()
        return kept[2], kept[1]

    def _count(self, registry: BackgroundJobs) -> tuple[StatsView, datetime]:
        at = registry.clock.now()
        view = stats_view(registry.store, registry.origins())
        with self._mutex:
            self._kept = (time.monotonic(), at, view)
        return view, at

    def _recount(self, registry: BackgroundJobs) -> None:
        try:
            self._count(registry)
        except Exception:  # the store is down: the pages' own reads say so; counted again later
            logger.debug("the counts of the background jobs could not be read", exc_info=True)
        finally:
            with self._mutex:
                self._counting = False


class BackgroundPages:
    """The handlers of the background jobs' pages."""

    def __init__(self, web: Web) -> None:
        self.web = web
        self.stats = CachedStats(COUNTS_MAX_AGE_S)

    def routes(self) -> list[Route]:
        return [
            Route("/background", self.list_page, name="background"),
            Route("/background/job", self.job_page, name="background-job"),
            Route("/background/cancel", self.cancel, methods=["POST"]),
            Route("/background/retry", self.retry, methods=["POST"]),
            Route("/api/background/jobs", self.list_json),
            Route("/api/background/job", self.job_json),
            Route("/api/background/stats", self.stats_json),
        ]

    def registry(self) -> BackgroundJobs | None:
        try:
            return background_jobs_of(self.web.celery_app)
        except LookupError:
            return None

    def summary(self, registry: BackgroundJobs, viewer: Viewer) -> dict[str, Any]:
        """The counts and charts of the dashboard."""
        now = registry.clock.now()
        counts = None
        chart = None
        counted_at = None
        if viewer.tenant_id is None:
            view, counted_at = self.stats.view(registry)
            counts = _status_counts(view)
            chart = name_chart(view)
        return {
            "counts": counts,
            "counted_at": counted_at,
            "names_chart": chart,
            "throughput_chart": throughput_chart(registry.store.list_page, now, viewer.tenant_id),
        }

    def _filter(
        self, viewer: Viewer, query: Mapping[str, str], now: datetime
    ) -> tuple[JobFilter, dict[str, str]]:
        """The query's filters as a ``JobFilter`` (the viewer's tenant imposed), and as given."""
        given = {key: query.get(key, "").strip() for key in FILTERS}
        tenant = given["tenant"] or None
        if viewer.tenant_id is not None:
            if tenant is not None and tenant != viewer.tenant_id:
                raise PageError(403, "you see the jobs of your own tenant only")
            tenant = viewer.tenant_id
        since: dict[str, datetime | None] = {}
        for key in ("enqueued_since", "finished_since"):
            try:
                since[key] = parse_since(given[key], now) if given[key] else None
            except ValueError as error:
                raise PageError(400, f"{key.replace('_', ' ')}: {error}") from None
        try:
            state = JobState(given["state"]) if given["state"] else None
        except ValueError:
            raise PageError(400, f"no state is named {given['state']!r}") from None
        where = JobFilter(
            state=state,
            name=given["name"] or None,
            queue=given["queue"] or None,
            tenant_id=tenant,
            enqueued_since=since["enqueued_since"],
            finished_since=since["finished_since"],
        )
        return where, given

    def _installed(self) -> BackgroundJobs:
        registry = self.registry()
        if registry is None:
            raise PageError(404, "no background job is installed on this app")
        return registry

    async def list_page(self, request: Request) -> Response:
        viewer = self.web.viewer(request)
        registry = self.registry()
        if registry is None:
            return self.web.render(request, viewer, "background.html", {"installed": False})
        query = request.query_params
        searched = query.get("id", "").strip()
        cursor = query.get("cursor") or None
        limit = _limit(query.get("limit"), self.web.settings.page_size)

        def read() -> dict[str, Any]:
            now = registry.clock.now()
            if searched:
                job = registry.store.find(searched, tenant_id=viewer.tenant_id)
                if job is not None:
                    return {"found": searched}
            where, given = self._filter(viewer, query, now)
            try:
                page = registry.store.list_page(where, now=now, limit=limit, cursor=cursor)
            except ValueError as error:
                raise PageError(400, f"this page cannot be read: {error}") from None
            counts = counted_at = None
            if viewer.tenant_id is None:
                view, counted_at = self.stats.view(registry)
                counts = _status_counts(view)
            origins = registry.origins()
            return {
                "installed": True,
                "now": now,
                "jobs": [(job, job.state(now), origins.of(job.name)) for job in page.jobs],
                "cursor": page.cursor,
                "given": given,
                "limit": limit,
                "counts": counts,
                "counted_at": counted_at,
                "states": [state.value for state in JobState],
                "not_found": searched or None,
            }

        model = await run_in_threadpool(read)
        if "found" in model:
            return self.web.redirect(request, "/background/job", id=model["found"])
        selectable = viewer.may_act and any(state is JobState.DEAD for _, state, _ in model["jobs"])
        model["selectable"] = selectable
        model["filters"] = {key: value for key, value in model["given"].items() if value}
        return self.web.render(request, viewer, "background.html", model, refresh=not selectable)

    async def job_page(self, request: Request) -> Response:
        viewer = self.web.viewer(request)
        registry = self._installed()
        job_id = request.query_params.get("id", "")
        told = await run_in_threadpool(self._story, registry, viewer, job_id)
        state = told.state
        model = {
            "told": told,
            "job": told.job,
            "fields": self._fields(told),
            "cancellable": state in CANCELLABLE_STATES,
            "retryable": state is JobState.DEAD,
            "payload": self._shown(told.job.payload, told.payload_shape),
            "checkpoint": self._shown(told.job.checkpoint, None),
        }
        return self.web.render(
            request, viewer, "background_job.html", model, refresh=not told.job.status.finished
        )

    def _story(self, registry: BackgroundJobs, viewer: Viewer, job_id: str) -> JobStory:
        told = story(
            registry.store,
            job_id,
            tenant_id=viewer.tenant_id,
            now=registry.clock.now(),
            origins=registry.origins(),
        )
        if told is None:
            raise PageError(404, f"no background job has the id {job_id!r}")
        return told

    def _shown(self, value: Any, shape: str | None) -> str:
        """A stored value as the page shows it: JSON when payloads are shown, else its shape."""
        if value is None:
            return "-"
        if self.web.settings.show_payloads:
            return json_text(value)
        return shape if shape is not None else payload_shape(value)

    @staticmethod
    def _fields(told: JobStory) -> list[tuple[str, str]]:
        job, by = told.job, told.job.enqueued_by
        fields = [
            ("id", job.id),
            ("name", job.name),
            ("origin", told.origin.value),
            ("queue", job.queue),
            ("state", f"{told.state.value} (status {job.status.value})"),
            ("attempts", f"{job.attempts}/{job.max_attempts}"),
            ("run at", _instant(job.run_at)),
            ("enqueued at", _instant(job.enqueued_at)),
            ("finished at", _instant(job.finished_at)),
            ("lease expires at", _instant(job.lease_expires_at)),
            ("last error", _error(job.last_error_code, job.last_error_type)),
            ("tenant", job.tenant_id or "-"),
            ("actor", by.actor or f"- (its attempts run as {told.runs_as})"),
            (
                "correlation id",
                by.correlation_id or "- (enqueued outside any work: its attempts log the job's id)",
            ),
            ("traceparent", by.traceparent or "-"),
            ("idempotency key", "-" if job.idempotency_key is None else "set"),
        ]
        if told.timeout is not None:
            still = "" if job.status.finished else ", armed"
            fields.append(
                (
                    "fires",
                    f"the timeout {told.timeout.timeout!r} of process {told.timeout.process!r}, "
                    f"instance {told.timeout.instance!r}{still}",
                )
            )
        return fields

    # --- JSON ---------------------------------------------------------------------------

    async def list_json(self, request: Request) -> Response:
        viewer = self.web.viewer(request)
        registry = self._installed()
        query = request.query_params
        limit = _limit(query.get("limit"), self.web.settings.page_size)

        def read() -> dict[str, Any]:
            now = registry.clock.now()
            where, _ = self._filter(viewer, query, now)
            try:
                page = registry.store.list_page(
                    where, now=now, limit=limit, cursor=query.get("cursor") or None
                )
            except ValueError as error:
                raise PageError(400, f"this page cannot be read: {error}") from None
            jobs = page_data(page, now, registry.origins())
            return {"now": iso_ms(now), "jobs": jobs, "cursor": page.cursor}

        return json_response(await run_in_threadpool(read))

    async def job_json(self, request: Request) -> Response:
        viewer = self.web.viewer(request)
        registry = self._installed()
        told = await run_in_threadpool(
            self._story, registry, viewer, request.query_params.get("id", "")
        )
        data = told.as_data()
        if self.web.settings.show_payloads:
            data = {**data, "payload": told.job.payload, "checkpoint": told.job.checkpoint}
        return json_response(data)

    async def stats_json(self, request: Request) -> Response:
        viewer = self.web.viewer(request)
        registry = self._installed()
        if viewer.tenant_id is not None:
            raise PageError(403, "the counts are the whole store's, not a tenant's")
        view = await run_in_threadpool(stats_view, registry.store, registry.origins())
        return json_response(view.as_data())

    # --- actions ------------------------------------------------------------------------

    async def cancel(self, request: Request) -> Response:
        viewer = self.web.actor(request)
        form = await self.web.form(request)
        registry = self._installed()
        job_id = str(form.get("id", ""))
        told = await run_in_threadpool(self._story, registry, viewer, job_id)
        back = self.web.url(request, "/background/job", id=job_id)
        if form.get("confirmed") != CONFIRMED:
            if told.state not in CANCELLABLE_STATES:
                raise PageError(409, f"a {told.state.value} job is not cancelled")
            what = [f"The {told.state.value} job {job_id} ({told.job.name}) is cancelled."]
            if told.state is JobState.RUNNING:
                what.append("Its attempt in progress is aborted at its next report.")
            return self.web.confirm(
                request,
                viewer,
                action="/background/cancel",
                verb="cancel it",
                title=f"Cancel {job_id}?",
                what=what,
                fields=[("id", job_id)],
                back=back,
            )

        def act() -> Answer:
            return cancel_job(
                registry.store,
                job_id,
                tenant_id=viewer.tenant_id,
                now=registry.clock.now(),
                origins=registry.origins(),
            ).answer

        answer = await run_in_threadpool(act)
        if answer is Answer.ARMED_TIMEOUT:
            timeout = told.timeout
            assert timeout is not None
            raise PageError(
                409,
                f"{job_id} is the timeout {timeout.timeout!r} of process {timeout.process!r}, "
                f"instance {timeout.instance!r}, still to fire: cancelled, the instance would "
                "wait for it for good. Step the instance instead (or `celery jobs background "
                "cancel --force`)",
            )
        return self.web.acted(
            request,
            viewer,
            action="cancel",
            target=job_id,
            answer=answer.value,
            back=self.web.redirect(
                request, "/background/job", id=job_id, done=f"cancel-{answer.value}"
            ),
        )

    async def retry(self, request: Request) -> Response:
        """Retry one dead job (``id``) or a selection (``ids``, several)."""
        viewer = self.web.actor(request)
        form = await self.web.form(request)
        registry = self._installed()
        ids = [str(value) for value in form.getlist("ids") if str(value)]
        single = str(form.get("id", ""))
        if single:
            ids = [single]
        ids = list(dict.fromkeys(ids))
        if not ids:
            raise PageError(400, "no job was selected")
        if len(ids) > MAX_SELECTED:
            raise PageError(400, f"at most {MAX_SELECTED} jobs are retried at once")
        if form.get("confirmed") != CONFIRMED:
            if single:
                told = await run_in_threadpool(self._story, registry, viewer, single)
                if told.state is not JobState.DEAD:
                    raise PageError(
                        409, f"a {told.state.value} job is not retried: only a dead one"
                    )
            many = len(ids) > 1
            return self.web.confirm(
                request,
                viewer,
                action="/background/retry",
                verb=f"retry {len(ids)}" if many else "retry it",
                title=f"Retry {len(ids)} dead jobs?" if many else f"Retry {ids[0]}?",
                what=[
                    "These dead jobs are queued again, their attempts reset; beat's relay "
                    "publishes them at its next tick."
                    if many
                    else "This dead job is queued again, its attempts reset; beat's relay "
                    "publishes it at its next tick.",
                    *ids,
                ],
                fields=[("id", single)] if single else [("ids", job_id) for job_id in ids],
                back=self.web.url(request, "/background/job", id=single)
                if single
                else self.web.url(request, "/background", state="dead"),
            )

        def act() -> int:
            now = registry.clock.now()
            if single:
                answer = retry_dead_job(registry.store, single, tenant_id=viewer.tenant_id, now=now)
                return 1 if answer.answer is Answer.DONE else 0
            return retry_selected(
                registry.store, Selection(tuple(ids)), tenant_id=viewer.tenant_id, now=now
            )

        done = await run_in_threadpool(act)
        target = single or f"{len(ids)} selected jobs"
        answer = f"queued {done} of {len(ids)}"
        back = (
            self.web.redirect(
                request, "/background/job", id=single, done="retried" if done else "not-retried"
            )
            if single
            else self.web.redirect(
                request, "/background", state="dead", done=f"retried-{done}-of-{len(ids)}"
            )
        )
        return self.web.acted(
            request,
            viewer,
            action="retry-dead",
            target=target,
            answer=answer,
            back=back,
            job_ids=ids,
            queued=done,
        )


def _status_counts(view: StatsView) -> dict[str, dict[str, int]]:
    """Each status's count, the application's and the library's jobs apart."""
    return {
        "application": {s.value: n for s, n in total(view.application.values()).items()},
        "library": {s.value: n for s, n in total(view.library.values()).items()},
    }


def _limit(given: str | None, default: int) -> int:
    try:
        limit = int(given) if given else default
    except ValueError:
        raise PageError(400, f"limit is a number of jobs, not {given!r}") from None
    return max(1, min(limit, MAX_LIMIT))


def _error(code: str | None, kind: str | None) -> str:
    return "-" if code is None else f"{code} ({kind or 'unknown type'})"


def _instant(at: datetime | None) -> str:
    return "-" if at is None else iso_ms(at)
