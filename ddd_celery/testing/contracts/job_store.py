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
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest

from ddd_celery.background.errors import JOB_INTERRUPTED
from ddd_celery.background.store import (
    ClaimedJob,
    EnqueuedBy,
    JobLease,
    JobStatus,
    JobStore,
    LostLeaseError,
    NewJob,
)
from ddd_celery.kernel.unit_of_work import UnitOfWork

JOB = "billing.compile-statements"
LEASE_MS = 30_000
REDISPATCH_MS = 60_000


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
        name=JOB,
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

    def claim(self, subject: JobStoreSubject, job_id: str, at_ms: int = 0) -> ClaimedJob:
        claimed = subject.store.claim_job(job_id, now=ms(subject, at_ms), lease_ms=LEASE_MS)
        assert claimed is not None, f"{job_id} should have been claimable"
        return claimed

    def status(self, subject: JobStoreSubject, job_id: str) -> JobStatus:
        job = subject.store.find(job_id, tenant_id=None)
        assert job is not None, f"{job_id} should be kept"
        return job.status

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
        assert subject.store.claim_job("nope", now=subject.start, lease_ms=LEASE_MS) is None

    def test_a_claim_refuses_a_job_before_its_run_at_and_changes_nothing(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1", run_at_ms=10_000))

        early = subject.store.claim_job("job-1", now=ms(subject, 9_999), lease_ms=LEASE_MS)

        assert early is None
        job = subject.store.find("job-1", tenant_id=None)
        assert job is not None
        assert (job.status, job.attempts) == (JobStatus.QUEUED, 0)
        assert self.claim(subject, "job-1", at_ms=10_000).lease.attempt == 1

    def test_a_running_job_is_claimed_once_even_by_another_instance(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))
        self.claim(subject, "job-1")

        assert subject.peer.claim_job("job-1", now=subject.start, lease_ms=LEASE_MS) is None
        assert subject.store.claim_job("job-1", now=subject.start, lease_ms=LEASE_MS) is None
        job = subject.store.find("job-1", tenant_id=None)
        assert job is not None
        assert job.attempts == 1

    @pytest.mark.parametrize("end", ["succeeded", "dead", "cancelled"])
    def test_a_claim_refuses_a_finished_job(
        self, job_store_subject: JobStoreSubject, end: str
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))
        lease = self.claim(subject, "job-1").lease
        if end == "succeeded":
            subject.store.complete(lease, now=subject.start)
        elif end == "dead":
            subject.store.fail(
                lease, now=subject.start, error_code="X", error_type="E", retry_at=None
            )
        else:
            assert subject.store.cancel("job-1", tenant_id=None, now=subject.start)

        assert subject.peer.claim_job("job-1", now=ms(subject, 1), lease_ms=LEASE_MS) is None
        assert self.status(subject, "job-1") == end

    def test_a_claim_refuses_a_cancelled_job_that_never_ran(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))
        assert subject.store.cancel("job-1", tenant_id=None, now=subject.start)

        assert subject.store.claim_job("job-1", now=subject.start, lease_ms=LEASE_MS) is None

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

        job = subject.peer.find("job-1", tenant_id=None)
        assert job is not None
        assert job.progress == {"done": 20, "of": 40}
        assert job.checkpoint == [1, 2]

    def test_the_checkpoint_is_handed_to_the_next_attempt(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))
        lease = self.claim(subject, "job-1").lease
        subject.store.update(lease, checkpoint={"after": "c-10"}, set_checkpoint=True)
        subject.store.fail(
            lease,
            now=subject.start,
            error_code="UNEXPECTED_ERROR",
            error_type="RuntimeError",
            retry_at=ms(subject, 1_000),
        )

        again = self.claim(subject, "job-1", at_ms=1_000)

        assert again.job.checkpoint == {"after": "c-10"}
        assert again.lease.attempt == 2

    def test_a_completed_job_has_succeeded(self, job_store_subject: JobStoreSubject) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))
        lease = self.claim(subject, "job-1").lease

        subject.peer.complete(lease, now=ms(subject, 2_000))

        job = subject.store.find("job-1", tenant_id=None)
        assert job is not None
        assert (job.status, job.attempts, job.finished_at) == (
            JobStatus.SUCCEEDED,
            1,
            ms(subject, 2_000),
        )
        with pytest.raises(LostLeaseError):
            subject.store.complete(lease, now=ms(subject, 2_001))

    def test_a_failed_attempt_with_a_retry_waits_for_it(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1"))
        lease = self.claim(subject, "job-1").lease

        subject.store.fail(
            lease,
            now=ms(subject, 100),
            error_code="JOB_TIMEOUT",
            error_type="JobTimeoutError",
            retry_at=ms(subject, 5_000),
        )

        job = subject.peer.find("job-1", tenant_id=None)
        assert job is not None
        assert (job.status, job.run_at, job.attempts, job.finished_at) == (
            JobStatus.FAILED,
            ms(subject, 5_000),
            1,
            None,
        )
        assert (job.last_error_code, job.last_error_type) == ("JOB_TIMEOUT", "JobTimeoutError")
        assert subject.store.claim_job("job-1", now=ms(subject, 4_999), lease_ms=LEASE_MS) is None
        assert self.claim(subject, "job-1", at_ms=5_000).lease.attempt == 2

    def test_a_failed_attempt_without_a_retry_is_dead(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1", max_attempts=1))
        lease = self.claim(subject, "job-1").lease

        subject.store.fail(
            lease, now=ms(subject, 100), error_code="BOOM", error_type="BoomError", retry_at=None
        )

        job = subject.store.find("job-1", tenant_id=None)
        assert job is not None
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

        job = subject.store.find("job-1", tenant_id=None)
        assert job is not None
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

        job = subject.store.find("job-1", tenant_id=None)
        assert job is not None
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

        job = subject.store.find("job-1", tenant_id=None)
        assert job is not None
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
        self.add(subject, new_job(subject, "job-1"))
        if before != "queued":
            lease = self.claim(subject, "job-1").lease
            if before == "failed":
                subject.store.fail(
                    lease,
                    now=subject.start,
                    error_code="X",
                    error_type="E",
                    retry_at=ms(subject, 9),
                )
        assert self.status(subject, "job-1") == before

        assert subject.store.cancel("job-1", tenant_id=None, now=ms(subject, 5)) is True

        job = subject.peer.find("job-1", tenant_id=None)
        assert job is not None
        assert (job.status, job.finished_at) == (JobStatus.CANCELLED, ms(subject, 5))
        assert subject.store.cancel("job-1", tenant_id=None, now=ms(subject, 6)) is False

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
        subject.store.fail(lease, now=subject.start, error_code="X", error_type="E", retry_at=None)

        assert subject.store.retry_dead("job-1", tenant_id="t-2", now=ms(subject, 50)) is False
        assert subject.peer.retry_dead("job-1", tenant_id="t-1", now=ms(subject, 100)) is True

        job = subject.store.find("job-1", tenant_id=None)
        assert job is not None
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
        self.add(subject, new_job(subject, "job-1"))
        if before != "queued":
            lease = self.claim(subject, "job-1").lease
            if before == "succeeded":
                subject.store.complete(lease, now=subject.start)

        assert subject.store.retry_dead("job-1", tenant_id=None, now=subject.start) is False
        assert subject.store.retry_dead("nope", tenant_id=None, now=subject.start) is False
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

    def test_purge_finished_deletes_what_finished_before_the_instant(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        for job_id in ("done-early", "done-late", "cancelled", "dead", "queued", "running"):
            self.add(subject, new_job(subject, job_id, max_attempts=1))
        subject.store.complete(self.claim(subject, "done-early").lease, now=ms(subject, 10))
        subject.store.complete(self.claim(subject, "done-late").lease, now=ms(subject, 1_000))
        subject.store.cancel("cancelled", tenant_id=None, now=ms(subject, 20))
        subject.store.fail(
            self.claim(subject, "dead").lease,
            now=ms(subject, 30),
            error_code="X",
            error_type="E",
            retry_at=None,
        )
        self.claim(subject, "running")

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

    # -- the relay ----------------------------------------------------------------------------

    def test_take_due_publishes_a_delayed_job_once_when_it_is_due(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "job-1", run_at_ms=10_000))

        before = subject.store.take_due(
            now=ms(subject, 9_999), limit=10, redispatch_after_ms=REDISPATCH_MS
        )
        due = subject.store.take_due(
            now=ms(subject, 10_000), limit=10, redispatch_after_ms=REDISPATCH_MS
        )
        again = subject.peer.take_due(
            now=ms(subject, 10_001), limit=10, redispatch_after_ms=REDISPATCH_MS
        )

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

        fresh = subject.store.take_due(
            now=ms(subject, REDISPATCH_MS), limit=10, redispatch_after_ms=REDISPATCH_MS
        )
        stale = subject.store.take_due(
            now=ms(subject, REDISPATCH_MS + 1), limit=10, redispatch_after_ms=REDISPATCH_MS
        )

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

        taken = subject.store.take_due(
            now=ms(subject, 1), limit=10, redispatch_after_ms=REDISPATCH_MS
        )

        assert taken == []

    def test_take_due_takes_the_earliest_first_up_to_its_limit(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        self.add(subject, new_job(subject, "c", run_at_ms=3))
        self.add(subject, new_job(subject, "a", run_at_ms=1))
        self.add(subject, new_job(subject, "b", run_at_ms=2))

        first = subject.store.take_due(now=ms(subject, 5), limit=2, redispatch_after_ms=1_000)
        rest = subject.store.take_due(now=ms(subject, 5), limit=2, redispatch_after_ms=1_000)

        assert [d.job_id for d in first] == ["a", "b"]
        assert [d.job_id for d in rest] == ["c"]

    def test_take_due_publishes_a_retry_a_release_and_a_retried_dead_job_when_due(
        self, job_store_subject: JobStoreSubject
    ) -> None:
        subject = job_store_subject
        for job_id in ("retry", "release", "dead"):
            self.add(subject, new_job(subject, job_id, max_attempts=1), dispatched=True)
        subject.store.fail(
            self.claim(subject, "retry").lease,
            now=subject.start,
            error_code="X",
            error_type="E",
            retry_at=ms(subject, 5_000),
        )
        subject.store.release(self.claim(subject, "release").lease, now=ms(subject, 1))
        subject.store.fail(
            self.claim(subject, "dead").lease,
            now=subject.start,
            error_code="X",
            error_type="E",
            retry_at=None,
        )
        assert subject.store.retry_dead("dead", tenant_id=None, now=ms(subject, 2))

        now = subject.store.take_due(now=ms(subject, 10), limit=10, redispatch_after_ms=60_000)
        later = subject.store.take_due(now=ms(subject, 5_000), limit=10, redispatch_after_ms=60_000)

        assert [d.job_id for d in now] == ["release", "dead"]
        assert [d.job_id for d in later] == ["retry"]

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
        job = subject.store.find("job-1", tenant_id=None)
        assert job is not None
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


def _in_threads(target: Any, arguments: list[JobStore]) -> None:
    threads = [threading.Thread(target=target, args=(argument,)) for argument in arguments]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
