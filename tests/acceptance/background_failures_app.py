"""The Celery app of the failure process tests: ``celery -A background_failures_app worker|beat``.

``install_jobs`` (beat and its lock, no scheduled job), then ``install_background_jobs`` on
``RedisJobStore``, the relay in beat. Each task's end is written by Celery's own signals to
Redis lists under the test's prefix, as a monitor on those signals would see it:
``<prefix>ends`` (``task_postrun``: the state, ``request.retries``, ``root_id``, the worker's
hostname) and ``<prefix>signals`` (``task_retry``, ``task_failure``, ``task_success``, with the
traceback Celery formatted). From the environment:

``DDD_TEST_BROKER_URL``          the broker, the store and the records (the shared Redis)
``DDD_TEST_PREFIX``              the test's key prefix, for every key of every process
``DDD_TEST_TRACEBACK_MESSAGES``  ``ddd_celery_traceback_messages`` (``1`` or ``0``)
"""

from __future__ import annotations

import json
import os
from typing import Any

from background_failures_jobs import JOBS
from celery import Celery
from celery.signals import task_failure, task_postrun, task_retry, task_success

from ddd_celery.celery import install_jobs
from ddd_celery.celery.background import install_background_jobs
from ddd_celery.kernel import SystemClock
from ddd_celery.redis import RedisLock, connect
from ddd_celery.redis.job_store import RedisJobStore

BROKER_URL = os.environ["DDD_TEST_BROKER_URL"]
PREFIX = os.environ["DDD_TEST_PREFIX"]

redis = connect(BROKER_URL)
clock = SystemClock()

app = Celery("background_failures_app", broker=BROKER_URL)
app.conf.update(
    broker_transport_options={"global_keyprefix": PREFIX},
    broker_connection_retry_on_startup=True,
    task_default_queue=f"{PREFIX}default",
    worker_prefetch_multiplier=1,
    ddd_celery_traceback_messages=os.environ["DDD_TEST_TRACEBACK_MESSAGES"] == "1",
)
install_jobs(app, jobs=[], lock=RedisLock(redis, prefix=PREFIX), clock=clock)
install_background_jobs(
    app,
    jobs=JOBS,
    store=RedisJobStore(redis, prefix=f"{PREFIX}store:"),
    lease_ms=3_000,
    heartbeat_ms=500,
)


def _push(name: str, **line: Any) -> None:
    redis.rpush(f"{PREFIX}{name}", json.dumps(line))


@task_postrun.connect
def note_end(sender: Any = None, task_id: str = "", state: str = "", **_: Any) -> None:
    request = sender.request
    _push(
        "ends",
        task=sender.name,
        task_id=task_id,
        job_id=(request.kwargs or {}).get("job_id"),
        state=state,
        retries=request.retries,
        root_id=request.root_id,
        hostname=request.hostname,
    )


@task_retry.connect
def note_retry(request: Any = None, reason: Any = None, einfo: Any = None, **_: Any) -> None:
    _push(
        "signals",
        signal="retry",
        job_id=request.kwargs["job_id"],
        reason_type=type(reason).__name__,
        reason=str(reason),
        exc=repr(reason.exc),
        traceback=einfo.traceback,
    )


@task_failure.connect
def note_failure(exception: Any = None, kwargs: Any = None, einfo: Any = None, **_: Any) -> None:
    _push(
        "signals",
        signal="failure",
        job_id=kwargs["job_id"],
        exception_type=type(exception).__name__,
        exception=str(exception),
        traceback=einfo.traceback,
    )


@task_success.connect
def note_success(sender: Any = None, **_: Any) -> None:
    _push("signals", signal="success", job_id=sender.request.kwargs["job_id"])
