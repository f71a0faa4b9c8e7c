"""The Celery app of the process-manager tests: ``celery -A process_managers_app worker|beat``.

The appointment booking of the clinic example on the SQL family (PostgreSQL): the instances,
the timeout jobs and the commands' outbox in one database, written in one unit of work; the
broker and the records on the shared Redis. Wired as an application does, with
``install_process_managers``; ``PaymentWebhookJob`` is the app's own job that steps a booking.
From the environment:

``DDD_TEST_BROKER_URL``    the broker and the records (the shared Redis)
``DDD_TEST_PREFIX``        the test's key prefix, for every Redis key of every process
``DDD_TEST_DATABASE_URL``  the PostgreSQL database
``DDD_TEST_TABLES``        the tables' prefix (created by the test)

Every command the worker's runner sends is noted in ``<prefix>pm:commands`` (its type, body and
the pid), every message published in ``<prefix>pm:published`` (task, kwargs, eta, pid), every
counter incremented in ``<prefix>pm:metrics`` (name, labels, pid).
"""

from __future__ import annotations

import json
import os
from typing import Any

from booking_webhook import PaymentWebhookJob
from celery import Celery
from celery.signals import before_task_publish
from pydantic import BaseModel
from sqlalchemy import create_engine
from sqlalchemy.orm import sessionmaker

from ddd_celery.celery import install_jobs, install_process_managers
from ddd_celery.kernel import CommandBus, Labels, Metrics
from ddd_celery.redis import RedisLock, connect
from ddd_celery.sql import SqlAlchemyUnitOfWork, SqlJobStore, SqlProcessStore
from examples.clinic.booking.process import AppointmentBooking

BROKER_URL = os.environ["DDD_TEST_BROKER_URL"]
PREFIX = os.environ["DDD_TEST_PREFIX"]
TABLES = os.environ["DDD_TEST_TABLES"]

redis = connect(BROKER_URL)
engine = create_engine(os.environ["DDD_TEST_DATABASE_URL"], connect_args={"connect_timeout": 2})
unit_of_work = SqlAlchemyUnitOfWork(sessionmaker(engine))


class RecordingBus(CommandBus):
    """Sends a command by noting it in Redis, where the test reads it."""

    def execute(self, command: object) -> None:
        body = command.model_dump(mode="json") if isinstance(command, BaseModel) else None
        line = {"type": type(command).__name__, "body": body, "pid": os.getpid()}
        redis.rpush(f"{PREFIX}pm:commands", json.dumps(line))


class RecordingMetrics(Metrics):
    """Notes each counter incremented in Redis, where the test reads it."""

    def increment(self, name: str, labels: Labels, value: float = 1.0) -> None:
        line = {"name": name, "labels": dict(labels), "value": value, "pid": os.getpid()}
        redis.rpush(f"{PREFIX}pm:metrics", json.dumps(line))

    def observe(self, name: str, value: float, labels: Labels) -> None:
        return None


app = Celery("process_managers_app", broker=BROKER_URL)
app.conf.update(
    broker_transport_options={"global_keyprefix": PREFIX},
    broker_connection_retry_on_startup=True,
    task_default_queue=f"{PREFIX}default",
    worker_prefetch_multiplier=1,
)
install_jobs(app, jobs=[], lock=RedisLock(redis, prefix=PREFIX))
processes = install_process_managers(
    app,
    managers=[AppointmentBooking],
    store=SqlProcessStore(engine, unit_of_work=unit_of_work, prefix=TABLES),
    commands=RecordingBus(),
    unit_of_work=unit_of_work,
    job_store=SqlJobStore(engine, unit_of_work=unit_of_work, prefix=TABLES),
    jobs=[PaymentWebhookJob],
    metrics=RecordingMetrics(),
    lease_ms=3_000,
    heartbeat_ms=500,
)


@before_task_publish.connect
def note_publish(sender: str = "", body: Any = None, headers: Any = None, **_: Any) -> None:
    headers = headers or {}
    line = {
        "task": sender,
        "kwargs": body[1],
        "eta": headers.get("eta"),
        "countdown": headers.get("countdown"),
        "pid": os.getpid(),
    }
    redis.rpush(f"{PREFIX}pm:published", json.dumps(line))
