"""A job store that hangs under the relay holds no scheduled job [issue 18, item 3].

Real ``celery beat`` and ``celery worker`` processes on ``relay_hang_app``: a job every second
and the relay, the job store alone behind the suite's fault proxy (the broker and the lock
reached directly). The proxy hangs ~10 s: every occurrence of the 1 s job is still sent, none
``skipped-overlap``; the relay's passes meanwhile are recorded (failed, or skipped behind the
pass still hung); once the proxy resumes, the jobs that came due are published again.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from background_app_jobs import JOBS, NoopJob
from fault_proxy import FaultProxy
from process_support import (
    HERE,
    CeleryProcess,
    seconds_between,
    sleep_until_mid_second,
    stop_all,
    wait_until,
)
from redis import Redis
from services import DATABASE_URL, REDIS_URL
from sqlalchemy import create_engine

from ddd_celery.background import StoredJobQueue
from ddd_celery.background.store import JobStore
from ddd_celery.celery.background.relay import RELAY_JOB
from ddd_celery.kernel import ContextVarExecutionScope, SystemClock, UuidGenerator, iso_ms
from ddd_celery.redis import connect
from ddd_celery.redis.job_store import RedisJobStore
from ddd_celery.sql import SqlJobStore, create_tables, drop_tables

pytestmark = pytest.mark.processes

EVERY_SECOND = "relayhang.every-second"
HANG_S = 10.0


class HangProcess(CeleryProcess):
    """A ``celery -A relay_hang_app <command>`` subprocess."""

    app = "relay_hang_app"


@dataclass
class HungStore:
    """One test's beat and worker, the proxy in front of its job store, and their records."""

    directory: Path
    client: Redis
    proxy: FaultProxy
    sql: bool
    prefix: str = field(default_factory=lambda: f"test:relayhang:{uuid.uuid4().hex}:")
    table_prefix: str = field(default_factory=lambda: f"test_{uuid.uuid4().hex[:12]}_")
    processes: list[HangProcess] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.store: JobStore
        if self.sql:
            self.engine = create_engine(DATABASE_URL, connect_args={"connect_timeout": 2})
            create_tables(self.engine, self.table_prefix)
            self.store = SqlJobStore(self.engine, prefix=self.table_prefix)
        else:
            self.store = RedisJobStore(self.client, prefix=f"{self.prefix}store:")
        self.queue = StoredJobQueue(
            store=self.store,
            clock=SystemClock(),
            ids=UuidGenerator(),
            scope=ContextVarExecutionScope(),
            declarations=JOBS,
        )  # no publisher: the relay publishes every job

    def env(self) -> dict[str, str]:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
            "DDD_TEST_BROKER_URL": REDIS_URL,
            "DDD_TEST_PREFIX": self.prefix,
            "DDD_TEST_QUEUE": f"{self.prefix}scheduled",
            "DDD_TEST_STORE_URL": self.proxy.url(REDIS_URL),
        }
        if self.sql:
            env["DDD_TEST_SQL_URL"] = self.proxy.url(DATABASE_URL)
            env["DDD_TEST_SQL_PREFIX"] = self.table_prefix
        return env

    def spawn(self, name: str, *args: str) -> HangProcess:
        process = HangProcess(name, list(args), self.env(), self.directory / f"{name}.log")
        self.processes.append(process)
        return process

    def read(self, name: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.client.lrange(f"{self.prefix}{name}", 0, -1)]

    def sent(self, task: str) -> list[dict[str, Any]]:
        return [line for line in self.read("sent") if line["task"] == task]

    def outcomes(self, job: str) -> list[dict[str, Any]]:
        return [line for line in self.read("outcomes") if line["job"] == job]

    def published(self, job_ids: list[str]) -> list[dict[str, Any]]:
        return [line for line in self.read("sent") if line["job_id"] in job_ids]

    def logs(self) -> str:
        return "\n".join(f"----- {p.name}\n{p.output()[-5000:]}" for p in self.processes)

    def close(self) -> None:
        self.proxy.heal()
        stop_all(self.processes)
        for key in self.client.scan_iter(match=f"{self.prefix}*"):
            self.client.delete(key)
        if self.sql:
            drop_tables(self.engine, self.table_prefix)
            self.engine.dispose()


@pytest.fixture(
    params=[
        pytest.param(False, id="redis", marks=pytest.mark.redis),
        pytest.param(True, id="postgresql", marks=pytest.mark.postgres),
    ]
)
def hung(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[HungStore]:
    client = connect(REDIS_URL)
    client.ping()
    with FaultProxy.to_url(DATABASE_URL if request.param else REDIS_URL) as proxy:
        deployment = HungStore(tmp_path, client, proxy, request.param)
        try:
            yield deployment
        finally:
            deployment.close()
            client.close()


def test_a_job_store_hung_under_the_relay_holds_no_scheduled_occurrence(hung: HungStore) -> None:
    beat = hung.spawn("beat", "beat", "-l", "INFO")
    hung.spawn(
        "worker", "worker", "-l", "INFO", "-P", "solo", "-Q", f"{hung.prefix}scheduled",
        "-n", f"worker-{uuid.uuid4().hex[:8]}@%h",
        "--without-mingle", "--without-gossip", "--without-heartbeat",
    )  # fmt: skip
    warm_up = hung.queue.enqueue(NoopJob, {})
    wait_until(lambda: hung.published([warm_up]) != [], 60, f"the relay to run\n{hung.logs()}")
    wait_until(
        lambda: len(hung.outcomes(EVERY_SECOND)) >= 2, 60, f"the worker to run\n{hung.logs()}"
    )

    sleep_until_mid_second()
    hung_at = datetime.now(UTC)
    hung.proxy.hang()
    due = [hung.queue.enqueue(NoopJob, {"n": n}) for n in range(5)]
    time.sleep(HANG_S)
    published_in_hang = hung.published(due)
    hung.proxy.resume()
    resumed_at = datetime.now(UTC)
    wait_until(
        lambda: len(hung.published(due)) == len(due), 30, f"the jobs published\n{hung.logs()}"
    )
    time.sleep(2.0)  # the occurrences after the resume are sent and run

    assert beat.alive, hung.logs()
    assert published_in_hang == [], "the store was asked through the proxy only"
    expected = [iso_ms(at) for at in seconds_between(hung_at, resumed_at)]
    sent = {line["scheduled_at"] for line in hung.sent(EVERY_SECOND)}
    assert [at for at in expected if at not in sent] == [], hung.logs()
    window = [
        line
        for line in hung.outcomes(EVERY_SECOND)
        if iso_ms(hung_at) <= line["scheduled_at"] <= iso_ms(resumed_at)
    ]
    assert [line for line in window if line["outcome"] != "succeeded"] == [], hung.logs()
    relay = [
        line["outcome"]
        for line in hung.outcomes(RELAY_JOB)
        if iso_ms(hung_at) <= line["scheduled_at"] <= iso_ms(resumed_at)
    ]
    assert {"failed", "skipped-overlap"} & set(relay), relay
    assert f"the pass of {RELAY_JOB} due at" in beat.output(), "the overrun is logged"
    print(
        f"\nstore hung {HANG_S:.0f} s: {len(expected)} occurrences due, all sent; the relay's "
        f"passes meanwhile: {sorted((o, relay.count(o)) for o in set(relay))}"
    )
