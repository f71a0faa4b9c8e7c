"""A Celery app wired as a project wires it, on the real Redis or the real PostgreSQL, and the
page of it, asked through httpx as a browser or an API client asks.

``redis``: the scheduled jobs' stores from ``ddd_celery_redis_url`` (lock, run state,
checkpoints, last runs, pauses beside the lock) and ``RedisJobStore``; ``postgresql``: ``SqlLock``
(the pauses beside it), the SQL run state, checkpoints and last runs, and ``SqlJobStore``. The
broker is the real Redis in both, under the test's key prefix.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from celery import Celery
from redis import Redis
from services import REDIS_URL
from sqlalchemy import Engine
from web_jobs import SEND_INVOICE, CloseDayJob, EveryMinuteJob, SendInvoiceJob

from ddd_celery.background.store import EnqueuedBy, JobStore, NewJob, StoredJob
from ddd_celery.celery import install_jobs
from ddd_celery.celery.background import install_background_jobs
from ddd_celery.celery.background.registry import BackgroundJobs, background_jobs_of
from ddd_celery.celery.registry import CeleryJobs, jobs_of
from ddd_celery.kernel import SystemClock
from ddd_celery.redis.job_store import RedisJobStore
from ddd_celery.sql import (
    SqlJobCheckpoints,
    SqlJobLastRuns,
    SqlJobRunState,
    SqlJobStore,
    SqlLock,
    create_tables,
    drop_tables,
)
from ddd_celery.web import create_app

KINDS = ("redis", "postgresql")
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@dataclass
class Site:
    """One test's app, its stores, and pages of it made with any ``create_app`` options."""

    kind: str
    app: Celery
    store: JobStore
    prefix: str

    @property
    def background(self) -> BackgroundJobs:
        return background_jobs_of(self.app)

    @property
    def registry(self) -> CeleryJobs:
        return jobs_of(self.app)

    @asynccontextmanager
    async def client(self, mount: str = "", **options: Any) -> AsyncIterator[httpx.AsyncClient]:
        """A client of the page (``create_app(self.app, **options)``), mounted at ``mount``
        in an application of its own when given."""
        page: Any = create_app(self.app, **options)
        if mount:
            from starlette.applications import Starlette  # noqa: PLC0415
            from starlette.routing import Mount  # noqa: PLC0415

            page = Starlette(routes=[Mount(mount, app=page)])
        transport = httpx.ASGITransport(app=page)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            yield client

    def add(
        self,
        job_id: str,
        *,
        name: str = SEND_INVOICE,
        payload: Any = None,
        tenant_id: str | None = None,
        actor: str | None = None,
        enqueued_at: datetime | None = None,
        run_at: datetime | None = None,
    ) -> str:
        """A queued job in the store, as ``enqueue`` adds it."""
        now = datetime.now(UTC)
        at = enqueued_at or now
        return self.store.add(
            NewJob(
                id=job_id,
                name=name,
                queue="webpage",
                payload={"invoice": "i-1"} if payload is None else payload,
                enqueued_at=at,
                run_at=run_at or at,
                max_attempts=1,
                enqueued_by=EnqueuedBy(
                    correlation_id=f"c-{job_id}", actor=actor, tenant_id=tenant_id
                ),
            ),
            dispatched=True,
        )

    def dead(self, job_id: str, **given: Any) -> str:
        """A job whose one attempt failed: dead, as a worker leaves it."""
        self.add(job_id, **given)
        now = datetime.now(UTC)
        claimed = self.store.claim_job(job_id, now=now, lease_ms=60_000, worker="celery@test")
        assert claimed is not None
        self.store.fail(
            claimed.lease,
            now=now + timedelta(milliseconds=5),
            error_code="UNEXPECTED_ERROR",
            error_type="RuntimeError",
            retry_at=None,
        )
        return job_id

    def succeeded(self, job_id: str, **given: Any) -> str:
        self.add(job_id, **given)
        now = datetime.now(UTC)
        claimed = self.store.claim_job(job_id, now=now, lease_ms=60_000, worker="celery@test")
        assert claimed is not None
        self.store.complete(claimed.lease, now=now + timedelta(milliseconds=5))
        return job_id

    def find(self, job_id: str) -> StoredJob | None:
        return self.store.find(job_id, tenant_id=None)


def csrf_of(page: str) -> str:
    """The CSRF token a page's forms carry."""
    found = _CSRF.search(page)
    assert found is not None, page[:2000]
    return found[1]


@contextmanager
def site_of(kind: str, redis_client: Redis, engine: Engine) -> Iterator[Site]:
    """The app of one test on ``kind``; its keys and tables deleted afterwards."""
    prefix = f"test:web:{uuid.uuid4().hex}:"
    tables = f"test_web_{uuid.uuid4().hex[:10]}_"
    app = Celery(f"web-{uuid.uuid4().hex[:8]}", broker=REDIS_URL, set_as_current=False)
    app.conf.update(
        broker_transport_options={"global_keyprefix": prefix},
        task_default_queue=f"{prefix}default",
        ddd_celery_key_prefix=prefix,
    )
    clock = SystemClock()
    jobs = [CloseDayJob, EveryMinuteJob]
    store: JobStore
    if kind == "redis":
        app.conf.ddd_celery_redis_url = REDIS_URL
        install_jobs(app, jobs=jobs, environ={}, clock=clock)
        store = RedisJobStore(redis_client, prefix=f"{prefix}store:")
    else:
        app.conf.ddd_celery_redis_url = None
        create_tables(engine, tables)
        install_jobs(
            app,
            jobs=jobs,
            environ={},
            clock=clock,
            lock=SqlLock(engine, clock, prefix=tables),
            run_state=SqlJobRunState(engine, clock, prefix=tables),
            checkpoints=SqlJobCheckpoints(engine, prefix=tables),
            last_runs=SqlJobLastRuns(engine, prefix=tables),
        )
        store = SqlJobStore(engine, prefix=tables)
    install_background_jobs(app, jobs=[SendInvoiceJob], store=store)
    try:
        yield Site(kind, app, store, prefix)
    finally:
        app.close()
        for key in redis_client.scan_iter(match=f"{prefix}*"):
            redis_client.delete(key)
        if kind == "postgresql":
            drop_tables(engine, tables)
