"""Every page of ``ddd_celery.web``, read-only, on the real Redis and the real PostgreSQL: what
each shows is what the stores hold, read by index (a page and its cursor), every text escaped,
payloads shown as their shapes unless the page is made to show them."""

from __future__ import annotations

import re
import socket
import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from celery import Celery
from sqlalchemy import create_engine
from web_jobs import CLOSE_DAY, EVERY_MINUTE, SEND_INVOICE
from web_support import Site

from ddd_celery.background.operations import total
from ddd_celery.background.store import EnqueuedBy, JobStatus, JobStore, NewJob
from ddd_celery.celery import install_jobs
from ddd_celery.celery.background import install_background_jobs
from ddd_celery.kernel import InMemoryLock, SystemClock
from ddd_celery.kernel.instants import iso_ms
from ddd_celery.redis import connect
from ddd_celery.redis.job_store import RedisJobStore
from ddd_celery.scheduling.outcomes import JobRun, Outcome
from ddd_celery.sql import SqlJobStore
from ddd_celery.web import Viewer, create_app
from ddd_celery.web.background import CachedStats

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

FORGED = "<script>alert(1)</script>\x1b[2J"
"""A text that would run in a page or clear a terminal, were it written raw."""


def rows_of(page: str, table: str) -> list[str]:
    body = page.split(f'id="{table}"', 1)[1].split("</table>", 1)[0]
    return re.findall(r"<tr[ >].*?</tr>", body, flags=re.S)[1:]


def record(site: Site, job: str, outcome: Outcome, at: datetime, **more: str) -> JobRun:
    run = JobRun(
        job=job,
        scheduled_at=at,
        outcome=outcome,
        context=job.split(".", maxsplit=1)[0],
        started_at=at if outcome in (Outcome.SUCCEEDED, Outcome.FAILED) else None,
        duration_ms=12.0 if outcome in (Outcome.SUCCEEDED, Outcome.FAILED) else None,
        **more,
    )
    assert site.registry.last_runs is not None
    site.registry.last_runs.write(run)
    return run


async def test_the_dashboard_counts_the_jobs_and_charts_them(site: Site) -> None:
    site.dead("job-dead")
    site.succeeded("job-ok-1")
    site.succeeded("job-ok-2")
    site.add("job-ready")
    record(site, CLOSE_DAY, Outcome.SUCCEEDED, datetime(2026, 3, 2, 1, 30, tzinfo=UTC))

    async with site.client() as client:
        answer = await client.get("/")

    assert answer.status_code == 200
    page = answer.text
    counts = dict(re.findall(r'id="count-(\w+)".*?<b>(\d+)</b>', page, flags=re.S))
    assert counts == {
        "queued": "1",
        "running": "0",
        "failed": "0",
        "dead": "1",
        "succeeded": "2",
        "cancelled": "0",
    }
    assert 'aria-label="Jobs kept per job name, by status"' in page
    assert page.count('class="s-succeeded"') >= 2  # the throughput bar and the name's bar
    assert 'class="s-dead"' in page
    assert f">{CLOSE_DAY}</a>" in page
    assert '<meta http-equiv="refresh" content="5; url=/">' in page
    assert answer.headers["content-security-policy"].startswith("default-src 'none'")
    assert answer.headers["x-frame-options"] == "DENY"


def test_the_counts_are_read_again_in_the_background_once_older_than_their_age(
    site: Site,
) -> None:
    counts = CachedStats(max_age_s=0.0)
    site.dead("job-1")

    def dead() -> int:
        view, _ = counts.view(site.background)
        return total(view.application.values())[JobStatus.DEAD]

    assert dead() == 1
    site.dead("job-2")
    assert dead() == 1  # the counts kept, while they are read again
    deadline = time.monotonic() + 10
    while dead() != 2:
        assert time.monotonic() < deadline, "the counts were never read again"
        time.sleep(0.05)


