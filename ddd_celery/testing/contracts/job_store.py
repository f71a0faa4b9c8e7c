"""The contract of the ``JobStore`` port: every adapter passes the same tests.

Subclass ``JobStoreContract`` in a test module and provide the fixture ``job_store_subject``,
returning a ``JobStoreSubject`` (parametrise it to run the suite over several adapters)::

    class TestMyJobStore(JobStoreContract):
        @pytest.fixture
        def job_store_subject(self) -> JobStoreSubject: ...

Time passes only through the ``now`` arguments: nothing sleeps. Instants are whole
milliseconds, what every store keeps. Each test starts on an empty store.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import pytest

from ddd_celery.background.errors import JOB_INTERRUPTED, JobInterruptedError
from ddd_celery.background.rules import MOVES, JobEvent, keyed_job_id
from ddd_celery.background.store import (
    ADD_MANY_BATCH,
    ATTEMPTS_KEPT,
    AttemptRecord,
    AttemptState,
    ClaimedJob,
    Dispatch,
    EnqueuedBy,
    JobFilter,
    JobLease,
    JobPage,
    JobState,
    JobStatus,
    JobStore,
    LostLeaseError,
    NewJob,
    StoredJob,
)
from ddd_celery.kernel.unit_of_work import UnitOfWork

JOB = "billing.compile-statements"
OTHER_JOB = "billing.send-reminders"
WORKER = "celery@worker-1"
LEASE_MS = 30_000
REDISPATCH_MS = 60_000
FIRST_EXPIRY = "expire_leases with attempts left"
LAST_EXPIRY = "expire_leases with none left"
OPERATIONS = {
    "claim_job": JobEvent.CLAIM,
    "claim_due": JobEvent.CLAIM,
    "complete": JobEvent.COMPLETE,
    "fail with a retry": JobEvent.RETRY,
    FIRST_EXPIRY: JobEvent.RETRY,
    "fail for the last time": JobEvent.DIE,
    LAST_EXPIRY: JobEvent.DIE,
    "release": JobEvent.RELEASE,
    "cancel": JobEvent.CANCEL,
    "retry_dead": JobEvent.RETRY_DEAD,
}
"""Each call of the port that applies an event of ``rules.MOVES``, and that event."""


@dataclass(frozen=True, slots=True)
class JobStoreSubject:
    """An adapter under test, another instance on the same data, and the start instant."""

    store: JobStore
    """The store under test, empty."""
    peer: JobStore
    """Another instance on the same data, as another process holds it (``store`` itself for
    a store that lives in one process)."""
    start: datetime
    """The instant the test starts at, aware, in whole milliseconds."""
    unit_of_work: UnitOfWork | None = None
    """The unit of work a ``transactional`` store writes in; None for the others."""


def ms(subject: JobStoreSubject, offset_ms: int) -> datetime:
    """The instant ``offset_ms`` after the start."""
    return subject.start + timedelta(milliseconds=offset_ms)


def new_job(
    subject: JobStoreSubject,
    job_id: str,
    *,
    name: str = JOB,
    queue: str = "billing",
    run_at_ms: int = 0,
    enqueued_at_ms: int = 0,
    tenant: str | None = None,
    key: str | None = None,
    max_attempts: int = 3,
    payload: Any = None,
) -> NewJob:
    return NewJob(
        id=job_id,
        name=name,
        queue=queue,
        payload={"month": "2026-10"} if payload is None else payload,
        enqueued_at=ms(subject, enqueued_at_ms),
        run_at=ms(subject, run_at_ms),
        max_attempts=max_attempts,
        enqueued_by=EnqueuedBy(
            correlation_id=f"corr-{job_id}",
            actor="user:u-1",
            tenant_id=tenant,
            traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ),
        idempotency_key=key,
    )


class JobStoreContract:
    """Every method and rule of the ``JobStore`` port docstring."""

    # -- helpers ------------------------------------------------------------------------

    def add(self, subject: JobStoreSubject, job: NewJob, *, dispatched: bool = False) -> str:
        return subject.store.add(job, dispatched=dispatched)

    def try_claim(
        self,
        subject: JobStoreSubject,
        job_id: str,
        at_ms: int = 0,
        *,
        peer: bool = False,
        worker: str | None = None,
        token: str | None = None,
    ) -> ClaimedJob | None:
        """``claim_job`` at ``at_ms`` by the store (or its peer), for ``LEASE_MS``."""
        store = subject.peer if peer else subject.store
        now = ms(subject, at_ms)
        return store.claim_job(job_id, now=now, lease_ms=LEASE_MS, token=token, worker=worker)

    def claim(
        self,
        subject: JobStoreSubject,
        job_id: str,
        at_ms: int = 0,
        *,
        worker: str | None = None,
        token: str | None = None,
    ) -> ClaimedJob:
        claimed = self.try_claim(subject, job_id, at_ms, worker=worker, token=token)
        assert claimed is not None, f"{job_id} should have been claimable"
        return claimed

    def take(
        self,
        subject: JobStoreSubject,
        at_ms: int,
        *,
        limit: int = 10,
        after_ms: int = REDISPATCH_MS,
        token: str | None = None,
        peer: bool = False,
    ) -> list[Dispatch]:
        """``take_due`` at ``at_ms`` by the store (or its peer)."""
        store = subject.peer if peer else subject.store
        now = ms(subject, at_ms)
        return store.take_due(now=now, limit=limit, redispatch_after_ms=after_ms, token=token)

    def fail(
        self,
        subject: JobStoreSubject,
        lease: JobLease,
        at_ms: int = 0,
        *,
        retry_at_ms: int | None = None,
        error: tuple[str, str] = ("X", "E"),
    ) -> None:
        """``fail`` the attempt of ``lease`` at ``at_ms``, dead unless ``retry_at_ms`` is given."""
        retry_at = None if retry_at_ms is None else ms(subject, retry_at_ms)
        code, error_type = error
        subject.store.fail(
            lease, now=ms(subject, at_ms), error_code=code, error_type=error_type, retry_at=retry_at
        )

    def found(self, subject: JobStoreSubject, job_id: str, *, peer: bool = False) -> StoredJob:
        """The job as the store (or its peer) finds it, for every tenant."""
        job = (subject.peer if peer else subject.store).find(job_id, tenant_id=None)
        assert job is not None, f"{job_id} should be kept"
        return job

    def status(self, subject: JobStoreSubject, job_id: str) -> JobStatus:
        return self.found(subject, job_id).status

    def pages(
        self,
        subject: JobStoreSubject,
        where: JobFilter | None = None,
        *,
        at_ms: int = 0,
        limit: int = 50,
    ) -> list[JobPage]:
        """Every page of a listing, the store and its peer asking in turn (one cursor serves
        every instance on the data); fails rather than loop when a cursor never ends."""
        where, now, stores = where or JobFilter(), ms(subject, at_ms), (subject.store, subject.peer)
        pages = [subject.store.list_page(where, now=now, limit=limit)]
        while (cursor := pages[-1].cursor) is not None:
            assert len(pages) <= 100, "the cursors never end"
            store = stores[len(pages) % 2]
            pages.append(store.list_page(where, now=now, limit=limit, cursor=cursor))
        for page in pages:
            assert len(page.jobs) <= limit, f"a page of {limit} holds {len(page.jobs)} jobs"
        return pages

    def listed(
        self,
        subject: JobStoreSubject,
        where: JobFilter | None = None,
        *,
        at_ms: int = 0,
        limit: int = 50,
    ) -> list[str]:
        """The ids of every job a listing reaches, page after page."""
        pages = self.pages(subject, where, at_ms=at_ms, limit=limit)
        return [job.id for page in pages for job in page.jobs]

    def _place(
        self,
        subject: JobStoreSubject,
        status: JobStatus,
        *,
        job_id: str | None = None,
        ended_ms: int = 2_000,
        max_attempts: int = 3,
    ) -> JobLease:
        """A job in ``status`` (named ``job-<status>`` unless ``job_id``), reached through the
        port: claimed at 0, its attempt ended at ``ended_ms`` (a failed one due 1 s later). The
        lease of its last attempt, or one it never had when it was never claimed."""
        job_id = job_id or f"job-{status}"
        self.add(subject, new_job(subject, job_id, max_attempts=max_attempts))
        if status is JobStatus.QUEUED:
            return JobLease(job_id, 1, "never-its-lease", ms(subject, LEASE_MS))
        lease = self.claim(subject, job_id).lease
        if status is JobStatus.SUCCEEDED:
            subject.store.complete(lease, now=ms(subject, ended_ms))
        elif status is JobStatus.FAILED:
            self.fail(subject, lease, at_ms=ended_ms, retry_at_ms=ended_ms + 1_000)
        elif status is JobStatus.DEAD:
            self.fail(subject, lease, at_ms=ended_ms)
        elif status is JobStatus.CANCELLED:
            assert subject.store.cancel(job_id, tenant_id=None, now=ms(subject, ended_ms))
        return lease

    # -- add, find ----------------------------------------------------------------------

    def test_an_added_job_is_queued_with_no_attempt_and_everything_it_was_given(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        payload = {"month": "2026-10", "ids": [1, 2.5, None, True], "note": "été ✓"}
        added = new_job(subject, "job-1", run_at_ms=5_000, tenant="t-1", key="k", payload=payload)

        assert self.add(subject, added) == "job-1"
        job = subject.peer.find("job-1", tenant_id=None)

        assert job is not None
        assert (job.id, job.name, job.queue, job.status) == ("job-1", JOB, "billing", "queued")
        assert job.payload == payload
        assert (job.enqueued_at, job.run_at) == (subject.start, ms(subject, 5_000))
        assert (job.attempts, job.max_attempts) == (0, 3)
        assert job.enqueued_by == added.enqueued_by
        assert job.tenant_id == "t-1"
        assert job.idempotency_key == "k"
        assert job.history == ()
        assert (job.progress, job.checkpoint, job.last_error_code, job.finished_at) == (
            None,
            None,
            None,
            None,
        )

    def test_an_unknown_job_is_not_found(self, job_store_subject: JobStoreSubject) -> None:
        assert job_store_subject.store.find("nope", tenant_id=None) is None

    def test_the_same_idempotency_key_in_the_same_tenant_keeps_the_first_job(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        first = self.add(subject, new_job(subject, "job-1", tenant="t-1", key="statement-10"))
        again = subject.peer.add(
            new_job(subject, "job-2", tenant="t-1", key="statement-10"), dispatched=False
        )

        assert (first, again) == ("job-1", "job-1")
        assert subject.store.find("job-2", tenant_id=None) is None
        assert len(subject.store.list_jobs()) == 1

    def test_an_idempotency_key_is_unique_per_tenant_only(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        ids = [
            self.add(subject, new_job(subject, "job-1", tenant="t-1", key="k")),
            self.add(subject, new_job(subject, "job-2", tenant="t-2", key="k")),
            self.add(subject, new_job(subject, "job-3", tenant=None, key="k")),
            self.add(subject, new_job(subject, "job-4", tenant=None, key="k")),
            self.add(subject, new_job(subject, "job-5", tenant="t-1")),
            self.add(subject, new_job(subject, "job-6", tenant="t-1")),
        ]

        assert ids == ["job-1", "job-2", "job-3", "job-3", "job-5", "job-6"]

    def test_find_reaches_the_jobs_of_its_tenant_only(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1", tenant="t-1"))
        self.add(subject, new_job(subject, "job-2"))

        assert subject.store.find("job-1", tenant_id="t-2") is None
        assert subject.store.find("job-2", tenant_id="t-1") is None
        found = subject.store.find("job-1", tenant_id="t-1")
        assert found is not None
        assert found.id == "job-1"
        assert subject.store.find("job-2", tenant_id=None) is not None

    def test_a_transactional_store_adds_only_when_its_unit_of_work_commits(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        unit_of_work = subject.unit_of_work
        if not subject.store.transactional or unit_of_work is None:
            # a store outside the transaction keeps what it is given at once
            self.add(subject, new_job(subject, "job-1"))
            assert self.status(subject, "job-1") is JobStatus.QUEUED
            return

        def failing_use_case() -> None:
            with unit_of_work.begin():
                self.add(subject, new_job(subject, "job-1"))
                raise RuntimeError("the use case fails")

        with pytest.raises(RuntimeError, match="the use case fails"):
            failing_use_case()
        with unit_of_work.begin():
            self.add(subject, new_job(subject, "job-2"))

        assert subject.peer.find("job-1", tenant_id=None) is None
        assert self.status(subject, "job-2") is JobStatus.QUEUED

    # -- add_many -----------------------------------------------------------------------

    def add_many(
        self, subject: JobStoreSubject, jobs: list[NewJob], *, dispatched: bool = False
    ) -> list[str]:
        """``add_many`` by the store, in a unit of work when the store writes in one."""
        if subject.store.transactional and subject.unit_of_work is not None:
            with subject.unit_of_work.begin():
                return subject.store.add_many(jobs, dispatched=dispatched)
        return subject.store.add_many(jobs, dispatched=dispatched)

    def test_add_many_keeps_every_job_as_add_would_and_answers_their_ids_in_order(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        jobs = [
            new_job(subject, "job-1", run_at_ms=5_000, tenant="t-1", key="k", payload={"n": 1}),
            new_job(subject, "job-2", name=OTHER_JOB, queue="mail", payload={"n": "été ✓"}),
            new_job(subject, "job-3", enqueued_at_ms=1, tenant="t-2", max_attempts=1),
        ]

        assert self.add_many(subject, jobs) == ["job-1", "job-2", "job-3"]
        for job in jobs:
            found = self.found(subject, job.id, peer=True)
            assert (found.name, found.queue, found.status) == (job.name, job.queue, "queued")
            assert (found.payload, found.enqueued_at, found.run_at) == (
                job.payload,
                job.enqueued_at,
                job.run_at,
            )
            assert (found.attempts, found.max_attempts) == (0, job.max_attempts)
            assert (found.enqueued_by, found.idempotency_key) == (
                job.enqueued_by,
                job.idempotency_key,
            )
        assert subject.store.stats().by_name == {
            JOB: {JobStatus.QUEUED: 2},
            OTHER_JOB: {JobStatus.QUEUED: 1},
        }
        assert [job.id for job in subject.store.list_jobs()] == ["job-3", "job-2", "job-1"]

    def test_add_many_keeps_the_first_job_of_each_idempotency_key_of_its_tenant(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add_many(subject, [new_job(subject, "job-1", tenant="t-1", key="a")])
        kept = self.add_many(
            subject,
            [
                new_job(subject, "job-2", tenant="t-1", key="a"),
                new_job(subject, "job-3", tenant="t-2", key="a"),
                new_job(subject, "job-4", tenant="t-1", key="b"),
                new_job(subject, "job-5", tenant="t-1", key="b"),
                new_job(subject, "job-6", key="b"),
            ],
        )

        assert kept == ["job-1", "job-3", "job-4", "job-4", "job-6"]
        assert sorted(job.id for job in subject.store.list_jobs()) == [
            "job-1",
            "job-3",
            "job-4",
            "job-6",
        ]

    def test_add_many_sent_again_keeps_one_of_each_and_answers_the_same_ids(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        jobs = [new_job(subject, f"job-{i}", key=f"k-{i}" if i % 2 else None) for i in range(6)]

        first = self.add_many(subject, jobs)
        again = self.add_many(subject, jobs)

        assert first == again == [job.id for job in jobs]
        assert len(subject.store.list_jobs()) == 6
        assert subject.store.stats().total(JobStatus.QUEUED) == 6

    def test_add_many_of_more_jobs_than_one_write_holds_keeps_them_all(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        count = ADD_MANY_BATCH * 2 + 1
        jobs = [new_job(subject, f"job-{i:05}", key=f"k-{i % (count - 1)}") for i in range(count)]

        kept = self.add_many(subject, jobs)

        assert kept[: count - 1] == [job.id for job in jobs[: count - 1]]
        assert kept[-1] == "job-00000"  # the last job's key is the first's
        assert subject.store.stats().total(JobStatus.QUEUED) == count - 1

    def test_add_many_dispatches_only_the_jobs_due_when_enqueued(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add_many(
            subject,
            [new_job(subject, "now"), new_job(subject, "later", run_at_ms=100)],
            dispatched=True,
        )

        # the due one was published by the caller: the relay leaves it until it is stale (or,
        # from an outbox, its grace is over)
        assert [d.job_id for d in self.take(subject, 100)] == ["later"]
        assert [d.job_id for d in self.take(subject, REDISPATCH_MS + 50)] == ["now"]

    def test_a_transactional_store_adds_a_batch_only_when_its_unit_of_work_commits(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        unit_of_work = subject.unit_of_work
        if not subject.store.transactional or unit_of_work is None:
            return  # a store outside the transaction: the previous tests add at once

        def failing_use_case() -> None:
            with unit_of_work.begin():
                subject.store.add_many(
                    [new_job(subject, "job-1"), new_job(subject, "job-2")], dispatched=False
                )
                raise RuntimeError("the use case fails")

        with pytest.raises(RuntimeError, match="the use case fails"):
            failing_use_case()

        assert subject.peer.list_jobs() == []

    def test_add_many_refuses_a_naive_instant_and_adds_nothing(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        naive = replace(new_job(subject, "job-2"), run_at=subject.start.replace(tzinfo=None))

        with pytest.raises(ValueError, match="aware"):
            self.add_many(subject, [new_job(subject, "job-1"), naive])
        assert subject.store.list_jobs() == []

    def test_add_many_of_no_job_adds_nothing(self, job_store_subject: JobStoreSubject) -> None:
        assert self.add_many(job_store_subject, []) == []
        assert job_store_subject.store.list_jobs() == []

    # -- claims -------------------------------------------------------------------------

    def test_a_due_job_is_claimed_for_one_more_attempt_under_a_lease(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))

        claimed = self.claim(subject, "job-1", at_ms=1_000)

        assert claimed.job.status is JobStatus.RUNNING
        assert claimed.job.attempts == 1
        assert claimed.lease.job_id == "job-1"
        assert claimed.lease.attempt == 1
        assert claimed.lease.token
        assert claimed.lease.expires_at == ms(subject, 1_000 + LEASE_MS)
        assert claimed.job.payload == {"month": "2026-10"}
        assert self.status(subject, "job-1") is JobStatus.RUNNING

    def test_a_claim_refuses_an_unknown_job(self, job_store_subject: JobStoreSubject) -> None:
        subject = job_store_subject
        assert self.try_claim(subject, "nope") is None

    def test_a_claim_refuses_a_job_before_its_run_at_and_changes_nothing(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1", run_at_ms=10_000))

        early = self.try_claim(subject, "job-1", 9_999)

        assert early is None
        job = self.found(subject, "job-1")
        assert (job.status, job.attempts) == (JobStatus.QUEUED, 0)
        assert self.claim(subject, "job-1", at_ms=10_000).lease.attempt == 1

    def test_a_running_job_is_claimed_once_even_by_another_instance(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))
        self.claim(subject, "job-1")

        assert self.try_claim(subject, "job-1", peer=True) is None
        assert self.try_claim(subject, "job-1") is None
        job = self.found(subject, "job-1")
        assert job.attempts == 1

    @pytest.mark.parametrize("end", ["succeeded", "dead", "cancelled"])
    def test_a_claim_refuses_a_finished_job(
        self, job_store_subject: JobStoreSubject, end: str
    ) -> None:
        subject = job_store_subject
        self._place(subject, JobStatus(end), job_id="job-1")

        assert self.try_claim(subject, "job-1", 5_000, peer=True) is None
        assert self.status(subject, "job-1") == end

    def test_a_claim_refuses_a_cancelled_job_that_never_ran(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))
        assert subject.store.cancel("job-1", tenant_id=None, now=subject.start)

        assert self.try_claim(subject, "job-1") is None

    def test_claim_due_takes_due_jobs_of_its_queues_earliest_first_up_to_its_limit(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "late", run_at_ms=3_000))
        self.add(subject, new_job(subject, "early", run_at_ms=1_000))
        self.add(subject, new_job(subject, "middle", run_at_ms=2_000))
        self.add(subject, new_job(subject, "other-queue", queue="mail", run_at_ms=0))
        self.add(subject, new_job(subject, "not-due", run_at_ms=9_000))

        first = subject.store.claim_due(
            ["billing"], now=ms(subject, 5_000), lease_ms=LEASE_MS, limit=2
        )
        rest = subject.peer.claim_due(
            ["billing"], now=ms(subject, 5_000), lease_ms=LEASE_MS, limit=10
        )

        assert [c.job.id for c in first] == ["early", "middle"]
        assert [c.job.id for c in rest] == ["late"]
        assert all(c.job.status is JobStatus.RUNNING and c.lease.attempt == 1 for c in first)
        assert self.status(subject, "other-queue") is JobStatus.QUEUED
        assert self.status(subject, "not-due") is JobStatus.QUEUED

    def test_claim_due_reads_several_queues(self, job_store_subject: JobStoreSubject) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "b", queue="billing", run_at_ms=2))
        self.add(subject, new_job(subject, "m", queue="mail", run_at_ms=1))
        self.add(subject, new_job(subject, "x", queue="other", run_at_ms=0))

        claimed = subject.store.claim_due(
            ["billing", "mail"], now=ms(subject, 10), lease_ms=LEASE_MS, limit=10
        )

        assert [c.job.id for c in claimed] == ["m", "b"]

    def test_claim_due_with_nothing_due_claims_nothing(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1", run_at_ms=1_000))

        assert (
            subject.store.claim_due(["billing"], now=subject.start, lease_ms=LEASE_MS, limit=5)
            == []
        )

    def test_instants_must_be_aware(self, job_store_subject: JobStoreSubject) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))
        naive = subject.start.replace(tzinfo=None)

        with pytest.raises(ValueError, match="aware"):
            subject.store.claim_job("job-1", now=naive, lease_ms=LEASE_MS)

    # -- the reports of an attempt -------------------------------------------------------

    def test_a_heartbeat_extends_the_lease(self, job_store_subject: JobStoreSubject) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))
        lease = self.claim(subject, "job-1").lease

        renewed = subject.peer.heartbeat(lease, now=ms(subject, 20_000), lease_ms=LEASE_MS)

        assert renewed.expires_at == ms(subject, 20_000 + LEASE_MS)
        assert (renewed.job_id, renewed.attempt, renewed.token) == (
            lease.job_id,
            lease.attempt,
            lease.token,
        )
        expired = subject.store.expire_leases(now=ms(subject, LEASE_MS + 1), limit=10)
        assert expired == []
        assert self.status(subject, "job-1") is JobStatus.RUNNING

    def test_the_claimed_lease_stays_good_after_a_heartbeat(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))
        claimed = self.claim(subject, "job-1").lease
        subject.store.heartbeat(claimed, now=ms(subject, 10_000), lease_ms=LEASE_MS)

        subject.store.update(claimed, progress={"done": 1}, set_progress=True)
        subject.peer.heartbeat(claimed, now=ms(subject, 20_000), lease_ms=LEASE_MS)
        subject.store.complete(claimed, now=ms(subject, 25_000))

        assert self.status(subject, "job-1") is JobStatus.SUCCEEDED

    def test_progress_and_checkpoint_are_saved_each_when_asked(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))
        lease = self.claim(subject, "job-1").lease

        subject.store.update(lease, progress={"done": 10, "of": 40}, set_progress=True)
        subject.store.update(lease, checkpoint={"after": "c-10"}, set_checkpoint=True)
        subject.store.update(lease, progress={"done": 20, "of": 40}, set_progress=True)
        renewed = subject.store.heartbeat(lease, now=ms(subject, 1), lease_ms=LEASE_MS)
        subject.store.update(renewed, progress=None, checkpoint=[1, 2], set_checkpoint=True)

        job = self.found(subject, "job-1", peer=True)
        assert job.progress == {"done": 20, "of": 40}
        assert job.checkpoint == [1, 2]

    def test_the_checkpoint_is_handed_to_the_next_attempt(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))
        lease = self.claim(subject, "job-1").lease
        subject.store.update(lease, checkpoint={"after": "c-10"}, set_checkpoint=True)
        self.fail(subject, lease, retry_at_ms=1_000, error=("UNEXPECTED_ERROR", "RuntimeError"))

        again = self.claim(subject, "job-1", at_ms=1_000)

        assert again.job.checkpoint == {"after": "c-10"}
        assert again.lease.attempt == 2

    def test_a_completed_job_has_succeeded(self, job_store_subject: JobStoreSubject) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))
        lease = self.claim(subject, "job-1").lease

        subject.peer.complete(lease, now=ms(subject, 2_000))

        job = self.found(subject, "job-1")
        assert (job.status, job.attempts, job.finished_at) == (
            JobStatus.SUCCEEDED,
            1,
            ms(subject, 2_000),
        )
        with pytest.raises(LostLeaseError):
            self.fail(subject, lease, at_ms=2_001)

    def test_a_failed_attempt_with_a_retry_waits_for_it(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))
        lease = self.claim(subject, "job-1").lease

        self.fail(
            subject, lease, at_ms=100, retry_at_ms=5_000, error=("JOB_TIMEOUT", "JobTimeoutError")
        )

        job = self.found(subject, "job-1", peer=True)
        assert (job.status, job.run_at, job.attempts, job.finished_at) == (
            JobStatus.FAILED,
            ms(subject, 5_000),
            1,
            None,
        )
        assert (job.last_error_code, job.last_error_type) == ("JOB_TIMEOUT", "JobTimeoutError")
        assert self.try_claim(subject, "job-1", 4_999) is None
        assert self.claim(subject, "job-1", at_ms=5_000).lease.attempt == 2

    def test_a_failed_attempt_without_a_retry_is_dead(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1", max_attempts=1))
        lease = self.claim(subject, "job-1").lease

        self.fail(subject, lease, at_ms=100, error=("BOOM", "BoomError"))

        job = self.found(subject, "job-1")
        assert (job.status, job.finished_at, job.last_error_code) == (
            JobStatus.DEAD,
            ms(subject, 100),
            "BOOM",
        )

    def test_a_released_job_is_queued_again_its_attempt_uncounted(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1", run_at_ms=0))
        lease = self.claim(subject, "job-1", at_ms=500).lease

        subject.store.release(lease, now=ms(subject, 1_000))

        job = self.found(subject, "job-1")
        assert (job.status, job.attempts, job.run_at) == (JobStatus.QUEUED, 0, ms(subject, 1_000))
        assert self.claim(subject, "job-1", at_ms=1_000).lease.attempt == 1
        with pytest.raises(LostLeaseError):
            subject.store.release(lease, now=ms(subject, 1_001))

    @pytest.mark.parametrize("report", ["heartbeat", "update", "complete", "fail", "release"])
    def test_the_reports_of_a_cancelled_attempt_are_refused_and_change_nothing(
        self, job_store_subject: JobStoreSubject, report: str
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))
        lease = self.claim(subject, "job-1").lease
        assert subject.peer.cancel("job-1", tenant_id=None, now=ms(subject, 10))

        with pytest.raises(LostLeaseError):
            self._report(subject, lease, report)

        job = self.found(subject, "job-1")
        assert (job.status, job.progress) == (JobStatus.CANCELLED, None)

    @pytest.mark.parametrize("report", ["heartbeat", "update", "complete", "fail", "release"])
    def test_the_reports_of_an_expired_lease_claimed_again_are_refused(
        self, job_store_subject: JobStoreSubject, report: str
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))
        stale = self.claim(subject, "job-1").lease
        assert len(subject.peer.expire_leases(now=ms(subject, LEASE_MS + 1), limit=10)) == 1
        current = self.claim(subject, "job-1", at_ms=LEASE_MS + 1).lease

        with pytest.raises(LostLeaseError):
            self._report(subject, stale, report)

        job = self.found(subject, "job-1")
        assert (job.status, job.attempts, job.progress) == (JobStatus.RUNNING, 2, None)
        subject.store.complete(current, now=ms(subject, LEASE_MS + 2))
        assert self.status(subject, "job-1") is JobStatus.SUCCEEDED

    def test_a_forged_lease_is_refused(self, job_store_subject: JobStoreSubject) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))
        lease = self.claim(subject, "job-1").lease
        forged = JobLease(lease.job_id, lease.attempt, "not-the-token", lease.expires_at)
        unknown = JobLease("nope", 1, lease.token, lease.expires_at)

        with pytest.raises(LostLeaseError):
            subject.store.complete(forged, now=subject.start)
        with pytest.raises(LostLeaseError):
            subject.store.complete(unknown, now=subject.start)
        assert self.status(subject, "job-1") is JobStatus.RUNNING

    def _report(self, subject: JobStoreSubject, lease: JobLease, report: str) -> None:
        store, now = subject.store, ms(subject, 20)
        if report == "heartbeat":
            store.heartbeat(lease, now=now, lease_ms=LEASE_MS)
        elif report == "update":
            store.update(lease, progress={"done": 1}, set_progress=True)
        elif report == "complete":
            store.complete(lease, now=now)
        elif report == "fail":
            store.fail(lease, now=now, error_code="X", error_type="E", retry_at=now)
        else:
            store.release(lease, now=now)

    # -- cancel, retry_dead ---------------------------------------------------------------

    @pytest.mark.parametrize("before", ["queued", "failed", "running"])
    def test_a_queued_failed_or_running_job_is_cancelled(
        self, job_store_subject: JobStoreSubject, before: str
    ) -> None:
        subject = job_store_subject
        self._place(subject, JobStatus(before), job_id="job-1")
        assert self.status(subject, "job-1") == before

        assert subject.store.cancel("job-1", tenant_id=None, now=ms(subject, 5_000)) is True

        job = self.found(subject, "job-1", peer=True)
        assert (job.status, job.finished_at) == (JobStatus.CANCELLED, ms(subject, 5_000))

    def test_a_finished_or_unknown_job_is_not_cancelled(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))
        subject.store.complete(self.claim(subject, "job-1").lease, now=subject.start)

        assert subject.store.cancel("job-1", tenant_id=None, now=subject.start) is False
        assert subject.store.cancel("nope", tenant_id=None, now=subject.start) is False
        assert self.status(subject, "job-1") is JobStatus.SUCCEEDED

    def test_cancel_reaches_the_jobs_of_its_tenant_only(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1", tenant="t-1"))
        self.add(subject, new_job(subject, "job-2", tenant="t-1"))

        assert subject.store.cancel("job-1", tenant_id="t-2", now=subject.start) is False
        assert self.status(subject, "job-1") is JobStatus.QUEUED
        assert subject.store.cancel("job-1", tenant_id="t-1", now=subject.start) is True
        assert subject.store.cancel("job-2", tenant_id=None, now=subject.start) is True

    def test_a_dead_job_is_queued_again_by_retry_dead(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1", max_attempts=1, tenant="t-1"))
        lease = self.claim(subject, "job-1").lease
        self.fail(subject, lease)

        assert subject.store.retry_dead("job-1", tenant_id="t-2", now=ms(subject, 50)) is False
        assert subject.peer.retry_dead("job-1", tenant_id="t-1", now=ms(subject, 100)) is True

        job = self.found(subject, "job-1")
        assert (job.status, job.attempts, job.run_at, job.finished_at) == (
            JobStatus.QUEUED,
            0,
            ms(subject, 100),
            None,
        )
        assert self.claim(subject, "job-1", at_ms=100).lease.attempt == 1

    @pytest.mark.parametrize("before", ["queued", "running", "succeeded"])
    def test_retry_dead_refuses_a_job_that_is_not_dead(
        self, job_store_subject: JobStoreSubject, before: str
    ) -> None:
        subject = job_store_subject
        self._place(subject, JobStatus(before), job_id="job-1")

        assert subject.store.retry_dead("job-1", tenant_id=None, now=ms(subject, 5_000)) is False
        assert subject.store.retry_dead("nope", tenant_id=None, now=ms(subject, 5_000)) is False
        assert self.status(subject, "job-1") == before

    # -- operators --------------------------------------------------------------------------

    def test_list_jobs_filters_by_status_and_tenant_most_recent_first(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        for index in range(5):
            tenant = "t-1" if index % 2 == 0 else "t-2"
            self.add(subject, new_job(subject, f"job-{index}", enqueued_at_ms=index, tenant=tenant))
        subject.store.complete(self.claim(subject, "job-4").lease, now=subject.start)

        every = subject.store.list_jobs()
        queued = subject.store.list_jobs(status=JobStatus.QUEUED)
        of_t1 = subject.store.list_jobs(tenant_id="t-1")
        two = subject.store.list_jobs(limit=2)

        assert [j.id for j in every] == ["job-4", "job-3", "job-2", "job-1", "job-0"]
        assert [j.id for j in queued] == ["job-3", "job-2", "job-1", "job-0"]
        assert [j.id for j in of_t1] == ["job-4", "job-2", "job-0"]
        assert [j.id for j in two] == ["job-4", "job-3"]

    @pytest.mark.parametrize("status", list(JobStatus))
    def test_list_jobs_reads_each_status_due_or_not(
        self, job_store_subject: JobStoreSubject, status: JobStatus
    ) -> None:
        subject = job_store_subject
        self._one_job_in_each_state(subject)
        states = [state.value for state in reversed(JobState) if state.status is status]

        assert [job.id for job in subject.peer.list_jobs(status=status)] == states
        assert [job.id for job in subject.store.list_jobs(status=status, limit=1)] == states[:1]

    def test_purge_finished_deletes_what_finished_before_the_instant(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        for job_id, status, ended_ms in (
            ("done-early", JobStatus.SUCCEEDED, 10),
            ("done-late", JobStatus.SUCCEEDED, 1_000),
            ("cancelled", JobStatus.CANCELLED, 20),
            ("dead", JobStatus.DEAD, 30),
            ("queued", JobStatus.QUEUED, 0),
            ("running", JobStatus.RUNNING, 0),
        ):
            self._place(subject, status, job_id=job_id, ended_ms=ended_ms)

        assert subject.store.purge_finished(before=ms(subject, 500)) == 3

        left = {job.id for job in subject.peer.list_jobs()}
        assert left == {"done-late", "queued", "running"}

    def test_stats_count_the_jobs_of_each_queue_in_each_status(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "b-1"))
        self.add(subject, new_job(subject, "b-2"))
        self.add(subject, new_job(subject, "b-3"))
        self.add(subject, new_job(subject, "m-1", queue="mail"))
        self.claim(subject, "b-3")

        stats = subject.store.stats()

        assert {q: dict(c) for q, c in stats.counts.items()} == {
            "billing": {JobStatus.QUEUED: 2, JobStatus.RUNNING: 1},
            "mail": {JobStatus.QUEUED: 1},
        }
        assert stats.total(JobStatus.QUEUED) == 3
        assert stats.total(JobStatus.DEAD) == 0

    def test_stats_count_the_jobs_of_each_name_in_each_status(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "c-1"))
        self.add(subject, new_job(subject, "c-2", queue="mail"))
        self.add(subject, new_job(subject, "c-3"))
        self.add(subject, new_job(subject, "r-1", name=OTHER_JOB))
        self.add(subject, new_job(subject, "r-2", name=OTHER_JOB, queue="mail"))
        subject.store.complete(self.claim(subject, "c-3").lease, now=ms(subject, 1))
        self.claim(subject, "r-2")

        stats = subject.peer.stats()

        assert {name: dict(c) for name, c in stats.by_name.items()} == {
            JOB: {JobStatus.QUEUED: 2, JobStatus.SUCCEEDED: 1},
            OTHER_JOB: {JobStatus.QUEUED: 1, JobStatus.RUNNING: 1},
        }
        assert {q: dict(c) for q, c in stats.counts.items()} == {
            "billing": {JobStatus.QUEUED: 2, JobStatus.SUCCEEDED: 1},
            "mail": {JobStatus.QUEUED: 1, JobStatus.RUNNING: 1},
        }

    def test_stats_agree_with_the_jobs_kept_after_every_move_and_purge(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        """However a store counts (counters, an index), its counts are the jobs it keeps: a
        move, a report sent twice and a purge each leave them right; a count of 0 is left out."""
        subject, store = job_store_subject, job_store_subject.store
        assert self._stats_of(subject) == ({}, {})
        self.add(subject, new_job(subject, "a", max_attempts=2))
        self.add(subject, new_job(subject, "b", name=OTHER_JOB, queue="mail"))
        self.add(subject, new_job(subject, "c", name=OTHER_JOB))
        self._assert_stats_agree(subject)
        lease = self.claim(subject, "a").lease
        self.fail(subject, lease, at_ms=1, retry_at_ms=2)
        self.fail(subject, lease, at_ms=1, retry_at_ms=2)  # sent twice: one
        self._assert_stats_agree(subject)
        self.claim(subject, "a", at_ms=2)
        store.expire_leases(now=ms(subject, LEASE_MS + 3), limit=10)  # dead: attempts exhausted
        self._assert_stats_agree(subject)
        assert store.retry_dead("a", tenant_id=None, now=ms(subject, LEASE_MS + 4))
        store.release(self.claim(subject, "a", at_ms=LEASE_MS + 4).lease, now=ms(subject, 40_000))
        self._assert_stats_agree(subject)
        done = self.claim(subject, "b").lease
        store.complete(done, now=ms(subject, 40_001))
        store.complete(done, now=ms(subject, 40_002))
        assert store.cancel("c", tenant_id=None, now=ms(subject, 40_003))
        assert store.cancel("c", tenant_id=None, now=ms(subject, 40_004))
        self._assert_stats_agree(subject)

        assert store.purge_finished(before=ms(subject, 50_000)) == 2

        self._assert_stats_agree(subject)
        assert self._stats_of(subject) == (
            {"billing": {JobStatus.QUEUED: 1}},
            {JOB: {JobStatus.QUEUED: 1}},
        )

    def _stats_of(
        self, subject: JobStoreSubject
    ) -> tuple[dict[str, dict[JobStatus, int]], dict[str, dict[JobStatus, int]]]:
        stats = subject.peer.stats()
        by_queue = {queue: dict(counts) for queue, counts in stats.counts.items()}
        return by_queue, {name: dict(counts) for name, counts in stats.by_name.items()}

    def _assert_stats_agree(self, subject: JobStoreSubject) -> None:
        """``stats`` counts what a listing of every job finds, by queue and by name."""
        by_queue: dict[str, dict[JobStatus, int]] = {}
        by_name: dict[str, dict[JobStatus, int]] = {}
        for page in self.pages(subject):
            for job in page.jobs:
                for counts in (
                    by_queue.setdefault(job.queue, {}),
                    by_name.setdefault(job.name, {}),
                ):
                    counts[job.status] = counts.get(job.status, 0) + 1
        assert self._stats_of(subject) == (by_queue, by_name)

    # -- listing, page by page ---------------------------------------------------------------

    def _one_job_in_each_state(self, subject: JobStoreSubject) -> None:
        """From 2 s, one job in each ``JobState``, named after it; the scheduled one is due at
        10 s, the retrying one was due again at 3 s."""
        for index, state in enumerate(JobState):
            run_at = 10_000 if state is JobState.SCHEDULED else 0
            self.add(subject, new_job(subject, state.value, run_at_ms=run_at, enqueued_at_ms=index))
        leases = {
            state: self.claim(subject, state.value, at_ms=1_000).lease
            for state in (JobState.RUNNING, JobState.RETRYING, JobState.DEAD, JobState.SUCCEEDED)
        }
        self.fail(subject, leases[JobState.RETRYING], at_ms=2_000, retry_at_ms=3_000)
        self.fail(subject, leases[JobState.DEAD], at_ms=2_000)
        subject.store.complete(leases[JobState.SUCCEEDED], now=ms(subject, 2_000))
        assert subject.store.cancel(
            JobState.CANCELLED.value, tenant_id=None, now=ms(subject, 2_000)
        )

    @pytest.mark.parametrize("state", list(JobState))
    def test_list_page_filters_by_state(
        self, job_store_subject: JobStoreSubject, state: JobState
    ) -> None:
        subject = job_store_subject
        self._one_job_in_each_state(subject)

        page = subject.peer.list_page(JobFilter(state=state), now=ms(subject, 5_000))

        assert [job.id for job in page.jobs] == [state.value]
        assert page.cursor is None
        assert page.jobs[0].state(ms(subject, 5_000)) is state

    def test_a_queued_job_is_scheduled_until_its_run_at_and_ready_from_it(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self._one_job_in_each_state(subject)
        scheduled, ready = JobFilter(state=JobState.SCHEDULED), JobFilter(state=JobState.READY)
        retrying = JobFilter(state=JobState.RETRYING)

        assert self.listed(subject, scheduled, at_ms=9_999) == ["scheduled"]
        assert self.listed(subject, ready, at_ms=9_999) == ["ready"]
        assert self.listed(subject, scheduled, at_ms=10_000) == []
        assert self.listed(subject, ready, at_ms=10_000) == ["ready", "scheduled"]
        # a failed job due again is still retrying, not ready: its attempts tell another story
        assert self.listed(subject, retrying, at_ms=10_000) == ["retrying"]

    def test_list_page_without_a_filter_lists_every_job_most_recently_enqueued_first(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self._one_job_in_each_state(subject)

        listed = self.listed(subject, at_ms=5_000)

        assert listed == [state.value for state in reversed(JobState)]

    def test_list_page_filters_by_name_queue_and_tenant(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        jobs = [
            ("a", JOB, "billing", "t-1"),
            ("b", OTHER_JOB, "billing", "t-2"),
            ("c", JOB, "mail", None),
            ("d", OTHER_JOB, "mail", "t-1"),
        ]
        for index, (job_id, name, queue, tenant) in enumerate(jobs):
            job = new_job(
                subject, job_id, name=name, queue=queue, tenant=tenant, enqueued_at_ms=index
            )
            self.add(subject, job)

        assert self.listed(subject, JobFilter(name=JOB)) == ["c", "a"]
        assert self.listed(subject, JobFilter(name=OTHER_JOB)) == ["d", "b"]
        assert self.listed(subject, JobFilter(queue="mail")) == ["d", "c"]
        assert self.listed(subject, JobFilter(tenant_id="t-1")) == ["d", "a"]
        assert self.listed(subject, JobFilter(tenant_id="t-3")) == []
        assert self.listed(subject, JobFilter(name=OTHER_JOB, tenant_id="t-1")) == ["d"]
        assert self.listed(subject, JobFilter(name=JOB, queue="billing")) == ["a"]
        assert self.listed(subject, JobFilter(name="billing.unknown")) == []

    def test_list_page_filters_by_when_a_job_was_enqueued_and_finished(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        for index in range(5):
            self.add(subject, new_job(subject, f"e{index}", enqueued_at_ms=index * 1_000))
        subject.store.complete(self.claim(subject, "e1", at_ms=4_500).lease, now=ms(subject, 5_000))
        subject.store.complete(self.claim(subject, "e2", at_ms=4_500).lease, now=ms(subject, 6_000))
        assert subject.store.cancel("e3", tenant_id=None, now=ms(subject, 7_000))

        def since(enqueued: int | None = None, finished: int | None = None) -> list[str]:
            where = JobFilter(
                enqueued_since=None if enqueued is None else ms(subject, enqueued),
                finished_since=None if finished is None else ms(subject, finished),
            )
            return self.listed(subject, where, at_ms=8_000)

        assert since(enqueued=2_000) == ["e4", "e3", "e2"]
        assert since(enqueued=2_001) == ["e4", "e3"]
        assert since(finished=6_000) == ["e3", "e2"]
        assert since(finished=6_001) == ["e3"]
        assert since(finished=0) == ["e3", "e2", "e1"]  # never a job not finished
        assert since(enqueued=2_000, finished=0) == ["e3", "e2"]

    def test_list_page_combines_every_filter(self, job_store_subject: JobStoreSubject) -> None:
        subject = job_store_subject
        # each decoy misses the filter on one field only
        jobs: dict[str, dict[str, Any]] = {
            "hit": {"enqueued_at_ms": 2_000},
            "hit-2": {"enqueued_at_ms": 2_500},
            "other-name": {"name": OTHER_JOB},
            "other-queue": {"queue": "mail"},
            "other-tenant": {"tenant": "t-2"},
            "no-tenant": {"tenant": None},
            "enqueued-early": {"enqueued_at_ms": 0},
            "finished-early": {},
            "cancelled": {},
        }
        for job_id, fields in jobs.items():
            self.add(
                subject,
                new_job(subject, job_id, **{"enqueued_at_ms": 1_500, "tenant": "t-1", **fields}),
            )
        for job_id in jobs:
            if job_id == "cancelled":
                assert subject.store.cancel(job_id, tenant_id=None, now=ms(subject, 5_000))
                continue
            lease = self.claim(subject, job_id, at_ms=3_000).lease
            finished_at = 3_500 if job_id == "finished-early" else 5_000
            subject.store.complete(lease, now=ms(subject, finished_at))
        where = JobFilter(
            state=JobState.SUCCEEDED,
            name=JOB,
            queue="billing",
            tenant_id="t-1",
            enqueued_since=ms(subject, 1_000),
            finished_since=ms(subject, 4_000),
        )

        assert self.listed(subject, where, at_ms=6_000) == ["hit-2", "hit"]
        assert self.listed(subject, where, at_ms=6_000, limit=1) == ["hit-2", "hit"]
        assert all(
            where.matches(job, ms(subject, 6_000))
            for page in self.pages(subject, where)
            for job in page.jobs
        )

    def _add_in_listing_order(self, subject: JobStoreSubject) -> list[str]:
        """Nine jobs in three groups enqueued at the same instant, their ids added out of
        order: what a listing of them must answer, (enqueued_at, id) descending."""
        for index in range(9):
            job_id = f"job-{(index * 4) % 9}"
            self.add(subject, new_job(subject, job_id, enqueued_at_ms=(index // 3) * 1_000))
        # groups at 0, 1 and 2 s: {0, 4, 8}, {3, 7, 2}, {6, 1, 5}
        return [f"job-{i}" for i in (6, 5, 1, 7, 3, 2, 8, 4, 0)]

    @pytest.mark.parametrize(
        ("limit", "sizes"), [(4, [4, 4, 1]), (3, [3, 3, 3]), (9, [9]), (50, [9])]
    )
    def test_list_page_pages_through_every_job_without_gaps_or_repeats(
        self, job_store_subject: JobStoreSubject, limit: int, sizes: list[int]
    ) -> None:
        subject = job_store_subject
        expected = self._add_in_listing_order(subject)

        pages = self.pages(subject, limit=limit)

        assert [job.id for page in pages for job in page.jobs] == expected
        assert [len(page.jobs) for page in pages] == sizes  # the last page ends: no empty one
        assert [page.cursor is None for page in pages] == [False] * (len(sizes) - 1) + [True]

    def test_a_filtered_listing_pages_through_every_job_it_reaches(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        expected = self._add_in_listing_order(subject)
        for job_id in expected[1::2]:
            subject.store.complete(
                self.claim(subject, job_id, at_ms=5_000).lease, now=ms(subject, 6_000)
            )
        queued = JobFilter(state=JobState.READY, queue="billing", tenant_id=None)
        finished = JobFilter(finished_since=ms(subject, 6_000), name=JOB)

        for limit in (1, 2, 3):
            assert self.listed(subject, queued, at_ms=7_000, limit=limit) == expected[0::2]
            assert self.listed(subject, finished, at_ms=7_000, limit=limit) == expected[1::2]

    def test_jobs_added_between_pages_are_listed_in_their_place_never_twice(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        for index in range(1, 7):
            self.add(subject, new_job(subject, f"j{index}", enqueued_at_ms=index * 1_000))
        first = subject.store.list_page(JobFilter(), now=subject.start, limit=3)
        assert [job.id for job in first.jobs] == ["j6", "j5", "j4"]
        assert first.cursor is not None

        # after the cursor (j4 at 4 s): older, or enqueued with j4 and a smaller id
        self.add(subject, new_job(subject, "newer", enqueued_at_ms=9_000))
        self.add(subject, new_job(subject, "j5a", enqueued_at_ms=4_000))
        self.add(subject, new_job(subject, "j3a", enqueued_at_ms=4_000))
        self.add(subject, new_job(subject, "older", enqueued_at_ms=500))
        subject.store.complete(self.claim(subject, "j2").lease, now=ms(subject, 1))
        second = subject.peer.list_page(
            JobFilter(), now=subject.start, limit=3, cursor=first.cursor
        )
        assert second.cursor is not None
        third = subject.store.list_page(
            JobFilter(), now=subject.start, limit=3, cursor=second.cursor
        )

        assert [job.id for job in second.jobs] == ["j3a", "j3", "j2"]
        assert [job.id for job in third.jobs] == ["j1", "older"]
        assert third.cursor is None
        assert second.jobs[2].status is JobStatus.SUCCEEDED

    def test_a_listing_reaching_nothing_is_one_empty_page(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        empty = subject.store.list_page(JobFilter(), now=subject.start)
        self.add(subject, new_job(subject, "job-1"))
        none = subject.store.list_page(JobFilter(state=JobState.DEAD), now=subject.start)

        assert (empty.jobs, empty.cursor) == ([], None)
        assert (none.jobs, none.cursor) == ([], None)

    @pytest.mark.parametrize("cursor", ["", "not a cursor", "%%%", "\x00"])
    def test_a_cursor_the_store_did_not_give_is_refused(
        self, job_store_subject: JobStoreSubject, cursor: str
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))

        with pytest.raises(ValueError, match="cursor"):
            subject.store.list_page(JobFilter(), now=subject.start, cursor=cursor)

    @pytest.mark.parametrize("limit", [0, -1])
    def test_list_page_refuses_a_limit_that_is_not_positive(
        self, job_store_subject: JobStoreSubject, limit: int
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))

        with pytest.raises(ValueError, match="limit"):
            subject.store.list_page(JobFilter(), now=subject.start, limit=limit)

    @pytest.mark.parametrize("naive", ["now", "enqueued_since", "finished_since"])
    def test_list_page_refuses_a_naive_instant(
        self, job_store_subject: JobStoreSubject, naive: str
    ) -> None:
        subject = job_store_subject
        aware, unaware = subject.start, subject.start.replace(tzinfo=None)
        store = subject.store

        asked = {
            "now": lambda: store.list_page(JobFilter(), now=unaware),
            "enqueued_since": lambda: store.list_page(JobFilter(enqueued_since=unaware), now=aware),
            "finished_since": lambda: store.list_page(JobFilter(finished_since=unaware), now=aware),
        }

        with pytest.raises(ValueError, match="aware"):
            asked[naive]()

    # -- each attempt's record ---------------------------------------------------------------

    @pytest.mark.parametrize("call", ["claim_job", "claim_due"])
    def test_a_claim_starts_an_attempt_record_on_its_worker(
        self, job_store_subject: JobStoreSubject, call: str
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))
        now = ms(subject, 1_000)

        if call == "claim_job":
            claimed = subject.store.claim_job("job-1", now=now, lease_ms=LEASE_MS, worker=WORKER)
            assert claimed is not None
        else:
            claims = subject.store.claim_due(
                ["billing"], now=now, lease_ms=LEASE_MS, limit=5, worker=WORKER
            )
            assert len(claims) == 1

        assert self.found(subject, "job-1", peer=True).history == (AttemptRecord(1, now, WORKER),)

    def test_a_claim_naming_no_worker_records_none(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))
        self.claim(subject, "job-1", at_ms=5)

        assert self.found(subject, "job-1").history == (AttemptRecord(1, ms(subject, 5), None),)

    @pytest.mark.parametrize(
        ("conclusion", "outcome", "error"),
        [
            ("complete", AttemptState.SUCCEEDED, (None, None)),
            ("fail with a retry", AttemptState.FAILED, ("JOB_TIMEOUT", "JobTimeoutError")),
            ("fail for the last time", AttemptState.FAILED, ("BOOM", "BoomError")),
            ("release", AttemptState.RELEASED, (None, None)),
            ("cancel", AttemptState.CANCELLED, (None, None)),
            (
                "expire_leases",
                AttemptState.INTERRUPTED,
                (JOB_INTERRUPTED, JobInterruptedError.__name__),
            ),
        ],
    )
    def test_each_conclusion_ends_the_attempt_record_with_its_outcome(
        self,
        job_store_subject: JobStoreSubject,
        conclusion: str,
        outcome: AttemptState,
        error: tuple[str | None, str | None],
    ) -> None:
        subject, store = job_store_subject, job_store_subject.store
        self.add(subject, new_job(subject, "job-1"))
        lease = self.claim(subject, "job-1", at_ms=1_000, worker=WORKER).lease
        ended_at = 1_000 + LEASE_MS + 1 if conclusion == "expire_leases" else 2_000
        now = ms(subject, ended_at)

        if conclusion == "complete":
            store.complete(lease, now=now)
        elif conclusion == "fail with a retry":
            self.fail(
                subject,
                lease,
                at_ms=ended_at,
                retry_at_ms=3_000,
                error=("JOB_TIMEOUT", "JobTimeoutError"),
            )
        elif conclusion == "fail for the last time":
            self.fail(subject, lease, at_ms=ended_at, error=("BOOM", "BoomError"))
        elif conclusion == "release":
            store.release(lease, now=now)
        elif conclusion == "cancel":
            assert store.cancel("job-1", tenant_id=None, now=now)
        else:
            [expired] = store.expire_leases(now=now, limit=10)
            assert expired.history == self.found(subject, "job-1").history

        record = AttemptRecord(1, ms(subject, 1_000), WORKER, outcome, now, *error)
        assert self.found(subject, "job-1", peer=True).history == (record,)

    def test_the_history_tells_each_attempt_oldest_first(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject, store = job_store_subject, job_store_subject.store
        expired_at = 4_000 + LEASE_MS + 1
        self.add(subject, new_job(subject, "job-1", max_attempts=3))
        store.release(
            self.claim(subject, "job-1", 1_000, worker="w-1").lease, now=ms(subject, 1_500)
        )
        lease = self.claim(subject, "job-1", 2_000, worker="w-2").lease
        self.fail(
            subject, lease, at_ms=3_000, retry_at_ms=4_000, error=("JOB_TIMEOUT", "JobTimeoutError")
        )
        self.claim(subject, "job-1", 4_000, worker="w-1")
        store.expire_leases(now=ms(subject, expired_at), limit=10)
        last = self.claim(subject, "job-1", expired_at, worker="w-3").lease
        store.complete(last, now=ms(subject, expired_at + 100))

        history = self.found(subject, "job-1", peer=True).history

        at = partial(ms, subject)
        assert history == (
            AttemptRecord(1, at(1_000), "w-1", AttemptState.RELEASED, at(1_500)),
            AttemptRecord(
                1,
                at(2_000),
                "w-2",
                AttemptState.FAILED,
                at(3_000),
                "JOB_TIMEOUT",
                "JobTimeoutError",
            ),
            AttemptRecord(
                2,
                at(4_000),
                "w-1",
                AttemptState.INTERRUPTED,
                at(expired_at),
                JOB_INTERRUPTED,
                JobInterruptedError.__name__,
            ),
            AttemptRecord(3, at(expired_at), "w-3", AttemptState.SUCCEEDED, at(expired_at + 100)),
        )

    @pytest.mark.parametrize("call", ["claim_job", "claim_due"])
    def test_a_claim_repeated_with_its_token_appends_no_record(
        self, job_store_subject: JobStoreSubject, call: str
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))

        for store, at in ((subject.store, 10), (subject.peer, 1_010)):
            if call == "claim_job":
                store.claim_job(
                    "job-1", now=ms(subject, at), lease_ms=LEASE_MS, token="a", worker=WORKER
                )
            else:
                store.claim_due(
                    ["billing"],
                    now=ms(subject, at),
                    lease_ms=LEASE_MS,
                    limit=5,
                    token="a",
                    worker=WORKER,
                )

        assert self.found(subject, "job-1").history == (AttemptRecord(1, ms(subject, 10), WORKER),)

    def test_the_history_keeps_the_last_attempts_only(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        total = ATTEMPTS_KEPT + 3
        self.add(subject, new_job(subject, "job-1", max_attempts=total))
        for attempt in range(1, total + 1):
            lease = self.claim(subject, "job-1", attempt * 10, worker=f"w-{attempt}").lease
            retry_at_ms = None if attempt == total else (attempt + 1) * 10
            self.fail(subject, lease, at_ms=attempt * 10 + 1, retry_at_ms=retry_at_ms)

        job = self.found(subject, "job-1", peer=True)

        assert (job.status, job.attempts) == (JobStatus.DEAD, total)
        assert len(job.history) == ATTEMPTS_KEPT
        assert [record.number for record in job.history] == list(range(4, total + 1))
        assert [record.worker for record in job.history] == [f"w-{n}" for n in range(4, total + 1)]
        assert all(record.outcome is AttemptState.FAILED for record in job.history)
        assert job.history[-1].ended_at == ms(subject, total * 10 + 1)

    def test_retry_dead_keeps_the_history(self, job_store_subject: JobStoreSubject) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1", max_attempts=1))
        self.fail(subject, self.claim(subject, "job-1", 10, worker="w-1").lease, at_ms=20)
        dead = self.found(subject, "job-1").history

        assert subject.store.retry_dead("job-1", tenant_id=None, now=ms(subject, 30))
        retried = self.found(subject, "job-1").history
        self.claim(subject, "job-1", 40, worker="w-2")

        assert retried == dead
        assert self.found(subject, "job-1", peer=True).history == (
            AttemptRecord(
                1, ms(subject, 10), "w-1", AttemptState.FAILED, ms(subject, 20), "X", "E"
            ),
            AttemptRecord(1, ms(subject, 40), "w-2"),
        )

    @pytest.mark.parametrize("before", ["queued", "failed"])
    def test_a_cancel_of_a_job_not_running_leaves_its_history(
        self, job_store_subject: JobStoreSubject, before: str
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))
        if before == "failed":
            self.fail(
                subject, self.claim(subject, "job-1", worker=WORKER).lease, at_ms=5, retry_at_ms=9
            )
        history = self.found(subject, "job-1").history

        assert subject.store.cancel("job-1", tenant_id=None, now=ms(subject, 7))

        assert self.found(subject, "job-1").history == history
        assert len(history) == (0 if before == "queued" else 1)

    # -- retention ---------------------------------------------------------------------------

    def test_purge_finished_deletes_only_the_statuses_it_is_given(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        for job_id, status in (
            ("s", JobStatus.SUCCEEDED),
            ("c", JobStatus.CANCELLED),
            ("d", JobStatus.DEAD),
        ):
            self._place(subject, status, job_id=job_id, ended_ms=10)
        retained = {JobStatus.SUCCEEDED, JobStatus.CANCELLED}

        assert subject.store.purge_finished(before=ms(subject, 500), statuses=retained) == 2

        assert self.listed(subject) == ["d"]
        assert subject.peer.find("s", tenant_id=None) is None
        assert self.listed(subject, JobFilter(state=JobState.SUCCEEDED)) == []
        assert subject.peer.purge_finished(before=ms(subject, 500), statuses={JobStatus.DEAD}) == 1
        assert self.listed(subject) == []

    def test_purge_finished_deletes_at_most_its_limit_the_oldest_finished_first(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        finished = [
            ("j3", JobStatus.SUCCEEDED, 10),
            ("j0", JobStatus.CANCELLED, 20),
            ("j4", JobStatus.DEAD, 30),
            ("j1", JobStatus.SUCCEEDED, 40),
            ("j2", JobStatus.CANCELLED, 50),
            ("at-before", JobStatus.SUCCEEDED, 1_000),
        ]
        for job_id, status, at_ms in sorted(finished):
            self._place(subject, status, job_id=job_id, ended_ms=at_ms)
        before = ms(subject, 1_000)
        left = []

        for store in (subject.store, subject.peer, subject.store, subject.peer):
            purged = store.purge_finished(before=before, limit=2)
            left.append((purged, set(self.listed(subject))))

        assert left == [
            (2, {"j4", "j1", "j2", "at-before"}),
            (2, {"j2", "at-before"}),
            (1, {"at-before"}),
            (0, {"at-before"}),
        ]

    def test_purge_finished_frees_the_idempotency_keys_of_the_jobs_it_deletes(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1", tenant="t-1", key="statement-10"))
        self.add(subject, new_job(subject, "kept", tenant="t-1", key="statement-11"))
        subject.store.complete(self.claim(subject, "job-1").lease, now=ms(subject, 10))

        assert subject.store.purge_finished(before=ms(subject, 500)) == 1

        assert (
            self.add(subject, new_job(subject, "job-2", tenant="t-1", key="statement-10"))
            == "job-2"
        )
        assert (
            self.add(subject, new_job(subject, "job-3", tenant="t-1", key="statement-11")) == "kept"
        )
        assert set(self.listed(subject)) == {"job-2", "kept"}

    @pytest.mark.parametrize("status", [JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.FAILED])
    def test_purge_finished_refuses_a_status_that_is_not_finished(
        self, job_store_subject: JobStoreSubject, status: JobStatus
    ) -> None:
        subject = job_store_subject
        self._place(subject, JobStatus.SUCCEEDED, job_id="done", ended_ms=10)

        with pytest.raises(ValueError, match="finished"):
            subject.store.purge_finished(
                before=ms(subject, 500), statuses={JobStatus.SUCCEEDED, status}
            )
        assert self.listed(subject) == ["done"]

    @pytest.mark.parametrize("limit", [0, -1])
    def test_purge_finished_refuses_a_limit_that_is_not_positive(
        self, job_store_subject: JobStoreSubject, limit: int
    ) -> None:
        subject = job_store_subject
        self._place(subject, JobStatus.SUCCEEDED, job_id="done", ended_ms=10)

        with pytest.raises(ValueError, match="limit"):
            subject.store.purge_finished(before=ms(subject, 500), limit=limit)
        assert self.listed(subject) == ["done"]

    def test_purge_finished_refuses_a_naive_instant(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self._place(subject, JobStatus.SUCCEEDED, job_id="done", ended_ms=10)

        with pytest.raises(ValueError, match="aware"):
            subject.store.purge_finished(before=ms(subject, 500).replace(tzinfo=None))
        assert self.listed(subject) == ["done"]

    # -- the relay ----------------------------------------------------------------------------

    def test_take_due_publishes_a_delayed_job_once_when_it_is_due(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1", run_at_ms=10_000))

        before = self.take(subject, 9_999)
        due = self.take(subject, 10_000)
        again = self.take(subject, 10_001, peer=True)

        assert before == []
        assert [(d.job_id, d.name, d.queue) for d in due] == [("job-1", JOB, "billing")]
        assert again == []

    def test_take_due_publishes_a_dispatched_job_again_only_once_it_is_stale(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"), dispatched=True)
        self.add(subject, new_job(subject, "job-2"), dispatched=True)
        self.claim(subject, "job-2")

        fresh = self.take(subject, REDISPATCH_MS)
        stale = self.take(subject, REDISPATCH_MS + 1)

        assert fresh == []
        assert [d.job_id for d in stale] == ["job-1"]

    def test_take_due_leaves_running_and_finished_jobs(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        for job_id in ("running", "done", "cancelled"):
            self.add(subject, new_job(subject, job_id))
        self.claim(subject, "running")
        subject.store.complete(self.claim(subject, "done").lease, now=subject.start)
        subject.store.cancel("cancelled", tenant_id=None, now=subject.start)

        taken = self.take(subject, 1)

        assert taken == []

    def test_take_due_takes_the_earliest_first_up_to_its_limit(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "c", run_at_ms=3))
        self.add(subject, new_job(subject, "a", run_at_ms=1))
        self.add(subject, new_job(subject, "b", run_at_ms=2))

        first = self.take(subject, 5, limit=2, after_ms=1_000)
        rest = self.take(subject, 5, limit=2, after_ms=1_000)

        assert [d.job_id for d in first] == ["a", "b"]
        assert [d.job_id for d in rest] == ["c"]

    def test_take_due_publishes_a_retry_a_release_and_a_retried_dead_job_when_due(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        for job_id in ("retry", "release", "dead"):
            self.add(subject, new_job(subject, job_id, max_attempts=1), dispatched=True)
        self.fail(subject, self.claim(subject, "retry").lease, retry_at_ms=5_000)
        subject.store.release(self.claim(subject, "release").lease, now=ms(subject, 1))
        self.fail(subject, self.claim(subject, "dead").lease)
        assert subject.store.retry_dead("dead", tenant_id=None, now=ms(subject, 2))

        now = self.take(subject, 10, after_ms=60_000)
        later = self.take(subject, 5_000, after_ms=60_000)

        # with the attempts made so far: a release is uncounted, a retried dead job starts anew
        assert [(d.job_id, d.attempts) for d in now] == [("release", 0), ("dead", 0)]
        assert [(d.job_id, d.attempts) for d in later] == [("retry", 1)]

    # -- expired leases -------------------------------------------------------------------------

    def test_an_expired_lease_hands_the_job_back_to_run_again_or_dead(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "again", max_attempts=2))
        self.add(subject, new_job(subject, "exhausted", max_attempts=1))
        self.add(subject, new_job(subject, "alive"))
        self.claim(subject, "again")
        self.claim(subject, "exhausted")
        self.claim(subject, "alive", at_ms=10_000)

        at_expiry = subject.store.expire_leases(now=ms(subject, LEASE_MS), limit=10)
        expired = subject.peer.expire_leases(now=ms(subject, LEASE_MS + 1), limit=10)

        assert at_expiry == []
        by_id = {job.id: job for job in expired}
        assert set(by_id) == {"again", "exhausted"}
        again, exhausted = by_id["again"], by_id["exhausted"]
        assert (again.status, again.run_at, again.attempts) == (
            JobStatus.FAILED,
            ms(subject, LEASE_MS + 1),
            1,
        )
        assert exhausted.status is JobStatus.DEAD
        assert exhausted.finished_at == ms(subject, LEASE_MS + 1)
        assert {again.last_error_code, exhausted.last_error_code} == {JOB_INTERRUPTED}
        assert self.status(subject, "alive") is JobStatus.RUNNING
        assert self.claim(subject, "again", at_ms=LEASE_MS + 1).lease.attempt == 2

    def test_expire_leases_hands_back_at_most_its_limit(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        for index in range(3):
            self.add(subject, new_job(subject, f"job-{index}"))
            self.claim(subject, f"job-{index}")

        first = subject.store.expire_leases(now=ms(subject, LEASE_MS + 1), limit=2)
        rest = subject.store.expire_leases(now=ms(subject, LEASE_MS + 1), limit=2)

        assert (len(first), len(rest)) == (2, 1)

    # -- concurrency ----------------------------------------------------------------------------

    def test_instances_racing_for_a_job_claim_it_once(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))
        stores = [subject.store, subject.peer] * 8
        start = threading.Barrier(len(stores))
        claims: list[ClaimedJob | None] = []

        def race(store: JobStore) -> None:
            start.wait()
            claims.append(store.claim_job("job-1", now=subject.start, lease_ms=LEASE_MS))

        _in_threads(race, stores)

        assert len([claim for claim in claims if claim is not None]) == 1
        job = self.found(subject, "job-1")
        assert job.attempts == 1

    def test_pollers_racing_claim_each_due_job_once(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        for index in range(40):
            self.add(subject, new_job(subject, f"job-{index}"))
        stores = [subject.store, subject.peer] * 4
        start = threading.Barrier(len(stores))
        claimed: list[str] = []

        def race(store: JobStore) -> None:
            start.wait()
            for _ in range(10):
                batch = store.claim_due(["billing"], now=subject.start, lease_ms=LEASE_MS, limit=3)
                claimed.extend(c.job.id for c in batch)

        _in_threads(race, stores)

        assert sorted(claimed) == sorted(f"job-{index}" for index in range(40))

    # -- a command sent twice (its reply lost) is one ------------------------------------------

    def test_a_claim_repeated_with_its_token_answers_the_same_lease_counted_once(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))
        first = self.try_claim(subject, "job-1", 10, token="attempt-a")

        again = self.try_claim(subject, "job-1", 1_010, peer=True, token="attempt-a")

        assert first is not None
        assert again is not None
        assert (first.lease.token, first.lease.attempt) == ("attempt-a", 1)
        assert (again.lease.job_id, again.lease.attempt, again.lease.token) == (
            "job-1",
            1,
            "attempt-a",
        )
        assert again.lease.expires_at == ms(subject, 1_010 + LEASE_MS)
        assert (again.job.status, again.job.attempts) == (JobStatus.RUNNING, 1)
        assert again.job.payload == {"month": "2026-10"}
        job = self.found(subject, "job-1")
        assert (job.attempts, job.lease_expires_at) == (1, ms(subject, 1_010 + LEASE_MS))
        assert subject.store.expire_leases(now=ms(subject, LEASE_MS + 11), limit=10) == []
        subject.store.complete(first.lease, now=ms(subject, 2_000))
        assert self.status(subject, "job-1") is JobStatus.SUCCEEDED

    def test_a_claim_with_another_token_is_refused_while_the_job_runs(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))
        claimed = self.try_claim(subject, "job-1", token="attempt-a")

        other = self.try_claim(subject, "job-1", 1, peer=True, token="attempt-b")

        assert claimed is not None
        assert other is None
        job = self.found(subject, "job-1")
        assert job.attempts == 1

    def test_a_claim_repeated_after_its_attempt_ended_claims_nothing(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))
        claimed = self.try_claim(subject, "job-1", token="attempt-a")
        assert claimed is not None
        subject.store.complete(claimed.lease, now=ms(subject, 5))

        again = self.try_claim(subject, "job-1", 6, token="attempt-a")

        assert again is None
        assert self.status(subject, "job-1") is JobStatus.SUCCEEDED

    def test_a_claim_repeated_after_its_lease_expired_does_not_start_another_attempt(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))
        assert self.try_claim(subject, "job-1", token="attempt-a")
        assert len(subject.store.expire_leases(now=ms(subject, LEASE_MS + 1), limit=10)) == 1

        again = self.try_claim(subject, "job-1", LEASE_MS + 2, peer=True, token="attempt-a")

        assert again is None  # a token names one attempt: its reports must not reach another
        job = self.found(subject, "job-1")
        assert (job.status, job.attempts) == (JobStatus.FAILED, 1)
        other = self.try_claim(subject, "job-1", LEASE_MS + 2, token="attempt-b")
        assert other is not None
        assert other.lease.attempt == 2

    def test_claim_due_repeated_with_its_token_answers_the_same_jobs_and_claims_no_more(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        for job_id, run_at in (("a", 1), ("b", 2), ("c", 3)):
            self.add(subject, new_job(subject, job_id, run_at_ms=run_at))

        first = subject.store.claim_due(
            ["billing"], now=ms(subject, 10), lease_ms=LEASE_MS, limit=2, token="poll-1"
        )
        again = subject.peer.claim_due(
            ["billing"], now=ms(subject, 20), lease_ms=LEASE_MS, limit=2, token="poll-1"
        )

        assert [(c.job.id, c.lease.token, c.lease.attempt) for c in first] == [
            ("a", "poll-1:0", 1),
            ("b", "poll-1:1", 1),
        ]
        assert [(c.job.id, c.lease.token, c.lease.attempt) for c in again] == [
            ("a", "poll-1:0", 1),
            ("b", "poll-1:1", 1),
        ]
        assert all(c.lease.expires_at == ms(subject, 20 + LEASE_MS) for c in again)
        assert self.status(subject, "c") is JobStatus.QUEUED
        later = subject.store.claim_due(
            ["billing"], now=ms(subject, 30), lease_ms=LEASE_MS, limit=2, token="poll-2"
        )
        assert [(c.job.id, c.lease.token) for c in later] == [("c", "poll-2:0")]

    @pytest.mark.parametrize("report", ["complete", "retry", "die", "release"])
    def test_an_ending_report_repeated_by_its_attempt_is_one(
        self, job_store_subject: JobStoreSubject, report: str
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))
        lease = self.claim(subject, "job-1").lease
        self._end(subject.store, lease, report, ms(subject, 100))
        after_first = subject.store.find("job-1", tenant_id=None)

        self._end(subject.peer, lease, report, ms(subject, 200))

        assert subject.store.find("job-1", tenant_id=None) == after_first

    @pytest.mark.parametrize(
        ("first", "then"),
        [("complete", "retry"), ("retry", "complete"), ("release", "complete"), ("die", "release")],
    )
    def test_another_report_after_an_attempt_ended_is_refused(
        self, job_store_subject: JobStoreSubject, first: str, then: str
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))
        lease = self.claim(subject, "job-1").lease
        self._end(subject.store, lease, first, ms(subject, 100))
        after_first = subject.store.find("job-1", tenant_id=None)

        with pytest.raises(LostLeaseError):
            self._end(subject.store, lease, then, ms(subject, 200))
        assert subject.store.find("job-1", tenant_id=None) == after_first

    def test_a_heartbeat_and_an_update_sent_twice_answer_as_once(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))
        lease = self.claim(subject, "job-1").lease

        beats = [
            store.heartbeat(lease, now=ms(subject, 1_000), lease_ms=LEASE_MS)
            for store in (subject.store, subject.peer)
        ]
        for store in (subject.store, subject.peer):
            store.update(lease, progress={"done": 3}, set_progress=True)

        assert beats[0] == beats[1]
        job = self.found(subject, "job-1")
        assert (job.progress, job.lease_expires_at) == ({"done": 3}, ms(subject, 1_000 + LEASE_MS))

    @pytest.mark.parametrize("before", ["queued", "running"])
    def test_a_cancel_repeated_answers_true_again(
        self, job_store_subject: JobStoreSubject, before: str
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1", tenant="t-1"))
        if before == "running":
            self.claim(subject, "job-1")
        assert subject.store.cancel("job-1", tenant_id="t-1", now=ms(subject, 5)) is True

        assert subject.peer.cancel("job-1", tenant_id="t-1", now=ms(subject, 6)) is True
        assert subject.store.cancel("job-1", tenant_id="t-2", now=ms(subject, 7)) is False
        job = self.found(subject, "job-1")
        assert (job.status, job.finished_at) == (JobStatus.CANCELLED, ms(subject, 5))

    def test_take_due_repeated_with_its_token_answers_the_same_dispatches(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        for job_id, run_at in (("a", 1), ("b", 2), ("c", 3)):
            self.add(subject, new_job(subject, job_id, run_at_ms=run_at))
        now = ms(subject, 10)

        first = subject.store.take_due(
            now=now, limit=2, redispatch_after_ms=REDISPATCH_MS, token="pass-1"
        )
        again = subject.peer.take_due(
            now=now, limit=2, redispatch_after_ms=REDISPATCH_MS, token="pass-1"
        )
        rest = subject.store.take_due(
            now=now, limit=2, redispatch_after_ms=REDISPATCH_MS, token="pass-2"
        )

        assert [d.job_id for d in first] == ["a", "b"]
        assert again == first
        assert [d.job_id for d in rest] == ["c"]

    def test_an_unclaimed_job_is_sent_again_after_waits_doubling_up_to_eight_times(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        after = 1_000
        self.add(subject, new_job(subject, "job-1"), dispatched=True)
        sent_at = [
            at
            for at in range(0, 40_000, 1)
            if at in _RESEND_PROBES and self.take(subject, at, after_ms=after)
        ]

        # dispatched at 0; sent again once each wait (1, 2, 4, 8, 8 s) has strictly passed
        assert sent_at == [1_001, 3_002, 7_003, 15_004, 23_005, 31_006, 39_007]

    def test_the_resend_waits_start_over_once_the_job_is_claimable_again(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        after = 1_000
        self.add(subject, new_job(subject, "job-1"), dispatched=True)
        for at in (1_001, 3_002):
            assert self.take(subject, at, after_ms=after)
        lease = self.claim(subject, "job-1", at_ms=3_500).lease
        self.fail(subject, lease, at_ms=4_000, retry_at_ms=5_000)

        taken = self.take(subject, 5_000, after_ms=after)
        early = self.take(subject, 6_000, after_ms=after)
        again = self.take(subject, 6_001, after_ms=after)

        assert [d.job_id for d in taken] == ["job-1"]
        assert early == []
        assert [d.job_id for d in again] == ["job-1"]

    # -- what a record holds ----------------------------------------------------------------

    def test_a_succeeded_job_keeps_no_error_of_an_earlier_attempt(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))
        self.claim(subject, "job-1")
        assert len(subject.store.expire_leases(now=ms(subject, LEASE_MS + 1), limit=10)) == 1
        lease = self.claim(subject, "job-1", at_ms=LEASE_MS + 1).lease
        self.fail(
            subject,
            lease,
            at_ms=LEASE_MS + 2,
            retry_at_ms=LEASE_MS + 3,
            error=("UNEXPECTED_ERROR", "RuntimeError"),
        )
        last = self.claim(subject, "job-1", at_ms=LEASE_MS + 3).lease

        subject.store.complete(last, now=ms(subject, LEASE_MS + 4))

        job = self.found(subject, "job-1", peer=True)
        assert (job.status, job.attempts) == (JobStatus.SUCCEEDED, 3)
        assert (job.last_error_code, job.last_error_type) == (None, None)

    def test_a_job_gets_its_payload_as_json_a_copy_of_its_own(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        payload: dict[str, Any] = {"ids": [1, 2], "pair": (3, 4), "nested": {"a": "b"}}
        self.add(subject, new_job(subject, "job-1", payload=payload))
        payload["ids"].append(99)
        payload["nested"]["a"] = "changed after enqueue"

        claimed = self.claim(subject, "job-1")
        claimed.job.payload["ids"].append(100)
        checkpoint: dict[str, Any] = {"after": ["c-1"]}
        subject.store.update(claimed.lease, checkpoint=checkpoint, set_checkpoint=True)
        checkpoint["after"].append("changed after the save")
        found = subject.store.find("job-1", tenant_id=None)

        expected = {"ids": [1, 2], "pair": [3, 4], "nested": {"a": "b"}}
        assert claimed.job.payload == {**expected, "ids": [1, 2, 100]}
        assert found is not None
        assert found.payload == expected
        assert found.checkpoint == {"after": ["c-1"]}
        found.payload["ids"].clear()
        listed = subject.store.list_jobs()
        assert [job.payload for job in listed] == [expected]

    def test_the_store_clock_is_none_or_an_aware_instant(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        now = job_store_subject.store.store_time()

        assert now is None or (now.tzinfo is not None and now.utcoffset() == timedelta(0))

    # -- tenants --------------------------------------------------------------------------

    @pytest.mark.parametrize("call", ["find", "cancel", "retry_dead", "list_jobs", "list_page"])
    def test_the_empty_tenant_id_is_refused(
        self, job_store_subject: JobStoreSubject, call: str
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1", tenant=None, max_attempts=1))
        lease = self.claim(subject, "job-1").lease
        self.fail(subject, lease)
        store, now = subject.store, ms(subject, 1)
        calls: dict[str, Any] = {
            "find": lambda: store.find("job-1", tenant_id=""),
            "cancel": lambda: store.cancel("job-1", tenant_id="", now=now),
            "retry_dead": lambda: store.retry_dead("job-1", tenant_id="", now=now),
            "list_jobs": lambda: store.list_jobs(tenant_id=""),
            "list_page": lambda: store.list_page(JobFilter(tenant_id=""), now=now),
        }

        with pytest.raises(ValueError, match="tenant"):
            calls[call]()
        assert self.status(subject, "job-1") is JobStatus.DEAD

    @pytest.mark.parametrize(
        ("first", "second"),
        [
            (("org", "42:inv-1"), ("org:42", "inv-1")),
            (("a\x1fb", "c"), ("a", "b\x1fc")),
            ((None, "3:abc:k"), ("abc", "k")),
            (("1", ":2:x"), ("1:2", "x")),
            (("t", "k"), ("k", "t")),
            (("été", "k"), ("été:", "k")),
            (("x", ""), ("x:", "")),
        ],
    )
    def test_idempotency_keys_of_two_tenants_never_collide(
        self,
        job_store_subject: JobStoreSubject,
        first: tuple[str | None, str],
        second: tuple[str | None, str],
    ) -> None:
        self._assert_keys_kept_apart(job_store_subject, first, second, "table")

    def test_idempotency_keys_never_collide_across_tenants_for_any_text(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        # imported here: a suite of adapters' authors that needs hypothesis for this test only
        from hypothesis import HealthCheck, given, settings  # noqa: PLC0415
        from hypothesis import strategies as st  # noqa: PLC0415

        separators = ":\x1f|0123456789"
        any_text = st.characters(blacklist_characters="\x00", codec="utf-8")
        text = st.text(st.sampled_from(separators) | any_text, max_size=12)
        tenant = st.none() | text.filter(bool)
        pair = st.tuples(tenant, text)

        @st.composite
        def shifted(draw: Any) -> tuple[tuple[str | None, str], tuple[str | None, str]]:
            """Two pairs a naive join makes one: (t, m + s + k) and (t + s + m, k)."""
            head, middle, key = draw(text.filter(bool)), draw(text), draw(text)
            sep = draw(st.sampled_from(":\x1f"))
            return (head, f"{middle}{sep}{key}"), (f"{head}{sep}{middle}", key)

        examples = iter(range(1_000_000))

        @settings(
            max_examples=60,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        )
        @given(pairs=st.tuples(pair, pair) | shifted())
        def prove(pairs: tuple[tuple[str | None, str], tuple[str | None, str]]) -> None:
            first, second = pairs
            self._assert_keys_kept_apart(job_store_subject, first, second, str(next(examples)))

        prove()

    def _assert_keys_kept_apart(
        self,
        subject: JobStoreSubject,
        first: tuple[str | None, str],
        second: tuple[str | None, str],
        run: str,
    ) -> None:
        """Add a job for each (tenant, key) under its derived id; the same pair keeps the first
        job, two different pairs keep two. ``run`` (no ``|`` in it) ends each key, so runs on the
        same store never meet, and a pair that collides in a naive encoding still does."""
        first, second = [(tenant, f"{key}|{run}") for tenant, key in (first, second)]
        ids = [keyed_job_id(tenant, key) for tenant, key in (first, second)]
        kept = [
            self.add(subject, new_job(subject, job_id, tenant=tenant, key=key))
            for job_id, (tenant, key) in zip(ids, (first, second), strict=True)
        ]

        if first == second:
            assert ids[0] == ids[1]
            assert kept == [ids[0], ids[0]]
        else:
            assert ids[0] != ids[1]
            assert kept == ids
            found = [subject.store.find(job_id, tenant_id=None) for job_id in ids]
            assert [_tenant_and_key(job) for job in found] == [first, second]

    # -- the lifecycle table, move by move ------------------------------------------------

    @pytest.mark.parametrize(
        ("status", "operation"),
        [(status, operation) for status in JobStatus for operation in OPERATIONS],
        ids=[f"{status}-{operation}" for status in JobStatus for operation in OPERATIONS],
    )
    def test_every_move_of_the_table_is_made_and_every_other_changes_nothing(
        self, job_store_subject: JobStoreSubject, status: JobStatus, operation: str
    ) -> None:
        """``rules.MOVES`` decides on every store, whatever code each re-derives it in.

        A job is put in ``status`` through the port, then ``operation`` applied to it: a pair
        of the table lands where the table says and the store says it did; any other pair is
        refused and leaves the job as it was, even with the lease of its last attempt.
        """
        subject = job_store_subject
        event = OPERATIONS[operation]
        lease = self._place(subject, status, max_attempts=1 if operation == LAST_EXPIRY else 3)
        before = self.found(subject, lease.job_id)
        assert before.status is status

        accepted = self._operate(subject, operation, lease)

        after = self.found(subject, lease.job_id, peer=True)
        target = MOVES.get((status, event))
        if target is not None:
            assert accepted is not False, f"{operation} refused a move of the table"
            assert after.status is target
        else:
            if event is JobEvent.CANCEL:  # True when the job is cancelled after the call
                assert accepted is (status is JobStatus.CANCELLED)
            else:
                assert accepted is not True, f"{operation} said it moved a {status} job"
            assert after == before, f"a {status} job changed on {operation}"

    def _operate(self, subject: JobStoreSubject, operation: str, lease: JobLease) -> bool | None:
        """Apply ``operation`` at 10 s (40 s for an expiry, past the lease): whether the store
        says it applied it; None when its answer does not tell (a report that returned, which
        may be one repeated)."""
        store, job_id = subject.store, lease.job_id
        now = ms(subject, 40_000 if operation in (FIRST_EXPIRY, LAST_EXPIRY) else 10_000)
        if operation == "claim_job":
            return store.claim_job(job_id, now=now, lease_ms=LEASE_MS) is not None
        if operation == "claim_due":
            claimed = store.claim_due(["billing"], now=now, lease_ms=LEASE_MS, limit=10)
            return [claim.job.id for claim in claimed] == [job_id]
        if operation in (FIRST_EXPIRY, LAST_EXPIRY):
            return [job.id for job in store.expire_leases(now=now, limit=10)] == [job_id]
        if operation in ("cancel", "retry_dead"):
            decide = store.cancel if operation == "cancel" else store.retry_dead
            if subject.unit_of_work is None:
                return decide(job_id, tenant_id=None, now=now)
            with subject.unit_of_work.begin():
                return decide(job_id, tenant_id=None, now=now)
        try:
            if operation == "complete":
                store.complete(lease, now=now)
            elif operation == "release":
                store.release(lease, now=now)
            else:
                retry_at = ms(subject, 20_000) if operation == "fail with a retry" else None
                store.fail(lease, now=now, error_code="X", error_type="E", retry_at=retry_at)
        except LostLeaseError:
            return False
        return None

    def _end(self, store: JobStore, lease: JobLease, report: str, now: datetime) -> None:
        if report == "complete":
            store.complete(lease, now=now)
        elif report == "retry":
            store.fail(
                lease, now=now, error_code="X", error_type="E", retry_at=now + timedelta(seconds=5)
            )
        elif report == "die":
            store.fail(lease, now=now, error_code="X", error_type="E", retry_at=None)
        else:
            store.release(lease, now=now)


_RESEND_PROBES = frozenset(
    at for edge in (1_000, 3_001, 7_002, 15_003, 23_004, 31_005, 39_006) for at in (edge, edge + 1)
)
"""The instants ``test_an_unclaimed_job_is_sent_again...`` asks at: each wait's end, and 1 ms
after (each re-send comes 1 ms after its wait ends, so the next wait starts 1 ms later)."""


def _tenant_and_key(job: StoredJob | None) -> tuple[str | None, str | None]:
    assert job is not None
    return job.tenant_id, job.idempotency_key


def _in_threads(target: Any, arguments: list[JobStore]) -> None:
    threads = [threading.Thread(target=target, args=(argument,)) for argument in arguments]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
