"""What the page does, on the real Redis and the real PostgreSQL: each action asked, confirmed,
done through the CLI's calls, logged with who did it; refused without the right to act, without
the form's CSRF token, and beyond the viewer's tenant."""

from __future__ import annotations

import logging
import re
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from web_jobs import CLOSE_DAY, EVERY_MINUTE
from web_support import Site, csrf_of

from ddd_celery.background.store import JobStatus
from ddd_celery.celery.background.relay import RELAY_JOB
from ddd_celery.web import Viewer

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

TOKEN = "s3cret-token"


async def sign_in(client: httpx.AsyncClient, name: str = "ada") -> str:
    """Sign in on the form as a browser does; the CSRF token of the page it lands on."""
    form = await client.get("/signin")
    signed = await client.post(
        "/signin", data={"csrf": csrf_of(form.text), "token": TOKEN, "name": name, "next": "/"}
    )
    assert signed.status_code == 303, signed.text
    landed = await client.get("/background")
    return csrf_of(landed.text)


async def confirmed(
    client: httpx.AsyncClient, path: str, csrf: str, **fields: Any
) -> tuple[httpx.Response, httpx.Response]:
    """Post the action, then its confirmation: what each answered."""
    asked = await client.post(path, data={"csrf": csrf, **fields})
    assert asked.status_code == 200, asked.text
    done = await client.post(path, data={"csrf": csrf_of(asked.text), "confirmed": "yes", **fields})
    return asked, done