async def test_the_scheduled_jobs_page_shows_schedule_zone_next_run_pause_and_last_outcome(
    site: Site,
) -> None:
    at = datetime(2026, 3, 2, 1, 30, tzinfo=UTC)
    record(site, CLOSE_DAY, Outcome.FAILED, at, error_code="JOB_TIMEOUT", error_type="TimeoutError")
    site.registry.pauses.pause(EVERY_MINUTE, by="ada@ops", at=datetime.now(UTC), reason="audit")

    async with site.client() as client:
        answer = await client.get("/scheduled")

    assert answer.status_code == 200
    listed = rows_of(answer.text, "scheduled-jobs")
    rows = {name: row for row in listed for name in re.findall(r'data-job="([^"]+)"', row)}
    assert list(rows) == ["ddd_celery.relay", CLOSE_DAY, EVERY_MINUTE]
    close_day = rows[CLOSE_DAY]
    assert "cron 30 2 * * * (Europe/Paris)" in close_day
    assert "JOB_TIMEOUT" in close_day
    assert iso_ms(at) in close_day
    assert re.search(r"\d{4}-\d\d-\d\dT02:30:00\+0[12]:00 CES?T", close_day)
    assert ">paused</span>" in rows[EVERY_MINUTE]
    assert "by ada@ops: audit" in rows[EVERY_MINUTE]
    assert ">paused</span>" not in close_day


async def test_a_scheduled_job_page_shows_its_next_runs_and_its_history_newest_first(
    site: Site,
) -> None:
    first = datetime(2026, 3, 2, 1, 30, tzinfo=UTC)
    for day, outcome in enumerate([Outcome.SUCCEEDED, Outcome.MISSED, Outcome.FAILED]):
        record(site, CLOSE_DAY, outcome, first + timedelta(days=day), correlation_id=f"c-{day}")

    async with site.client() as client:
        answer = await client.get("/scheduled/job", params={"name": CLOSE_DAY})

    assert answer.status_code == 200
    history = rows_of(answer.text, "history")
    outcomes = [re.findall(r'class="badge o-([\w-]+)"', row) for row in history]
    assert outcomes == [["failed"], ["missed"], ["succeeded"]]
    assert "c-2" in history[0]
    assert len(rows_of(answer.text, "next-runs")) == 5
    assert 'aria-label="Outcomes of webpage.close-day, over time"' in answer.text
    assert answer.text.count('class="s-') >= 3


async def test_a_job_page_with_the_pause_form_never_reloads_itself_under_the_operator(
    site: Site,
) -> None:
    ops = Viewer("ops", may_act=True)
    async with site.client(authorize=lambda request: ops) as client:
        form = await client.get("/scheduled/job", params={"name": CLOSE_DAY})
        site.registry.pauses.pause(CLOSE_DAY, by="ops", at=datetime.now(UTC), reason=None)
        paused = await client.get("/scheduled/job", params={"name": CLOSE_DAY})
    async with site.client() as client:
        read_only = await client.get("/scheduled/job", params={"name": CLOSE_DAY})

    assert 'id="reason"' in form.text
    assert 'http-equiv="refresh"' not in form.text  # the reason typed would be wiped
    assert 'id="resume"' in paused.text
    assert 'http-equiv="refresh"' in paused.text
    assert 'http-equiv="refresh"' in read_only.text


async def test_the_background_page_lists_a_state_a_page_at_a_time_by_its_cursor(
    site: Site,
) -> None:
    base = datetime.now(UTC) - timedelta(hours=1)
    for index in range(7):
        site.dead(f"dead-{index}", enqueued_at=base + timedelta(seconds=index))
    site.add("ready-1")

    async with site.client(page_size=3) as client:
        first = await client.get("/background", params={"state": "dead"})
        cursor = re.search(r'href="/background\?cursor=([^"&]+)', first.text)
        assert cursor is not None
        second = await client.get("/background", params={"state": "dead", "cursor": cursor[1]})
        bad = await client.get("/background", params={"state": "dead", "cursor": "not-a-cursor"})

    ids = [re.findall(r'data-id="([^"]+)"', page.text) for page in (first, second)]
    assert ids == [["dead-6", "dead-5", "dead-4"], ["dead-3", "dead-2", "dead-1"]]
    assert 'class="count here" href="/background?state=dead"' in first.text
    assert bad.status_code == 400


async def test_a_job_is_found_by_its_id_and_its_page_tells_its_story(site: Site) -> None:
    site.dead("job-1", payload={"card": "4242-SECRET", "items": [1, 2]}, tenant_id="t-1")

    async with site.client() as client:
        found = await client.get("/background", params={"id": "job-1"})
        missing = await client.get("/background", params={"id": "nobody"})
        story = await client.get("/background/job", params={"id": "job-1"})
        unknown = await client.get("/background/job", params={"id": "nobody"})

    assert found.status_code == 303
    assert found.headers["location"] == "/background/job?id=job-1"
    assert missing.status_code == 200
    assert 'id="not-found"' in missing.text
    page = story.text
    assert "UNEXPECTED_ERROR (RuntimeError)" in page
    assert "c-job-1" in page
    assert "t-1" in page
    assert "celery@test" in page
    assert '{"card": str, "items": list[2] of int}' in page.replace("&#34;", '"')
    assert "4242-SECRET" not in page
    assert len(rows_of(page, "attempts")) == 1
    assert unknown.status_code == 404


