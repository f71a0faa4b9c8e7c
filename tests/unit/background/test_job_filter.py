"""The operator's view of a job: ``StoredJob.state`` splits queued at ``now``, ``JobState.status``
names the status it reads, and ``JobFilter.matches``, the reference every store's listing
follows, narrows by each field it is given and by all of them at once."""

from __future__ import annotations

from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ddd_celery.background import EnqueuedBy, JobStatus
from ddd_celery.background.store import JobFilter, JobState, StoredJob

NOW = datetime(2026, 10, 1, 8, 0, tzinfo=UTC)


def at(ms: int) -> datetime:
    return NOW + timedelta(milliseconds=ms)


def job(
    status: JobStatus = JobStatus.QUEUED,
    *,
    run_at_ms: int = 0,
    enqueued_at_ms: int = -1_000,
    finished_at_ms: int | None = None,
    name: str = "billing.compile-statements",
    queue: str = "billing",
    tenant: str | None = "t-1",
) -> StoredJob:
    return StoredJob(
        id="job-1",
        name=name,
        queue=queue,
        status=status,
        payload={},
        enqueued_at=at(enqueued_at_ms),
        run_at=at(run_at_ms),
        attempts=0,
        max_attempts=3,
        enqueued_by=EnqueuedBy(tenant_id=tenant),
        finished_at=None if finished_at_ms is None else at(finished_at_ms),
    )


def test_a_queued_job_is_scheduled_before_its_run_at_and_ready_from_it() -> None:
    delayed = job(run_at_ms=5_000)

    assert delayed.state(at(4_999)) is JobState.SCHEDULED
    assert delayed.state(at(5_000)) is JobState.READY
    assert delayed.state(at(9_000)) is JobState.READY


@pytest.mark.parametrize(
    ("status", "state"),
    [
        (JobStatus.RUNNING, JobState.RUNNING),
        (JobStatus.FAILED, JobState.RETRYING),
        (JobStatus.DEAD, JobState.DEAD),
        (JobStatus.SUCCEEDED, JobState.SUCCEEDED),
        (JobStatus.CANCELLED, JobState.CANCELLED),
    ],
)
def test_every_other_status_reads_as_one_state_whenever_it_is_asked(
    status: JobStatus, state: JobState
) -> None:
    # a failed job's run_at is its retry: due or not, it is retrying, never ready
    for run_at_ms in (-1, 0, 1):
        assert job(status, run_at_ms=run_at_ms).state(NOW) is state


@given(status=st.sampled_from(JobStatus), run_at_ms=st.integers(-10_000, 10_000))
def test_the_state_of_a_job_reads_its_status(status: JobStatus, run_at_ms: int) -> None:
    assert job(status, run_at_ms=run_at_ms).state(NOW).status is status


def test_no_filter_reaches_every_job() -> None:
    everyone = JobFilter()

    assert all(everyone.matches(job(status), NOW) for status in JobStatus)
    assert everyone.matches(job(tenant=None, finished_at_ms=None), NOW)


@pytest.mark.parametrize(
    ("where", "reached", "missed"),
    [
        (JobFilter(state=JobState.SCHEDULED), job(run_at_ms=1), job(run_at_ms=0)),
        (JobFilter(state=JobState.READY), job(run_at_ms=0), job(run_at_ms=1)),
        (JobFilter(state=JobState.RETRYING), job(JobStatus.FAILED), job(JobStatus.QUEUED)),
        (JobFilter(name="billing.a"), job(name="billing.a"), job(name="billing.b")),
        (JobFilter(queue="mail"), job(queue="mail"), job(queue="billing")),
        (JobFilter(tenant_id="t-1"), job(tenant="t-1"), job(tenant="t-2")),
        (JobFilter(tenant_id="t-1"), job(tenant="t-1"), job(tenant=None)),
        (JobFilter(enqueued_since=at(-5)), job(enqueued_at_ms=-5), job(enqueued_at_ms=-6)),
        (
            JobFilter(finished_since=at(-5)),
            job(JobStatus.SUCCEEDED, finished_at_ms=-5),
            job(JobStatus.SUCCEEDED, finished_at_ms=-6),
        ),
        (JobFilter(finished_since=at(-5)), job(JobStatus.DEAD, finished_at_ms=0), job()),
    ],
)
def test_each_field_narrows_its_bounds_included(
    where: JobFilter, reached: StoredJob, missed: StoredJob
) -> None:
    assert where.matches(reached, NOW)
    assert not where.matches(missed, NOW)


_JOBS = st.builds(
    job,
    st.sampled_from(JobStatus),
    run_at_ms=st.integers(-2, 2),
    enqueued_at_ms=st.integers(-2, 2),
    finished_at_ms=st.none() | st.integers(-2, 2),
    name=st.sampled_from(["a", "b"]),
    queue=st.sampled_from(["billing", "mail"]),
    tenant=st.sampled_from([None, "t-1", "t-2"]),
)
_FILTERS = st.builds(
    JobFilter,
    state=st.none() | st.sampled_from(JobState),
    name=st.none() | st.sampled_from(["a", "b"]),
    queue=st.none() | st.sampled_from(["billing", "mail"]),
    tenant_id=st.none() | st.sampled_from(["t-1", "t-2"]),
    enqueued_since=st.none() | st.integers(-2, 2).map(at),
    finished_since=st.none() | st.integers(-2, 2).map(at),
)


@given(where=_FILTERS, stored=_JOBS)
def test_a_filter_of_several_fields_reaches_what_each_of_them_reaches(
    where: JobFilter, stored: StoredJob
) -> None:
    alone = [
        replace(JobFilter(), **{field.name: getattr(where, field.name)})
        for field in fields(JobFilter)
        if getattr(where, field.name) is not None
    ]

    assert where.matches(stored, NOW) == all(one.matches(stored, NOW) for one in alone)
