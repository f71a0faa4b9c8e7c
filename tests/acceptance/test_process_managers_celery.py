"""The appointment booking on real ``celery worker`` and ``celery beat`` processes, and killed.

The app is ``process_managers_app``: the SQL family on the real PostgreSQL, the broker on the
real Redis. This process runs the first steps, as a request handler would; the payment timeout
fires in the worker, as a delayed job kept in the store and published by the relay in beat (no
Celery ETA). A process killed by SIGKILL between the commit of a step and the send of its
commands loses none: the outbox job, committed with the state, sends them. Every wait is
bounded; every process is ended and every table dropped with its test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from process_support import HERE, AppProcess, deployed, stop_all, wait_until
from redis import Redis
from services import DATABASE_URL, REDIS_URL
from sqlalchemy import create_engine
from sqlalchemy.orm import sessionmaker

from ddd_celery.background import JobStatus, StoredJobQueue
from ddd_celery.celery.background import CeleryJobPublisher
from ddd_celery.kernel import (
    FixedExecutionScope,
    InMemoryCommandBus,
    SystemClock,
    UuidGenerator,
)
from ddd_celery.processes import PROCESS_COMMANDS_JOB, StoredProcessRunner
from ddd_celery.sql import SqlAlchemyUnitOfWork, SqlJobStore, create_tables, drop_tables
from ddd_celery.sql.process_store import (
    SqlProcessStore,
    create_process_tables,
    drop_process_tables,
)
from examples.clinic.booking.process import (
    AppointmentBooking,
    AppointmentBookingTimeoutJob,
    ConfirmAppointment,
    PaymentReceived,
    ReleaseSlot,
    RequestPayment,
    SlotHeld,
)

pytestmark = [pytest.mark.processes, pytest.mark.postgres]

ROOT = HERE.parents[1]
TIMEOUT_TASK = "booking.appointment-booking-timeout"
APP = "process_managers_app"


@dataclass
class Clinic:
    """One test's deployment: its processes, its tables, and the runner of this process."""

    directory: Path
    client: Redis
    prefix: str = field(default_factory=lambda: f"test:procpm:{uuid.uuid4().hex}:")
    tables: str = field(default_factory=lambda: f"test_pm_{uuid.uuid4().hex[:10]}_")
    processes: list[AppProcess] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.engine = create_engine(DATABASE_URL, connect_args={"connect_timeout": 2})
        create_tables(self.engine, self.tables)
        create_process_tables(self.engine, self.tables)
        self.sender = Celery("sender", broker=REDIS_URL, set_as_current=False)
        self.sender.conf.update(broker_transport_options={"global_keyprefix": self.prefix})
        unit_of_work = SqlAlchemyUnitOfWork(sessionmaker(self.engine))
        self.store = SqlJobStore(self.engine, unit_of_work=unit_of_work, prefix=self.tables)
        self.jobs = StoredJobQueue(
            store=self.store,
            clock=SystemClock(),
            ids=UuidGenerator(),
            scope=FixedExecutionScope(),
            unit_of_work=unit_of_work,
            publisher=CeleryJobPublisher(self.sender),
        )
        self.bus = InMemoryCommandBus()
        for command in (RequestPayment, ConfirmAppointment, ReleaseSlot):
            self.bus.register(command, lambda command: None)
        self.runner = StoredProcessRunner(
            store=SqlProcessStore(self.engine, unit_of_work=unit_of_work, prefix=self.tables),
            jobs=self.jobs,
            commands=self.bus,
            unit_of_work=unit_of_work,
        )

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            # tests/ last: its services.py, which process_support imports when this module runs
            # as the crashing process
            "PYTHONPATH": os.pathsep.join(
                [str(HERE), str(ROOT), str(HERE.parent), os.environ.get("PYTHONPATH", "")]
            ),
            "DDD_TEST_BROKER_URL": REDIS_URL,
            "DDD_TEST_PREFIX": self.prefix,
            "DDD_TEST_DATABASE_URL": DATABASE_URL,
            "DDD_TEST_TABLES": self.tables,
        }

    def worker(self) -> AppProcess:
        args = [
            "worker", "-l", "INFO", "-P", "prefork", "-c", "2", "-Q", "booking,ddd_celery",
            "-n", f"pm-{uuid.uuid4().hex[:8]}@%h",
            "--without-mingle", "--without-gossip", "--without-heartbeat",
        ]  # fmt: skip
        return self._spawn("worker", args)

    def beat(self) -> AppProcess:
        return self._spawn("beat", ["beat", "-l", "INFO"])

    def read(self, name: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.client.lrange(f"{self.prefix}pm:{name}", 0, -1)]

    def commands_for(self, appointment: str) -> list[dict[str, Any]]:
        return [c for c in self.read("commands") if c["body"]["appointment_id"] == appointment]

    def status(self, job_id: str) -> JobStatus | None:
        job = self.store.find(job_id, tenant_id=None)
        return None if job is None else job.status

    def logs(self) -> str:
        return "\n".join(f"----- {p.name}\n{p.output()[-3000:]}" for p in self.processes)

    def close(self) -> None:
        stop_all(self.processes)
        self.sender.close()
        for key in self.client.scan_iter(match=f"{self.prefix}*"):
            self.client.delete(key)
        drop_process_tables(self.engine, self.tables)
        drop_tables(self.engine, self.tables)
        self.engine.dispose()

    def _spawn(self, name: str, args: list[str]) -> AppProcess:
        process = AppProcess(APP, name, args, self.env(), self.directory / f"{name}.log")
        self.processes.append(process)
        return process


@pytest.fixture
def clinic(tmp_path: Path) -> Iterator[Clinic]:
    with deployed(lambda client: Clinic(tmp_path, client)) as deployment:
        yield deployment