async def test_payloads_show_their_values_only_when_the_page_is_made_to(site: Site) -> None:
    site.add("job-1", payload={"card": "4242-SECRET"})

    async with site.client(show_payloads=True) as client:
        shown = await client.get("/background/job", params={"id": "job-1"})
        api = await client.get("/api/background/job", params={"id": "job-1"})

    assert "4242-SECRET" in shown.text
    assert api.json()["payload"] == {"card": "4242-SECRET"}


async def test_every_text_from_a_store_shows_as_text(site: Site) -> None:
    now = datetime.now(UTC)
    site.store.add(
        NewJob(
            id="forged-1",
            name=f"forged.{FORGED}",
            queue=f"q{FORGED}",
            payload={FORGED: 1},
            enqueued_at=now,
            run_at=now,
            max_attempts=1,
            enqueued_by=EnqueuedBy(correlation_id=FORGED, actor=FORGED, tenant_id=FORGED),
        ),
        dispatched=True,
    )
    record(
        site, CLOSE_DAY, Outcome.FAILED, now, error_code="X", error_type=FORGED, tenant_id=FORGED
    )
    site.registry.pauses.pause(CLOSE_DAY, by=FORGED, at=now, reason=FORGED)

    async with site.client() as client:
        pages = [
            await client.get(path, params=params)
            for path, params in (
                ("/", {}),
                ("/scheduled", {}),
                ("/scheduled/job", {"name": CLOSE_DAY}),
                ("/background", {}),
                ("/background/job", {"id": "forged-1"}),
            )
        ]

    for answer in pages:
        assert answer.status_code == 200, answer.url
        assert "<script>" not in answer.text, answer.url
        assert "\x1b" not in answer.text, answer.url
        assert "&lt;script&gt;alert(1)&lt;/script&gt;\\x1b[2J" in answer.text, answer.url


async def test_the_json_api_answers_what_the_cli_answers(site: Site) -> None:
    site.dead("job-1")
    site.succeeded("job-2")

    async with site.client() as client:
        listed = await client.get("/api/background/jobs", params={"state": "dead"})
        stats = await client.get("/api/background/stats")
        scheduled = await client.get("/api/scheduled")

    assert [job["id"] for job in listed.json()["jobs"]] == ["job-1"]
    assert listed.json()["cursor"] is None
    counts = stats.json()["jobs"][SEND_INVOICE]["counts"]
    assert (counts["dead"], counts["succeeded"]) == (1, 1)
    names = [job["name"] for job in scheduled.json()["jobs"]]
    assert names == sorted(names)
    assert CLOSE_DAY in names


async def test_the_page_mounted_in_an_app_links_and_keeps_its_cookies_under_its_path(
    site: Site,
) -> None:
    site.dead("job-1")

    async with site.client(mount="/ops") as client:
        listed = await client.get("/ops/background")
        found = await client.get("/ops/background", params={"id": "job-1"})

    assert listed.status_code == 200
    assert 'href="/ops/background/job?id=job-1"' in listed.text
    assert 'href="/ops/scheduled"' in listed.text
    assert found.headers["location"] == "/ops/background/job?id=job-1"
    assert "Path=/ops" in listed.headers["set-cookie"]
    assert 'content="5; url=/ops/background"' in listed.text


async def test_a_store_that_cannot_be_asked_is_one_line_and_503(site: Site) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    down: JobStore
    if site.kind == "redis":
        down = RedisJobStore(connect(f"redis://127.0.0.1:{port}/0"), prefix=site.prefix)
    else:
        down = SqlJobStore(create_engine(f"postgresql+psycopg://postgres@127.0.0.1:{port}/test"))
    app = Celery(f"down-{port}", broker="memory://", set_as_current=False)
    app.conf.ddd_celery_redis_url = None
    install_jobs(app, jobs=[], lock=InMemoryLock(SystemClock()), environ={})
    install_background_jobs(app, jobs=[], store=down)

    transport = httpx.ASGITransport(app=create_app(app))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        answer = await client.get("/background")

    assert answer.status_code == 503
    assert re.search(r'id="error">a store could not be asked: StoreUnavailableError: ', answer.text)
    app.close()


async def test_the_process_page_says_when_none_is_installed(site: Site) -> None:
    async with site.client() as client:
        answer = await client.get("/processes")

    assert answer.status_code == 200
    assert "No process manager is installed" in answer.text
