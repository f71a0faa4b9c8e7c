"""The queue of an app's background jobs takes its payload limit from ``app.conf``, and reports
an add that fails after its commit to the reporter it is given (issues 18.5 and 18.6)."""

from __future__ import annotations

from typing import Any

import pytest
from celery import Celery

from ddd_celery.background import InMemoryJobStore, InvalidEnqueueError
from ddd_celery.background.errors import JobNotAddedAfterCommitError
from ddd_celery.background.store import NewJob
from ddd_celery.celery import install_background_jobs, install_jobs
from ddd_celery.celery.background.registry import BackgroundJobs
from ddd_celery.declarations.background import background
from ddd_celery.kernel import FixedClock, InMemoryErrorReporter, InMemoryLock
from ddd_celery.kernel.unit_of_work import InMemoryUnitOfWork
from tests.unit.background.conftest import START


@background("queuesettings.echo")
class EchoJob:
    def run(self, payload: Any, execution: Any) -> None:
        """Never run here: the tests only enqueue."""


class DownStore(InMemoryJobStore):
    def add(self, job: NewJob, *, dispatched: bool) -> str:
        raise ConnectionError("the store cannot be reached")


def installed(store: InMemoryJobStore, **conf: Any) -> BackgroundJobs:
    app = Celery("queuesettings", broker="memory://", set_as_current=False)
    app.conf.update(conf)
    clock = FixedClock(START)
    install_jobs(app, jobs=[], lock=InMemoryLock(clock), clock=clock, environ={})
    return install_background_jobs(app, jobs=[EchoJob], store=store)


def test_the_payload_limit_is_ddd_celery_max_payload_bytes() -> None:
    store = InMemoryJobStore()
    jobs = installed(store, ddd_celery_max_payload_bytes=100).queue()

    jobs.enqueue(EchoJob, {"text": "x" * 80})
    with pytest.raises(InvalidEnqueueError, match=r"is 111 bytes of JSON, more than .* \(100\)"):
        jobs.enqueue(EchoJob, {"text": "x" * 100})
    assert len(store.list()) == 1


def test_an_add_given_up_after_the_commit_goes_to_the_reporter_the_queue_is_given() -> None:
    reporter, unit_of_work = InMemoryErrorReporter(), InMemoryUnitOfWork()
    jobs = installed(DownStore()).queue(unit_of_work=unit_of_work, errors=reporter)

    with pytest.raises(JobNotAddedAfterCommitError), unit_of_work.begin():
        job_id = jobs.enqueue(EchoJob, {})

    [(error, context)] = reporter.reported
    assert isinstance(error, JobNotAddedAfterCommitError)
    assert context["job_id"] == job_id
