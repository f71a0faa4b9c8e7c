"""Issue 18.5: a use case commits on PostgreSQL while the Redis job store is down or hung.

The business row is written through SqlAlchemyUnitOfWork on the real PostgreSQL; the job goes
to the real Redis through the suite's fault proxy (``tests/fault_proxy.py``), with
``connect()``'s defaults (1 s per reply, one retry on a new connection). The add comes after the
commit, so an outage cannot undo the order: a short one costs a wait (the add is sent again with
the same job id), a long one an error that says the work committed and names the job.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from fault_proxy import FaultProxy
from pydantic import BaseModel
from redis import Redis
from services import REDIS_URL
from sqlalchemy import Engine, Table

from ddd_celery import BackgroundJobExecution, background
from ddd_celery.background import StoredJobQueue
from ddd_celery.background.errors import JobNotAddedAfterCommitError
from ddd_celery.background.publisher import JobPublisher
from ddd_celery.background.store import Dispatch, JobStatus
from ddd_celery.kernel import Actor, ExecutionContext, FixedClock, FixedExecutionScope
from ddd_celery.kernel.ids import SequentialIdGenerator
from ddd_celery.kernel.reporting import InMemoryErrorReporter
from ddd_celery.redis import RedisJobStore, StoreUnavailableError, connect
from ddd_celery.sql import SqlAlchemyUnitOfWork

from .conftest import add_note, visible

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

NOW = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)


class OrderPayload(BaseModel):
    order: str


@background("sqlfaults.confirm-order", max_attempts=3)
class ConfirmOrderJob:
    def run(self, payload: OrderPayload, execution: BackgroundJobExecution) -> None:
        raise AssertionError("these specs only enqueue")


class RecordingPublisher(JobPublisher):
    def __init__(self) -> None:
        self.published: list[str] = []

    def publish(self, dispatch: Dispatch) -> None:
        self.published.append(dispatch.job_id)


@dataclass(frozen=True, slots=True)
class Application:
    unit_of_work: SqlAlchemyUnitOfWork
    proxy: FaultProxy
    store: RedisJobStore
    """The store as the application holds it: through the proxy."""
    direct: RedisJobStore
    """The same keys, read around the proxy."""
    publisher: RecordingPublisher
    errors: InMemoryErrorReporter
    scope: FixedExecutionScope

    def jobs(self, *, add_retry_ms: int = 5_000) -> StoredJobQueue:
        return StoredJobQueue(
            store=self.store,
            clock=FixedClock(NOW),
            ids=SequentialIdGenerator("order-job-"),
            scope=self.scope,
            unit_of_work=self.unit_of_work,
            publisher=self.publisher,
            declarations=[ConfirmOrderJob],
            add_retry_ms=add_retry_ms,
            errors=self.errors,
        )


@pytest.fixture
def app(unit_of_work: SqlAlchemyUnitOfWork) -> Iterator[Application]:
    prefix = f"test:sqlfaults:{uuid.uuid4().hex}:"
    direct: Redis = connect(REDIS_URL)
    with FaultProxy.to_url(REDIS_URL) as proxy:
        client = connect(proxy.url(REDIS_URL))
        store = RedisJobStore(client, prefix=prefix)
        assert store.find("warm-up", tenant_id=None) is None  # a connection open before the fault
        yield Application(
            unit_of_work,
            proxy,
            store,
            RedisJobStore(direct, prefix=prefix),
            RecordingPublisher(),
            InMemoryErrorReporter(),
            FixedExecutionScope(),
        )
        client.close()
    for key in direct.scan_iter(match=f"{prefix}*"):
        direct.delete(key)
    direct.close()


def place_order(app: Application, jobs: StoredJobQueue, notes: Table, order: str) -> str:
    """The use case: record the order and have it confirmed in background."""
    context = ExecutionContext("command", Actor("user", "u-1"), "corr-5", tenant_id="shop-1")
    with app.scope.open(context), app.unit_of_work.begin():
        add_note(app.unit_of_work, notes, f"order {order}")
        return jobs.enqueue(ConfirmOrderJob, {"order": order})


def after(seconds: float, action: object) -> threading.Timer:
    timer = threading.Timer(seconds, action)  # type: ignore[arg-type]
    timer.start()
    return timer


def test_a_commit_while_redis_hangs_past_the_clients_retry_adds_its_job_once_it_answers(
    app: Application, engine: Engine, notes: Table
) -> None:
    app.proxy.hang()  # 2.5 s: the client's two tries (1 s each) give up at 2 s, mid-hang
    resumed = after(2.5, app.proxy.resume)

    job_id = place_order(app, app.jobs(), notes, "o-1")

    resumed.join()
    assert visible(engine, notes) == ["order o-1"]
    assert [job.id for job in app.direct.list_jobs()] == [job_id]
    job = app.direct.find(job_id, tenant_id="shop-1")
    assert job is not None
    assert (job.status, job.payload) == (JobStatus.QUEUED, {"order": "o-1"})
    assert app.publisher.published == [job_id]
    assert app.errors.reported == []


def test_a_commit_while_redis_is_down_for_a_second_adds_its_job_once_it_is_back(
    app: Application, engine: Engine, notes: Table
) -> None:
    app.proxy.cut()
    restored = after(1.0, app.proxy.restore)

    job_id = place_order(app, app.jobs(), notes, "o-2")

    restored.join()
    assert visible(engine, notes) == ["order o-2"]
    assert [job.id for job in app.direct.list_jobs()] == [job_id]
    assert app.publisher.published == [job_id]
    assert app.errors.reported == []


def test_a_commit_while_redis_stays_down_raises_that_the_work_committed_and_names_the_job(
    app: Application, engine: Engine, notes: Table
) -> None:
    app.proxy.cut()

    with pytest.raises(JobNotAddedAfterCommitError) as raised:
        place_order(app, app.jobs(add_retry_ms=1_000), notes, "o-3")

    error = raised.value
    assert error.job_id == "order-job-1"
    assert "its unit of work committed" in str(error)
    assert "'order-job-1'" in str(error)
    assert not isinstance(error, ConnectionError)
    assert isinstance(error.__cause__, StoreUnavailableError)
    assert error.attempts > 1
    assert visible(engine, notes) == ["order o-3"]
    assert app.direct.list_jobs() == []
    assert app.publisher.published == []
    [(reported, context)] = app.errors.reported
    assert reported is error
    assert (context["job"], context["job_id"], context["tenant_id"]) == (
        "sqlfaults.confirm-order",
        "order-job-1",
        "shop-1",
    )
