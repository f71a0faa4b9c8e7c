"""An operator's day with real ``celery worker`` and ``celery beat`` processes: the jobs the
workers ran, told and acted on by ``celery -A <app> jobs background ...`` in processes of their
own.

On Redis (``background_app``): a job that failed on a worker, retried by the relay and failed
again is dead; ``find`` tells both attempts (the worker that ran each, how each ended) and the
correlation id the worker logged; ``retry-dead`` by its name queues it again and the workers run
it again; ``purge`` deletes what succeeded. On PostgreSQL (``process_managers_app``): a booking
arms its payment timeout; ``cancel`` of that job refuses, naming the process and the instance,
and a bulk cancel skips it; ``stats`` counts it, and the commands' outbox the step cancelled,
apart from the application's jobs. Every wait is bounded; every process is ended with its test.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from background_app_jobs import FLAKY, JOBS, FlakyJob, NoopJob
from celery import Celery
from process_support import HERE, AppProcess, stop_all, wait_until
from redis import Redis
from services import DATABASE_URL, REDIS_URL
from sqlalchemy import create_engine
from sqlalchemy.orm import sessionmaker

from ddd_celery.background import JobStatus, StoredJobQueue
from ddd_celery.background.store import JobStore
from ddd_celery.celery.background import CeleryJobPublisher
from ddd_celery.kernel import (
    ContextVarExecutionScope,
    FixedExecutionScope,
    InMemoryCommandBus,
    SystemClock,
    UuidGenerator,
)
from ddd_celery.processes import PROCESS_COMMANDS_JOB, StoredProcessRunner
from ddd_celery.redis import connect
from ddd_celery.redis.job_store import RedisJobStore
from ddd_celery.sql import SqlAlchemyUnitOfWork, SqlJobStore, create_tables, drop_tables
from ddd_celery.sql.process_store import (
    SqlProcessStore,
    create_process_tables,
    drop_process_tables,
)
from examples.clinic.booking.process import (
    AppointmentBooking,
    ConfirmAppointment,
    ReleaseSlot,
    RequestPayment,
    SlotHeld,
)

pytestmark = pytest.mark.processes

ROOT = HERE.parents[1]
QUEUE = "procbg"
TIMEOUT_JOB = "booking.appointment-booking-timeout"
BOOKING = "booking.appointment-booking"


@dataclass
class Operated:
    """One test's deployment of an app: its processes, its store, and the operator's shell."""

    app: str
    directory: Path
    store: JobStore
    env: dict[str, str]
    processes: list[AppProcess] = field(default_factory=list)

    def spawn(self, name: str, *args: str) -> AppProcess:
        process = AppProcess(self.app, name, list(args), self.env, self.directory / f"{name}.log")
        self.processes.append(process)
        return process

    def jobs(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``celery -A <app> jobs background <args>``, as an operator types it."""
        return subprocess.run(
            [sys.executable, "-m", "celery", "-A", self.app, "jobs", "background", *args],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=HERE,
            timeout=60,
            check=False,
        )

    def status(self, job_id: str) -> JobStatus | None:
        job = self.store.find(job_id, tenant_id=None)
        return None if job is None else job.status

    def logs(self) -> str:
        return "\n".join(f"----- {p.name}\n{p.output()[-3000:]}" for p in self.processes)

    def stop(self) -> None:
        stop_all(self.processes)


def fields(output: str) -> dict[str, str]:
    head = output.split("\n\n", 1)[0]
    return dict(re.split(r"\s{2,}", line, maxsplit=1) for line in head.splitlines())


def table(output: str) -> list[list[str]]:
    return [re.split(r"\s{2,}", line.strip()) for line in output.splitlines() if line.strip()]


@dataclass
class OnRedis(Operated):
    sender: Celery | None = None
    queue: StoredJobQueue | None = None


@pytest.fixture
def on_redis(tmp_path: Path) -> Iterator[OnRedis]:
    client: Redis = connect(REDIS_URL)
    prefix = f"test:procbgcli:{uuid.uuid4().hex}:"
    store = RedisJobStore(client, prefix=f"{prefix}store:")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        "DDD_TEST_BROKER_URL": REDIS_URL,
        "DDD_TEST_PREFIX": prefix,
    }
    sender = Celery("sender", broker=REDIS_URL, set_as_current=False)
    sender.conf.update(broker_transport_options={"global_keyprefix": prefix})
    deployment = OnRedis("background_app", tmp_path, store, env, sender=sender)
    deployment.queue = StoredJobQueue(
        store=store,
        clock=SystemClock(),
        ids=UuidGenerator(),
        scope=ContextVarExecutionScope(),
        publisher=CeleryJobPublisher(sender),
        declarations=JOBS,
    )
    try:
        yield deployment
    finally:
        deployment.stop()
        sender.close()
        for key in client.scan_iter(match=f"{prefix}*"):
            client.delete(key)
        client.close()


