"""The Celery app of the hung job store tests: ``celery -A relay_hang_app beat|worker``.

A scheduled job every second beside the relay of background jobs. The broker and beat's lock
are the shared Redis, reached directly; the job store alone is reached through the test's fault
proxy, so a hang under the relay touches nothing else of beat's:

``DDD_TEST_BROKER_URL``   the broker, the lock and the records (the shared Redis)
``DDD_TEST_PREFIX``       the test's key prefix, for every key of every process
``DDD_TEST_QUEUE``        the queue of the scheduled job (a worker consumes it and sends the
                          occurrence queued behind the run it ends)
``DDD_TEST_STORE_URL``    the Redis of ``RedisJobStore`` (the proxy's URL), its keys under
                          ``<prefix>store:``
``DDD_TEST_SQL_URL``      when set, the store is ``SqlJobStore`` on that database (the proxy's
                          URL) instead, its tables under ``DDD_TEST_SQL_PREFIX``

Records are JSON lines: ``<prefix>sent`` (each message beat or the worker published: task, the
occurrence or the job id, when) and ``<prefix>outcomes`` (each outcome beat or the worker recorded).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from background_app_jobs import JOBS, Records
from celery import Celery
from celery.signals import before_task_publish
from sqlalchemy import create_engine

from ddd_celery.background.store import JobStore
from ddd_celery.celery import install_jobs
from ddd_celery.celery.background import install_background_jobs
from ddd_celery.declarations import JobExecution, scheduled
from ddd_celery.kernel import iso_ms
from ddd_celery.redis import RedisLock, connect
from ddd_celery.redis.job_store import RedisJobStore
from ddd_celery.scheduling.observability import RunDetail
from ddd_celery.scheduling.outcomes import JobRun
from ddd_celery.sql import SqlJobStore

BROKER_URL = os.environ["DDD_TEST_BROKER_URL"]
PREFIX = os.environ["DDD_TEST_PREFIX"]
QUEUE = os.environ["DDD_TEST_QUEUE"]
EVERY_SECOND = "relayhang.every-second"

redis = connect(BROKER_URL)


@scheduled(EVERY_SECOND, every="1s", timeout_ms=2_000, overlap="queue")
class EverySecondJob:
    """Queued behind a run a loaded worker has not ended yet, rather than skipped: what the
    test looks for is beat's own skips."""

    def run(self, execution: JobExecution) -> None:
        return None


def keep_outcome(run: JobRun, error: BaseException | None, detail: RunDetail) -> None:
    line = {
        "job": run.job,
        "outcome": run.outcome.value,
        "scheduled_at": iso_ms(run.scheduled_at),
        "error_code": run.error_code,
        "pid": os.getpid(),
    }
    redis.rpush(f"{PREFIX}outcomes", json.dumps(line))


@before_task_publish.connect
def note_sent(sender: str = "", body: Any = None, **_: Any) -> None:
    kwargs = body[1]
    line = {
        "task": sender,
        "scheduled_at": kwargs.get("scheduled_at"),
        "job_id": kwargs.get("job_id"),
        "at": time.time(),
    }
    redis.rpush(f"{PREFIX}sent", json.dumps(line))


app = Celery("relay_hang_app", broker=BROKER_URL)
app.conf.update(
    broker_transport_options={"global_keyprefix": PREFIX},
    broker_connection_retry_on_startup=True,
    task_default_queue=f"{PREFIX}default",
)
install_jobs(
    app,
    jobs=[EverySecondJob],
    lock=RedisLock(redis, prefix=PREFIX),
    on_run=keep_outcome,
    routes={EVERY_SECOND: QUEUE},
)
store: JobStore = RedisJobStore(
    connect(os.environ.get("DDD_TEST_STORE_URL", BROKER_URL)), prefix=f"{PREFIX}store:"
)
if os.environ.get("DDD_TEST_SQL_URL"):
    store = SqlJobStore(
        create_engine(os.environ["DDD_TEST_SQL_URL"], connect_args={"connect_timeout": 2}),
        prefix=os.environ["DDD_TEST_SQL_PREFIX"],
    )
install_background_jobs(
    app,
    jobs=JOBS,
    store=store,
    providers={Records: lambda: Records(redis, PREFIX)},
    redispatch_after_ms=60_000,
)
