"""The task of a background job asks the store again, with the same token or lease, when a
claim or a conclusion got no answer; the in-memory store, its replies lost on purpose."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import pytest
from background_jobs import ECHO, EchoJob, Seen
from celery import Celery
from celery.app.task import Context

from ddd_celery.background import ClaimedJob, InMemoryJobStore, JobLease, JobStatus
from ddd_celery.celery import install_jobs
from ddd_celery.celery.background import background_jobs_of, install_background_jobs
from ddd_celery.celery.background import tasks as background_tasks
from ddd_celery.celery.background.tasks import run_message
from ddd_celery.kernel import InMemoryLock, SystemClock

WORKER = "worker1@billing-7"
"""The hostname of the Celery worker the task's request names."""


class LosingStore(InMemoryJobStore):
    """Does each claim and completion, then loses the first ``lost_claims`` and
    ``lost_completions`` replies (a timeout after the store did the work); ``down`` raises
    before doing anything; the first ``refused_claims`` claims answer None, as for a job not
    due yet at the instant the claim was judged."""

    def __init__(self) -> None:
        super().__init__()
        self.lost_claims = 0
        self.lost_completions = 0
        self.refused_claims = 0
        self.down = False
        self.claim_tokens: list[str | None] = []
        self.claim_workers: list[str | None] = []
        self.completions = 0

    def claim_job(
        self,
        job_id: str,
        *,
        now: datetime,
        lease_ms: int,
        token: str | None = None,
        worker: str | None = None,
    ) -> ClaimedJob | None:
        if self.down:
            raise ConnectionError("the store cannot be asked")
        self.claim_tokens.append(token)
        self.claim_workers.append(worker)
        if self.refused_claims:
            self.refused_claims -= 1
            return None
        claimed = super().claim_job(job_id, now=now, lease_ms=lease_ms, token=token, worker=worker)
        if self.lost_claims:
            self.lost_claims -= 1
            raise ConnectionError("the reply never came")
        return claimed

    def complete(self, lease: JobLease, *, now: datetime) -> None:
        self.completions += 1
        super().complete(lease, now=now)
        if self.lost_completions:
            self.lost_completions -= 1
            raise ConnectionError("the reply never came")


def wired(store: LosingStore, seen: Seen) -> Any:
    app = Celery(f"retries-{uuid.uuid4().hex[:8]}", broker="memory://", set_as_current=False)
    clock = SystemClock()
    install_jobs(app, jobs=[], lock=InMemoryLock(clock), clock=clock, environ={})
    install_background_jobs(app, jobs=[EchoJob], store=store, providers={Seen: lambda: seen})
    return app


@pytest.fixture(autouse=True)
def no_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(background_tasks, "STORE_RETRY_PAUSES_S", (0.0, 0.0, 0.0, 0.0))


def enqueue(app: Any) -> str:
    job_id: str = background_jobs_of(app).queue().enqueue(EchoJob, {"text": "hi"})
    return job_id


@pytest.mark.parametrize("lost", [1, 2, 4])
def test_a_claim_whose_replies_were_lost_is_asked_again_with_the_same_token_and_runs_once(
    lost: int,
) -> None:
    store, seen = LosingStore(), Seen()
    app = wired(store, seen)
    job_id = enqueue(app)
    store.lost_claims = lost

    run_message(app, ECHO, (), {"job_id": job_id}, request=Context(hostname=WORKER))

    assert len(store.claim_tokens) == lost + 1
    assert len(set(store.claim_tokens)) == 1
    assert store.claim_workers == [WORKER] * (lost + 1)  # each try names the same worker
    assert seen.notes == [("echo", ("hi", job_id, 1))]
    job = store.find(job_id, tenant_id=None)
    assert job is not None
    assert (job.status, job.attempts) == (JobStatus.SUCCEEDED, 1)
    assert [(attempt.number, attempt.worker) for attempt in job.history] == [(1, WORKER)]


def test_two_deliveries_of_one_wake_up_name_two_attempts() -> None:
    store, seen = LosingStore(), Seen()
    app = wired(store, seen)
    job_id = enqueue(app)

    run_message(app, ECHO, (), {"job_id": job_id})
    run_message(app, ECHO, (), {"job_id": job_id})

    first, second = store.claim_tokens
    assert first != second
    assert len(seen.notes) == 1


def test_a_store_that_cannot_be_asked_fails_the_task_after_its_tries_and_the_job_stays_queued() -> (
    None
):
    store, seen = LosingStore(), Seen()
    app = wired(store, seen)
    job_id = enqueue(app)
    store.down = True

    with pytest.raises(ConnectionError):
        run_message(app, ECHO, (), {"job_id": job_id})

    job = store.find(job_id, tenant_id=None)
    assert job is not None
    assert (job.status, job.attempts) == (JobStatus.QUEUED, 0)
    assert seen.notes == []


def test_a_completion_whose_reply_was_lost_is_asked_again_with_the_same_lease() -> None:
    store, seen = LosingStore(), Seen()
    app = wired(store, seen)
    job_id = enqueue(app)
    store.lost_completions = 2

    run_message(app, ECHO, (), {"job_id": job_id})

    assert store.completions == 3
    assert seen.notes == [("echo", ("hi", job_id, 1))]
    job = store.find(job_id, tenant_id=None)
    assert job is not None
    assert (job.status, job.attempts) == (JobStatus.SUCCEEDED, 1)


def test_a_job_that_came_due_between_a_refused_claim_and_its_read_is_claimed_again_at_once() -> (
    None
):
    store, seen = LosingStore(), Seen()
    app = wired(store, seen)
    job_id = enqueue(app)
    store.refused_claims = 1  # judged a moment before its run_at; due by the time it is read

    run_message(app, ECHO, (), {"job_id": job_id})

    assert len(store.claim_tokens) == 2
    assert len(set(store.claim_tokens)) == 1
    assert seen.notes == [("echo", ("hi", job_id, 1))]
