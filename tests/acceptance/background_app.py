"""The Celery app of the background-job process tests: ``celery -A background_app worker|beat``.

Written as a project writes its app module: ``install_jobs`` (for beat and its lock, with no
scheduled job), then ``install_background_jobs`` on ``RedisJobStore``. What a test varies comes
from the environment:

``DDD_TEST_BROKER_URL``      the broker, the store and the records (the shared Redis)
``DDD_TEST_PREFIX``          the test's key prefix, for every key of every process
``DDD_TEST_LEASE_MS``        the lease of an attempt (default 3 s)
``DDD_TEST_REDISPATCH_MS``   the relay's ``redispatch_after_ms`` (default 10 s)
``DDD_TEST_SQL_URL``         when set, the store is ``SqlJobStore`` on that database instead,
                             its tables under ``DDD_TEST_SQL_PREFIX``
``DDD_TEST_STORE_URL``       when set, where the job store alone is reached (a fault proxy's):
                             Redis, or the database of ``DDD_TEST_SQL_URL``; the broker, the
                             lock and the records stay direct
``DDD_TEST_CLOCK_SHIFT_MS``  this process's clock runs this much ahead (negative: behind)
``DDD_TEST_DEFAULTS``        when set, the lease, heartbeat and redispatch are the library's
``DDD_TEST_PREFETCH``        the worker's prefetch multiplier (default 1)
``DDD_TEST_GRACE_MS``        ``ddd_celery_grace_ms``, a stopping worker's grace (the library's
                             default unless set)

Every message any process publishes is noted in ``<prefix>bg:published`` (task, kwargs, eta,
pid), so a test can tell who published what and that no message had an ETA.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from typing import Any

from background_app_jobs import JOBS, Records
from celery import Celery
from celery.signals import before_task_publish
from sqlalchemy import create_engine

from ddd_celery.background.store import JobStore
from ddd_celery.celery import install_jobs
from ddd_celery.celery.background import install_background_jobs
from ddd_celery.kernel import SystemClock
from ddd_celery.redis import RedisLock, connect
from ddd_celery.redis.job_store import RedisJobStore
from ddd_celery.sql import SqlJobStore

BROKER_URL = os.environ["DDD_TEST_BROKER_URL"]
PREFIX = os.environ["DDD_TEST_PREFIX"]

redis = connect(BROKER_URL)
records = Records(redis, PREFIX)


class ShiftedClock(SystemClock):
    """The system clock, ``shift`` ahead: a machine whose clock is off."""

    def __init__(self, shift: timedelta) -> None:
        self._shift = shift

    def now(self) -> datetime:
        return super().now() + self._shift


clock = ShiftedClock(timedelta(milliseconds=int(os.environ.get("DDD_TEST_CLOCK_SHIFT_MS", "0"))))

app = Celery("background_app", broker=BROKER_URL)
app.conf.update(
    broker_transport_options={"global_keyprefix": PREFIX},
    broker_connection_retry_on_startup=True,
    task_default_queue=f"{PREFIX}default",
    worker_prefetch_multiplier=int(os.environ.get("DDD_TEST_PREFETCH", "1")),
)
if os.environ.get("DDD_TEST_GRACE_MS"):
    app.conf.ddd_celery_grace_ms = int(os.environ["DDD_TEST_GRACE_MS"])
install_jobs(app, jobs=[], lock=RedisLock(redis, prefix=PREFIX), clock=clock)
store_url = os.environ.get("DDD_TEST_STORE_URL")
store: JobStore
if os.environ.get("DDD_TEST_SQL_URL"):
    store = SqlJobStore(
        create_engine(store_url or os.environ["DDD_TEST_SQL_URL"]),
        prefix=os.environ["DDD_TEST_SQL_PREFIX"],
    )
else:
    store = RedisJobStore(connect(store_url) if store_url else redis, prefix=f"{PREFIX}store:")
timing: dict[str, int] = {}
if not os.environ.get("DDD_TEST_DEFAULTS"):
    timing = {
        "lease_ms": int(os.environ.get("DDD_TEST_LEASE_MS", "3000")),
        "heartbeat_ms": 500,
        "redispatch_after_ms": int(os.environ.get("DDD_TEST_REDISPATCH_MS", "10000")),
    }
install_background_jobs(app, jobs=JOBS, store=store, providers={Records: lambda: records}, **timing)


@before_task_publish.connect
def note_publish(sender: str = "", body: Any = None, headers: Any = None, **_: Any) -> None:
    headers = headers or {}
    records.push(
        "published",
        task=sender,
        args=list(body[0]),
        kwargs=body[1],
        eta=headers.get("eta"),
        countdown=headers.get("countdown"),
        pid=os.getpid(),
    )