def test_a_dead_job_is_told_attempt_by_attempt_retried_by_name_and_what_succeeded_purged(
    on_redis: OnRedis,
) -> None:
    ops = on_redis
    assert ops.queue is not None
    ops.spawn("beat", "beat", "-l", "INFO")
    worker_name = f"opsworker-{uuid.uuid4().hex[:8]}"
    ops.spawn(
        "worker", "worker", "-l", "INFO", "-P", "prefork", "-c", "1", "-Q", QUEUE,
        "-n", f"{worker_name}@%h", "--without-mingle", "--without-gossip", "--without-heartbeat",
    )  # fmt: skip
    flaky = ops.queue.enqueue(FlakyJob, {"order": "o-1", "card": "4242-SECRET"})
    done = ops.queue.enqueue(NoopJob, {})

    wait_until(lambda: ops.status(flaky) is JobStatus.DEAD, 60, f"the flaky job\n{ops.logs()}")
    wait_until(lambda: ops.status(done) is JobStatus.SUCCEEDED, 30, f"the noop\n{ops.logs()}")

    found = ops.jobs("find", flaky)
    dead = ops.jobs("list", "--state", "dead", "--name", FLAKY)
    stats = ops.jobs("stats")
    assert found.returncode == 0, found.stderr
    shown = fields(found.stdout)
    assert (shown["name"], shown["state"], shown["attempts"]) == (
        FLAKY,
        "dead (status dead)",
        "2/2",
    )
    assert shown["correlation id"] == flaky
    assert shown["actor"] == f"- (its attempts run as system:{FLAKY})"
    assert shown["payload"] == '{"card": str, "order": str}'
    assert "SECRET" not in found.stdout
    attempts = table(found.stdout.split("\n\n", 1)[1])
    assert attempts[0] == ["ATTEMPT", "STARTED AT", "ENDED AT", "WORKER", "OUTCOME", "ERROR"]
    assert [(row[0], row[4], row[5]) for row in attempts[1:]] == [
        ("1", "failed", "UNEXPECTED_ERROR (RuntimeError)"),
        ("2", "failed", "UNEXPECTED_ERROR (RuntimeError)"),
    ], found.stdout
    assert {row[3].partition("@")[0] for row in attempts[1:]} == {worker_name}
    assert attempts[1][2] <= attempts[2][1]  # the retry began after the first attempt ended
    assert [row[0] for row in table(dead.stdout)[1:]] == [flaky]
    assert [row[:7] for row in table(stats.stdout) if row[0] == FLAKY] == [
        [FLAKY, "0", "0", "0", "1", "0", "0"]
    ]

    retried = ops.jobs("retry-dead", "--name", FLAKY, "--all", "--yes")

    assert retried.returncode == 0, retried.stderr
    assert retried.stdout.splitlines() == [
        "1 dead job(s) match",
        "queued 1 of 1 again; beat's relay publishes them at its next tick",
    ]

    def dead_again() -> bool:
        job = ops.store.find(flaky, tenant_id=None)
        return job is not None and job.status is JobStatus.DEAD and len(job.history) == 4

    wait_until(dead_again, 60, f"the retried job's two attempts\n{ops.logs()}")
    again = table(ops.jobs("find", flaky).stdout.split("\n\n", 1)[1])
    assert [row[0] for row in again[1:]] == ["1", "2", "1 (queued again)", "2"]

    time.sleep(1.1)  # the noop finished longer ago than the age purged
    purged = ops.jobs("purge", "--older-than", "1s", "--yes")

    assert purged.returncode == 0, purged.stderr
    assert purged.stdout.splitlines()[-1] == "purged 1 job(s)"
    assert ops.status(done) is None
    assert ops.status(flaky) is JobStatus.DEAD


@dataclass
class Clinic(Operated):
    runner: StoredProcessRunner | None = None