def operator_actions(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [
        {key: getattr(record, key) for key in ("action", "target", "by", "answer", "tenant_id")}
        for record in caplog.records
        if record.name == "ddd_celery.web" and record.levelno == logging.INFO
    ]


async def test_a_dead_job_is_retried_once_confirmed_and_the_log_says_who(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    site.dead("job-1")
    caplog.set_level(logging.INFO, logger="ddd_celery.web")

    async with site.client(token=TOKEN) as client:
        csrf = await sign_in(client, "ada")
        asked = await client.post("/background/retry", data={"csrf": csrf, "id": "job-1"})
        assert site.find("job-1").status is JobStatus.DEAD  # type: ignore[union-attr]
        done = await client.post(
            "/background/retry",
            data={"csrf": csrf_of(asked.text), "id": "job-1", "confirmed": "yes"},
        )
        after = await client.get(done.headers["location"])

    assert "Retry job-1?" in asked.text
    assert done.status_code == 303
    assert done.headers["location"] == "/background/job?id=job-1&done=retried"
    assert site.find("job-1").status is JobStatus.QUEUED  # type: ignore[union-attr]
    assert "Queued again" in after.text
    assert operator_actions(caplog) == [
        {
            "action": "retry-dead",
            "target": "job-1",
            "by": "ada",
            "answer": "queued 1 of 1",
            "tenant_id": None,
        }
    ]
    assert "Operator action retry-dead on job-1 by ada: queued 1 of 1" in caplog.text


async def test_a_selection_of_dead_jobs_is_retried_and_the_rest_stays_dead(site: Site) -> None:
    for job_id in ("job-1", "job-2", "job-3"):
        site.dead(job_id)

    async with site.client(token=TOKEN) as client:
        await sign_in(client)
        listed = await client.get("/background", params={"state": "dead"})
        boxes = re.findall(r'type="checkbox" name="ids" value="([^"]+)"', listed.text)
        asked = await client.post(
            "/background/retry", data={"csrf": csrf_of(listed.text), "ids": ["job-1", "job-3"]}
        )
        done = await client.post(
            "/background/retry",
            data={"csrf": csrf_of(asked.text), "ids": ["job-1", "job-3"], "confirmed": "yes"},
        )

    assert boxes == ["job-3", "job-2", "job-1"]
    assert "Retry 2 dead jobs?" in asked.text
    assert done.headers["location"] == "/background?state=dead&done=retried-2-of-2"
    statuses = [site.find(job_id).status for job_id in ("job-1", "job-2", "job-3")]  # type: ignore[union-attr]
    assert statuses == [JobStatus.QUEUED, JobStatus.DEAD, JobStatus.QUEUED]


async def test_a_queued_job_is_cancelled_and_a_dead_one_is_refused(site: Site) -> None:
    site.add("job-1")
    site.dead("job-2")

    async with site.client(token=TOKEN) as client:
        csrf = await sign_in(client)
        _, done = await confirmed(client, "/background/cancel", csrf, id="job-1")
        refused = await client.post("/background/cancel", data={"csrf": csrf, "id": "job-2"})

    assert done.headers["location"] == "/background/job?id=job-1&done=cancel-done"
    assert site.find("job-1").status is JobStatus.CANCELLED  # type: ignore[union-attr]
    assert refused.status_code == 409
    assert site.find("job-2").status is JobStatus.DEAD  # type: ignore[union-attr]


async def test_a_scheduled_job_is_paused_then_resumed_in_the_store_the_beats_read(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ddd_celery.web")
    pauses = site.registry.pauses

    async with site.client(token=TOKEN) as client:
        csrf = await sign_in(client, "grace")
        asked, paused = await confirmed(
            client, "/scheduled/pause", csrf, name=CLOSE_DAY, reason="month end"
        )
        kept = pauses.paused().get(CLOSE_DAY)
        shown = await client.get(paused.headers["location"])
        _, resumed = await confirmed(client, "/scheduled/resume", csrf, name=CLOSE_DAY)

    assert "Pause webpage.close-day?" in asked.text
    assert paused.headers["location"] == f"/scheduled/job?name={CLOSE_DAY}&done=paused"
    assert kept is not None
    assert (kept.by, kept.reason) == ("grace", "month end")
    assert 'id="resume"' in shown.text
    assert resumed.headers["location"] == f"/scheduled/job?name={CLOSE_DAY}&done=resumed"
    assert CLOSE_DAY not in pauses.paused()
    assert [(line["action"], line["by"], line["answer"]) for line in operator_actions(caplog)] == [
        ("pause", "grace", "paused"),
        ("resume", "grace", "resumed"),
    ]


async def test_the_relay_is_refused_a_pause_and_a_resume_each_worded_as_the_cli_words_it(
    site: Site,
) -> None:
    async with site.client(token=TOKEN) as client:
        csrf = await sign_in(client)
        paused = await client.post("/scheduled/pause", data={"csrf": csrf, "name": RELAY_JOB})
        resumed = await client.post("/scheduled/resume", data={"csrf": csrf, "name": RELAY_JOB})

    assert (paused.status_code, resumed.status_code) == (409, 409)
    assert "pausing it would leave them unpublished" in paused.text
    assert "it is never paused, so there is nothing to resume" in resumed.text
    assert "pausing it" not in resumed.text


async def test_run_now_sends_the_latest_occurrence_to_the_workers_under_its_lock(
    site: Site,
) -> None:
    async with site.client(token=TOKEN) as client:
        csrf = await sign_in(client)
        asked, done = await confirmed(client, "/scheduled/run", csrf, name=EVERY_MINUTE)
        again = await client.post(
            "/scheduled/run", data={"csrf": csrf, "name": EVERY_MINUTE, "confirmed": "yes"}
        )

    assert "Run webpage.every-minute now, on the workers?" in asked.text
    assert done.headers["location"] == f"/scheduled/job?name={EVERY_MINUTE}&done=sent"
    assert site.registry.run_state.running(EVERY_MINUTE) is not None
    assert again.status_code == 409  # the same occurrence, its lock held
    assert "not sent:" in again.text


async def test_an_api_client_acts_with_its_bearer_token_and_no_form_token(site: Site) -> None:
    site.dead("job-1")
    bearer = {"authorization": f"Bearer {TOKEN}"}

    async with site.client(token=TOKEN) as client:
        listed = await client.get("/api/background/jobs", params={"state": "dead"}, headers=bearer)
        done = await client.post(
            "/background/retry", data={"id": "job-1", "confirmed": "yes"}, headers=bearer
        )
        wrong = await client.get("/api/background/jobs", headers={"authorization": "Bearer no"})
        none = await client.get("/api/background/jobs")

    assert [job["id"] for job in listed.json()["jobs"]] == ["job-1"]
    assert done.json() == {
        "action": "retry-dead",
        "target": "job-1",
        "answer": "queued 1 of 1",
        "job_ids": ["job-1"],
        "queued": 1,
    }
    assert (wrong.status_code, none.status_code) == (401, 303)


async def test_a_form_without_its_csrf_token_or_with_another_browsers_is_refused(
    site: Site,
) -> None:
    site.dead("job-1")
    fields = {"id": "job-1", "confirmed": "yes"}

    async with site.client(token=TOKEN) as client, site.client(token=TOKEN) as other:
        await sign_in(client)
        theirs = await sign_in(other)
        missing = await client.post("/background/retry", data=fields)
        forged = await client.post("/background/retry", data={**fields, "csrf": "forged"})
        borrowed = await client.post("/background/retry", data={**fields, "csrf": theirs})

    assert [answer.status_code for answer in (missing, forged, borrowed)] == [403, 403, 403]
    assert "CSRF token is missing or wrong" in missing.text
    assert site.find("job-1").status is JobStatus.DEAD  # type: ignore[union-attr]


async def test_without_a_token_or_authorize_the_page_is_read_only(site: Site) -> None:
    site.dead("job-1")

    async with site.client() as client:
        story = await client.get("/background/job", params={"id": "job-1"})
        refused = await client.post("/background/retry", data={"id": "job-1", "confirmed": "yes"})
        paused = await client.post("/scheduled/pause", data={"name": CLOSE_DAY, "confirmed": "yes"})

    assert 'id="retry"' not in story.text
    assert "read-only" in story.text
    assert (refused.status_code, paused.status_code) == (403, 403)
    assert "read-only: you may look, not act" in refused.text
    assert site.find("job-1").status is JobStatus.DEAD  # type: ignore[union-attr]
    assert CLOSE_DAY not in site.registry.pauses.paused()


async def test_a_token_page_asks_a_browser_to_sign_in_and_refuses_a_wrong_token(
    site: Site,
) -> None:
    async with site.client(token=TOKEN) as client:
        sent = await client.get("/background", params={"state": "dead"})
        form = await client.get("/signin")
        wrong = await client.post(
            "/signin", data={"csrf": csrf_of(form.text), "token": "guess", "name": "eve"}
        )
        elsewhere = await client.post(
            "/signin",
            data={"csrf": csrf_of(form.text), "token": TOKEN, "next": "https://evil.test/"},
        )

    assert sent.status_code == 303
    assert sent.headers["location"] == "/signin?next=%2Fbackground%3Fstate%3Ddead"
    assert wrong.status_code == 403
    assert "ddd_celery_session" not in wrong.headers.get("set-cookie", "")
    assert elsewhere.headers["location"] == "/"
    cookie = elsewhere.headers["set-cookie"]
    assert "ddd_celery_session=" in cookie
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie


async def test_a_forged_session_cookie_signs_nobody_in(site: Site) -> None:
    async with site.client(token=TOKEN) as client:
        client.cookies.set("ddd_celery_session", "eyJuYW1lIjoiZXZlIiwiYXQiOjB9.forged")
        answer = await client.get("/background")

    assert answer.status_code == 303


async def test_authorize_decides_who_sees_and_who_acts(site: Site) -> None:
    site.dead("job-1")

    def authorize(request: Request) -> Viewer | None:
        who = request.headers.get("x-user")
        if who == "ops":
            return Viewer("ops", may_act=True)
        if who == "support":
            return Viewer("support")
        return None

    async with site.client(authorize=authorize) as client:
        nobody = await client.get("/background")
        support = await client.get("/background", headers={"x-user": "support"})
        refused = await client.post(
            "/background/retry",
            data={"csrf": csrf_of(support.text), "id": "job-1", "confirmed": "yes"},
            headers={"x-user": "support"},
        )
        ops = await client.get("/background/job", params={"id": "job-1"}, headers={"x-user": "ops"})
        done = await client.post(
            "/background/retry",
            data={"csrf": csrf_of(ops.text), "id": "job-1", "confirmed": "yes"},
            headers={"x-user": "ops"},
        )

    assert nobody.status_code == 403
    assert refused.status_code == 403
    assert 'id="retry"' in ops.text
    assert done.status_code == 303
    assert site.find("job-1").status is JobStatus.QUEUED  # type: ignore[union-attr]


async def test_a_viewer_of_one_tenant_sees_and_acts_on_that_tenants_jobs_only(
    site: Site,
) -> None:
    site.dead("mine", tenant_id="t-1")
    site.dead("theirs", tenant_id="t-2")

    def authorize(request: Request) -> Viewer:
        return Viewer("clerk", may_act=True, tenant_id="t-1")

    async with site.client(authorize=authorize) as client:
        listed = await client.get("/background")
        csrf = csrf_of(listed.text)
        other = await client.get("/background/job", params={"id": "theirs"})
        filtered = await client.get("/background", params={"tenant": "t-2"})
        searched = await client.get("/background", params={"id": "theirs"})
        retried = await client.post(
            "/background/retry", data={"csrf": csrf, "ids": ["theirs", "mine"], "confirmed": "yes"}
        )
        cancel = await client.post(
            "/background/cancel", data={"csrf": csrf, "id": "theirs", "confirmed": "yes"}
        )
        stats = await client.get("/api/background/stats")
        scheduled = await client.get("/scheduled")
        dashboard = await client.get("/")

    assert re.findall(r'data-id="([^"]+)"', listed.text) == ["mine"]
    assert 'id="count-' not in listed.text
    assert other.status_code == 404
    assert filtered.status_code == 403
    assert 'id="not-found"' in searched.text
    assert retried.headers["location"] == "/background?state=dead&done=retried-1-of-2"
    assert site.find("theirs").status is JobStatus.DEAD  # type: ignore[union-attr]
    assert site.find("mine").status is JobStatus.QUEUED  # type: ignore[union-attr]
    assert cancel.status_code == 404
    assert (stats.status_code, scheduled.status_code) == (403, 403)
    assert dashboard.status_code == 200
    assert 'id="background-counts"' not in dashboard.text


async def test_a_page_made_for_one_tenant_limits_every_viewer_to_it(site: Site) -> None:
    site.dead("mine", tenant_id="t-1")
    site.dead("theirs", tenant_id="t-2")

    async with site.client(viewer_tenant="t-1") as client:
        listed = await client.get("/background")
        api = await client.get("/api/background/jobs")

    assert re.findall(r'data-id="([^"]+)"', listed.text) == ["mine"]
    assert [job["id"] for job in api.json()["jobs"]] == ["mine"]


async def test_signing_out_ends_the_sign_in(site: Site) -> None:
    async with site.client(token=TOKEN) as client:
        csrf = await sign_in(client)
        refused = await client.post("/signout")
        out = await client.post("/signout", data={"csrf": csrf})
        after = await client.get("/background")

    assert refused.status_code == 403
    assert out.headers["location"] == "/signin"
    assert 'ddd_celery_session=""' in out.headers["set-cookie"]
    assert after.status_code == 303
