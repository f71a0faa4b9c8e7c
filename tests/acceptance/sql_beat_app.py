"""The Celery app of the PostgreSQL-only beat tests: ``celery -A sql_beat_app beat|worker``.

A deployment with no Redis in it: the broker is RabbitMQ, the lock is ``SqlLock`` and the run
state ``SqlJobRunState`` on PostgreSQL (a worker tells the beats a run ended through it).
What the test observes (what each beat sent and handled) is written to the shared
Redis, which is the test's instrument, not part of the deployment:

``DDD_TEST_BROKER_URL``   the RabbitMQ broker
``DDD_TEST_SQL_URL``      the PostgreSQL of the lock, its tables under ``DDD_TEST_SQL_PREFIX``
``DDD_TEST_QUEUE``        the queue the job is routed to (unique per test)
``DDD_TEST_RECORDS_URL``  the Redis the records go to, under ``DDD_TEST_PREFIX``

Records are JSON lines: ``<prefix>sent`` (each message a beat published, with its pid),
``<prefix>ran`` (each run, noted by the job) and ``<prefix>outcomes`` (each outcome handed to
``on_run`` by a beat or the worker: locked, failed, succeeded).
"""

from __future__ import annotations

import json
import os
from typing import Any

from celery import Celery
from celery.signals import before_task_publish
from sqlalchemy import create_engine

from ddd_celery.celery import install_jobs
from ddd_celery.declarations import JobExecution, scheduled
from ddd_celery.kernel import SystemClock, iso_ms
from ddd_celery.redis import connect
from ddd_celery.scheduling.observability import RunDetail
from ddd_celery.scheduling.outcomes import JobRun
from ddd_celery.sql import SqlJobRunState, SqlLock

PREFIX = os.environ["DDD_TEST_PREFIX"]
QUEUE = os.environ["DDD_TEST_QUEUE"]
records = connect(os.environ["DDD_TEST_RECORDS_URL"])


@scheduled("sqlbeat.every-second", every="1s", timeout_ms=2_000)
class EverySecondJob:
    def run(self, execution: JobExecution) -> None:
        line = {"scheduled_at": iso_ms(execution.scheduled_at), "pid": os.getpid()}
        records.rpush(f"{PREFIX}ran", json.dumps(line))


def keep_outcome(run: JobRun, error: BaseException | None, detail: RunDetail) -> None:
    line = {
        "outcome": run.outcome.value,
        "scheduled_at": iso_ms(run.scheduled_at),
        "error_code": run.error_code,
        "pid": os.getpid(),
    }
    records.rpush(f"{PREFIX}outcomes", json.dumps(line))


@before_task_publish.connect
def note_sent(sender: str = "", body: Any = None, **_: Any) -> None:
    line = {"task": sender, "scheduled_at": body[1].get("scheduled_at"), "pid": os.getpid()}
    records.rpush(f"{PREFIX}sent", json.dumps(line))


clock = SystemClock()
engine = create_engine(os.environ["DDD_TEST_SQL_URL"], connect_args={"connect_timeout": 2})
app = Celery("sql_beat_app", broker=os.environ["DDD_TEST_BROKER_URL"])
app.conf.update(broker_connection_retry_on_startup=True, task_default_queue=QUEUE)
install_jobs(
    app,
    jobs=[EverySecondJob],
    lock=SqlLock(engine, clock, prefix=os.environ["DDD_TEST_SQL_PREFIX"]),
    run_state=SqlJobRunState(engine, clock, prefix=os.environ["DDD_TEST_SQL_PREFIX"]),
    clock=clock,
    on_run=keep_outcome,
    late_after_ms=2_000,  # with timeout_ms: a run cut off by an outage frees its job in 4 s
    routes={"sqlbeat.every-second": QUEUE},
)