@pytest.fixture
def clinic(tmp_path: Path) -> Iterator[Clinic]:
    client: Redis = connect(REDIS_URL)
    prefix = f"test:procpmcli:{uuid.uuid4().hex}:"
    tables = f"test_pmcli_{uuid.uuid4().hex[:10]}_"
    engine = create_engine(DATABASE_URL, connect_args={"connect_timeout": 2})
    create_tables(engine, tables)
    create_process_tables(engine, tables)
    unit_of_work = SqlAlchemyUnitOfWork(sessionmaker(engine))
    store = SqlJobStore(engine, unit_of_work=unit_of_work, prefix=tables)
    sender = Celery("sender", broker=REDIS_URL, set_as_current=False)
    sender.conf.update(broker_transport_options={"global_keyprefix": prefix})
    bus = InMemoryCommandBus()
    for command in (RequestPayment, ConfirmAppointment, ReleaseSlot):
        bus.register(command, lambda command: None)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(HERE), str(ROOT), str(HERE.parent), os.environ.get("PYTHONPATH", "")]
        ),
        "DDD_TEST_BROKER_URL": REDIS_URL,
        "DDD_TEST_PREFIX": prefix,
        "DDD_TEST_DATABASE_URL": DATABASE_URL,
        "DDD_TEST_TABLES": tables,
    }
    deployment = Clinic("process_managers_app", tmp_path, store, env)
    deployment.runner = StoredProcessRunner(
        store=SqlProcessStore(engine, unit_of_work=unit_of_work, prefix=tables),
        jobs=StoredJobQueue(
            store=store,
            clock=SystemClock(),
            ids=UuidGenerator(),
            scope=FixedExecutionScope(),
            unit_of_work=unit_of_work,
            publisher=CeleryJobPublisher(sender),
        ),
        commands=bus,
        unit_of_work=unit_of_work,
    )
    try:
        yield deployment
    finally:
        deployment.stop()
        sender.close()
        for key in client.scan_iter(match=f"{prefix}*"):
            client.delete(key)
        client.close()
        drop_process_tables(engine, tables)
        drop_tables(engine, tables)
        engine.dispose()


def held(appointment: str) -> SlotHeld:
    return SlotHeld(
        appointment_id=appointment,
        patient="ada@example.test",
        slot="2026-10-02T09:00",
        amount_cents=4_500,
        pay_within_ms=3_600_000,
    )


@pytest.mark.postgres
def test_an_armed_timeout_is_not_cancelled_without_force_and_the_librarys_jobs_count_apart(
    clinic: Clinic,
) -> None:
    assert clinic.runner is not None
    started = clinic.runner.handle(
        AppointmentBooking, "a-1", AppointmentBooking.slot_held, held("a-1")
    )
    timeout_job = started.timeouts["payment"]

    listed = clinic.jobs("list", "--name", TIMEOUT_JOB, "--json")
    refused = clinic.jobs("cancel", timeout_job)
    bulk = clinic.jobs("cancel", "--all", "--yes")
    stats = clinic.jobs("stats", "--json")

    assert listed.returncode == 0, listed.stderr
    [job] = json.loads(listed.stdout)["jobs"]
    assert (job["id"], job["state"], job["origin"]) == (timeout_job, "scheduled", "process-timeout")
    assert refused.returncode == 1
    assert refused.stderr == (
        f"{timeout_job} is the timeout 'payment' of process '{BOOKING}', instance 'a-1', still "
        "to fire: cancelled, the instance would wait for it for good. Step the instance "
        "instead, or give --force to cancel it anyway\n"
    )
    assert bulk.stdout.splitlines() == [
        "0 job(s) match (1 armed process timeout(s) skipped: --force cancels them too)"
    ]
    assert clinic.status(timeout_job) is JobStatus.QUEUED
    found = clinic.runner.find(AppointmentBooking, "a-1")
    assert found is not None
    assert found.timeouts == {"payment": timeout_job}
    counted: dict[str, Any] = json.loads(stats.stdout)
    assert counted["totals"]["application"] == {
        "queued": 0, "running": 0, "succeeded": 0, "failed": 0, "dead": 0, "cancelled": 0,
    }  # fmt: skip
    assert counted["jobs"][TIMEOUT_JOB]["counts"]["queued"] == 1
    assert counted["jobs"][PROCESS_COMMANDS_JOB]["counts"]["cancelled"] == 1
    assert counted["totals"]["library"]["cancelled"] == 1

    forced = clinic.jobs("cancel", timeout_job, "--force")

    assert (forced.returncode, forced.stdout) == (0, f"{timeout_job} cancelled\n")
    assert clinic.status(timeout_job) is JobStatus.CANCELLED