def held(appointment: str, pay_within_ms: int) -> SlotHeld:
    return SlotHeld(
        appointment_id=appointment,
        patient="ada@example.test",
        slot="2026-10-02T09:00",
        amount_cents=4_500,
        pay_within_ms=pay_within_ms,
    )


def test_a_booking_never_paid_is_released_by_its_timeout_fired_from_the_store_by_the_relay(
    clinic: Clinic,
) -> None:
    beat = clinic.beat()
    clinic.worker()
    started_at = time.time()
    started = clinic.runner.handle(
        AppointmentBooking, "a-1", AppointmentBooking.slot_held, held("a-1", 3_000)
    )
    assert clinic.bus.executed == [
        RequestPayment(appointment_id="a-1", patient="ada@example.test", amount_cents=4_500)
    ]

    wait_until(lambda: clinic.commands_for("a-1") != [], 40, f"the slot's release\n{clinic.logs()}")

    [released] = clinic.commands_for("a-1")
    assert released["type"] == "ReleaseSlot"
    assert time.time() - started_at >= 3.0
    found = clinic.runner.find(AppointmentBooking, "a-1")
    assert found is not None
    assert (found.version, found.state.status, found.timeouts) == (2, "released", {})
    timeout_job = started.timeouts["payment"]
    wait_until(lambda: clinic.status(timeout_job) is JobStatus.SUCCEEDED, 10, "the job's end")
    published = [line for line in clinic.read("published") if line["task"] == TIMEOUT_TASK]
    assert published == [
        {
            "task": TIMEOUT_TASK,
            "kwargs": {"job_id": timeout_job},
            "eta": None,
            "countdown": None,
            "pid": beat.pid,
        }
    ]
    assert all(
        line["eta"] is None and line["countdown"] is None for line in clinic.read("published")
    )


def test_a_booking_paid_in_time_is_never_released_and_a_stale_timeout_does_nothing(
    clinic: Clinic,
) -> None:
    clinic.beat()
    clinic.worker()
    started = clinic.runner.handle(
        AppointmentBooking, "a-2", AppointmentBooking.slot_held, held("a-2", 2_000)
    )
    clinic.runner.handle(
        AppointmentBooking,
        "a-2",
        AppointmentBooking.payment_received,
        PaymentReceived(appointment_id="a-2", payment_id="p-2"),
    )
    assert clinic.status(started.timeouts["payment"]) is JobStatus.CANCELLED
    # the same timeout again, as a crash between a commit and its cancel would leave it
    stale = clinic.jobs.enqueue(
        AppointmentBookingTimeoutJob,
        {"process": "booking.appointment-booking", "id": "a-2", "timeout": "payment"},
        delay_ms=1_000,
    )

    wait_until(
        lambda: clinic.status(stale) is JobStatus.SUCCEEDED, 40, f"the stale job\n{clinic.logs()}"
    )

    assert clinic.commands_for("a-2") == []
    found = clinic.runner.find(AppointmentBooking, "a-2")
    assert found is not None
    assert (found.version, found.state.status) == (2, "confirmed")
    assert "Process timeout no longer armed, ignored" in clinic.logs()


def test_a_process_killed_between_saving_and_sending_loses_no_command(clinic: Clinic) -> None:
    crashed = subprocess.run(
        [sys.executable, __file__, "crash", clinic.tables, "a-3"],
        env=clinic.env(),
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr

    found = clinic.runner.find(AppointmentBooking, "a-3")
    assert found is not None  # the state was saved: the kill came after the commit
    assert (found.version, found.state.status) == (1, "awaiting-payment")
    [outbox] = [j for j in clinic.store.list_jobs(limit=100) if j.name == PROCESS_COMMANDS_JOB]
    assert outbox.status is JobStatus.QUEUED
    assert clinic.commands_for("a-3") == []

    clinic.beat()
    clinic.worker()
    wait_until(
        lambda: clinic.status(outbox.id) is JobStatus.SUCCEEDED,
        40,
        f"the outbox job to send the command\n{clinic.logs()}",
    )

    sent = clinic.commands_for("a-3")
    assert [(c["type"], c["body"]) for c in sent] == [
        (
            "RequestPayment",
            {"appointment_id": "a-3", "patient": "ada@example.test", "amount_cents": 4_500},
        )
    ]


def _crash_between_saving_and_sending(tables: str, instance_id: str) -> None:
    """Run the first step of a booking on PostgreSQL, and die by SIGKILL at its first send."""

    class DyingBus(InMemoryCommandBus):
        def execute(self, command: object) -> None:
            os.kill(os.getpid(), signal.SIGKILL)

    engine = create_engine(DATABASE_URL, connect_args={"connect_timeout": 2})
    unit_of_work = SqlAlchemyUnitOfWork(sessionmaker(engine))
    runner = StoredProcessRunner(
        store=SqlProcessStore(engine, unit_of_work=unit_of_work, prefix=tables),
        jobs=StoredJobQueue(
            store=SqlJobStore(engine, unit_of_work=unit_of_work, prefix=tables),
            clock=SystemClock(),
            ids=UuidGenerator(),
            scope=FixedExecutionScope(),
            unit_of_work=unit_of_work,
        ),
        commands=DyingBus(),
        unit_of_work=unit_of_work,
        resend_after_ms=2_000,
    )
    runner.handle(
        AppointmentBooking, instance_id, AppointmentBooking.slot_held, held(instance_id, 600_000)
    )
    raise SystemExit("the step sent its commands: the bus did not kill this process")


if __name__ == "__main__" and sys.argv[1:2] == ["crash"]:
    _crash_between_saving_and_sending(sys.argv[2], sys.argv[3])
