"""The month close enqueues its statement, which is retried past the archive's outage."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ddd_celery.background import JobStatus
from ddd_celery.celery import AttemptFailedError, background_jobs_of, run_now
from ddd_celery.celery.background.tasks import run_message
from ddd_celery.kernel import FixedClock
from examples.clinic.app import CLINICS, create_app

CLOSE = "billing.close-month"
STATEMENT = "billing.compile-monthly-statement"
FIRST_OF_APRIL = datetime(2026, 4, 1, 0, 0, tzinfo=UTC)


def test_closing_a_month_enqueues_one_statement_per_tenant_however_often_it_runs(
    environ: dict[str, str],
) -> None:
    app = create_app(environ, clock=FixedClock(FIRST_OF_APRIL))
    store = background_jobs_of(app).store

    run_now(app, CLOSE)
    run_now(app, CLOSE)

    jobs = store.list_jobs()
    assert sorted((job.name, job.tenant_id, job.payload["month"]) for job in jobs) == [
        (STATEMENT, tenant, "2026-03") for tenant in CLINICS
    ]
    assert {job.enqueued_by.actor for job in jobs} == {f"system:{CLOSE}"}


def test_the_statement_fails_while_the_archive_is_down_then_succeeds_after_its_backoff(
    environ: dict[str, str],
) -> None:
    clock = FixedClock(FIRST_OF_APRIL)
    app = create_app(environ, clock=clock)
    store = background_jobs_of(app).store
    run_now(app, CLOSE)
    job_id = store.list_jobs()[0].id

    with pytest.raises(AttemptFailedError, match="ArchiveUnavailableError"):
        run_message(app, STATEMENT, (), {"job_id": job_id})
    failed = store.find(job_id, tenant_id=None)
    clock.advance(2_000)
    run_message(app, STATEMENT, (), {"job_id": job_id})
    done = store.find(job_id, tenant_id=None)

    assert failed is not None
    assert (failed.status, failed.last_error_type) == (JobStatus.FAILED, "ArchiveUnavailableError")
    assert done is not None
    assert (done.status, done.attempts) == (JobStatus.SUCCEEDED, 2)
