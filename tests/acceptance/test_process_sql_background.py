"""Background jobs on ``SqlJobStore`` (the real PostgreSQL) with real ``celery`` processes.

The deployment is the Redis one of ``test_process_background`` (broker, beat's lock, the jobs'
records) with its store swapped for ``SqlJobStore`` on tables of the test's own: the 1,000 jobs
with two SIGKILLs run as they do on Redis, and a process killed between the commit of its use
case and the publish of its job loses nothing, since the row is the outbox.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import test_process_background as on_redis
from background_app_jobs import JOBS, RecordJob
from process_support import HERE, deployed, wait_until
from services import DATABASE_URL
from sqlalchemy import create_engine

from ddd_celery.background import StoredJobQueue
from ddd_celery.celery.background import CeleryJobPublisher
from ddd_celery.kernel import SystemClock, UuidGenerator
from ddd_celery.sql import SqlJobStore, create_tables, drop_tables

pytestmark = [pytest.mark.processes, pytest.mark.postgres]


KILLED_AFTER_COMMIT = """
import os, signal, sys, time
from celery import Celery
from sqlalchemy import create_engine
from sqlalchemy.orm import sessionmaker
from background_app_jobs import JOBS, RecordJob
from ddd_celery.background import StoredJobQueue
from ddd_celery.celery.background import CeleryJobPublisher
from ddd_celery.kernel import ContextVarExecutionScope, SystemClock, UuidGenerator
from ddd_celery.sql import SqlAlchemyUnitOfWork, SqlJobStore

engine = create_engine(os.environ["DDD_TEST_SQL_URL"])
unit_of_work = SqlAlchemyUnitOfWork(sessionmaker(engine))
sender = Celery("sender", broker=os.environ["DDD_TEST_BROKER_URL"], set_as_current=False)
sender.conf.update(broker_transport_options={"global_keyprefix": os.environ["DDD_TEST_PREFIX"]})
queue = StoredJobQueue(
    store=SqlJobStore(engine, unit_of_work=unit_of_work, prefix=os.environ["DDD_TEST_SQL_PREFIX"]),
    clock=SystemClock(), ids=UuidGenerator(), scope=ContextVarExecutionScope(),
    unit_of_work=unit_of_work, publisher=CeleryJobPublisher(sender), declarations=JOBS,
)

def die() -> None:  # handed over before the enqueue: runs before the publish, after the commit
    print(f"committed {time.time()}", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

with unit_of_work.begin():
    unit_of_work.after_commit(die)
    print(f"job {queue.enqueue(RecordJob, {'text': 'outbox'})}", flush=True)
"""


@dataclass
class SqlBackground(on_redis.Background):
    """The Redis deployment of ``test_process_background``, its store ``SqlJobStore``."""

    table_prefix: str = field(default_factory=lambda: f"test_{uuid.uuid4().hex[:12]}_")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.engine = create_engine(DATABASE_URL, connect_args={"connect_timeout": 2})
        create_tables(self.engine, self.table_prefix)
        self.store = SqlJobStore(self.engine, prefix=self.table_prefix)  # type: ignore[assignment]
        self.queue = StoredJobQueue(
            store=self.store,
            clock=SystemClock(),
            ids=UuidGenerator(),
            scope=self.scope,
            publisher=CeleryJobPublisher(self.sender),
            declarations=JOBS,
        )

    def store_proxy(self) -> on_redis.FaultProxy:
        return on_redis.FaultProxy.to_url(DATABASE_URL)

    def through(self, proxy: on_redis.FaultProxy) -> dict[str, str]:
        return {"DDD_TEST_STORE_URL": proxy.url(DATABASE_URL)}

    def env(self, **more: str) -> dict[str, str]:
        return super().env(
            DDD_TEST_SQL_URL=DATABASE_URL, DDD_TEST_SQL_PREFIX=self.table_prefix, **more
        )

    def close(self) -> None:
        super().close()
        drop_tables(self.engine, self.table_prefix)
        self.engine.dispose()


@pytest.fixture
def sqlbg(tmp_path: Path) -> Iterator[SqlBackground]:
    with deployed(lambda client: SqlBackground(tmp_path, client)) as deployment:
        yield deployment


def test_a_thousand_jobs_on_sql_all_succeed_once_at_a_time_while_the_worker_is_killed_twice(
    sqlbg: SqlBackground,
) -> None:
    on_redis.test_a_thousand_jobs_all_succeed_once_at_a_time_while_the_worker_is_killed_twice(sqlbg)


def test_a_process_killed_between_its_commit_and_its_publish_loses_no_job(
    sqlbg: SqlBackground,
) -> None:
    beat = sqlbg.beat()
    sqlbg.worker(pool="solo", concurrency=1)
    warm_up = sqlbg.queue.enqueue(RecordJob, {"text": "warm-up"}, delay_ms=1)
    wait_until(lambda: sqlbg.seen(warm_up, "ran") != [], 30, f"beat and worker\n{sqlbg.logs()}")

    killed = subprocess.run(
        [sys.executable, "-c", KILLED_AFTER_COMMIT],
        capture_output=True,
        text=True,
        env=sqlbg.env(),
        cwd=HERE,
        timeout=60,
        check=False,
    )
    lines = dict(line.split(" ", 1) for line in killed.stdout.splitlines())
    job_id, committed_at = lines["job"], float(lines["committed"])
    wait_until(lambda: sqlbg.seen(job_id, "ran") != [], 20, f"the job to run\n{sqlbg.logs()}")
    time.sleep(1.5)  # a second publish, if any, would have run by now

    assert killed.returncode == -9, killed.stderr
    [ran] = sqlbg.seen(job_id, "ran")
    published: list[dict[str, Any]] = [
        line for line in sqlbg.records.read("published") if line["kwargs"] == {"job_id": job_id}
    ]
    assert [line["pid"] for line in published] == [beat.pid], "only the relay published it"
    assert ran["payload"] == {"text": "outbox"}
    print(f"\nkilled after its commit: the job ran {ran['at'] - committed_at:.3f} s after it")
