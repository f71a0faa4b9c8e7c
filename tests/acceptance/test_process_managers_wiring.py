"""``install_process_managers`` on real ``celery worker`` and ``celery beat`` processes.

The app of the workers is ``process_managers_app``, wired with that one call (no provider names
the runner). This process is the application's web process, wired with the same call on an app
of its own: it starts two bookings and enqueues a payment webhook. In the worker, the webhook
job steps its booking through the runner the call provided, and the other booking's timeout
fires from the store; each step is counted there. Every wait is bounded; every process is ended
and every table dropped with the test.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from booking_webhook import PaymentWebhookJob
from celery import Celery
from process_support import HERE, AppProcess, stop_all, wait_until
from services import DATABASE_URL, REDIS_URL
from sqlalchemy import create_engine
from sqlalchemy.orm import sessionmaker

from ddd_celery.background import JobStatus
from ddd_celery.celery import install_jobs, install_process_managers
from ddd_celery.kernel import InMemoryCommandBus
from ddd_celery.redis import RedisLock, connect
from ddd_celery.sql import (
    SqlAlchemyUnitOfWork,
    SqlJobStore,
    SqlProcessStore,
    create_process_tables,
    create_tables,
    drop_tables,
)
from ddd_celery.sql.process_store import drop_process_tables
from examples.clinic.booking.process import (
    AppointmentBooking,
    ConfirmAppointment,
    ReleaseSlot,
    RequestPayment,
    SlotHeld,
)

pytestmark = [pytest.mark.processes, pytest.mark.postgres]

ROOT = HERE.parents[1]


def held(appointment: str, pay_within_ms: int) -> SlotHeld:
    return SlotHeld(
        appointment_id=appointment,
        patient=f"{appointment}@example.test",
        slot=f"2026-10-02T09:00/{appointment}",
        amount_cents=4_500,
        pay_within_ms=pay_within_ms,
    )


@pytest.fixture
def clinic(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The web process's wiring, its tables, and the processes started by the test."""
    prefix = f"test:procwire:{uuid.uuid4().hex}:"
    tables = f"test_pw_{uuid.uuid4().hex[:10]}_"
    client = connect(REDIS_URL)
    engine = create_engine(DATABASE_URL, connect_args={"connect_timeout": 2})
    create_tables(engine, tables)
    create_process_tables(engine, tables)
    unit_of_work = SqlAlchemyUnitOfWork(sessionmaker(engine))
    web = Celery("web", broker=REDIS_URL, set_as_current=False)
    web.conf.update(broker_transport_options={"global_keyprefix": prefix})
    install_jobs(web, jobs=[], lock=RedisLock(client, prefix=prefix))
    bus = InMemoryCommandBus()
    for command in (RequestPayment, ConfirmAppointment, ReleaseSlot):
        bus.register(command, lambda command: None)
    wired = install_process_managers(
        web,
        managers=[AppointmentBooking],
        store=SqlProcessStore(engine, unit_of_work=unit_of_work, prefix=tables),
        commands=bus,
        unit_of_work=unit_of_work,
        job_store=SqlJobStore(engine, unit_of_work=unit_of_work, prefix=tables),
        jobs=[PaymentWebhookJob],
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "DDD_TEST_BROKER_URL": REDIS_URL,
        "DDD_TEST_PREFIX": prefix,
        "DDD_TEST_DATABASE_URL": DATABASE_URL,
        "DDD_TEST_TABLES": tables,
    }
    processes: list[AppProcess] = []

    def spawn(name: str, *args: str) -> AppProcess:
        process = AppProcess("process_managers_app", name, list(args), env, tmp_path / name)
        processes.append(process)
        return process

    def read(name: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in client.lrange(f"{prefix}pm:{name}", 0, -1)]

    def logs() -> str:
        return "\n".join(f"----- {p.name}\n{p.output()[-3000:]}" for p in processes)

    try:
        yield {
            "wired": wired,
            "unit_of_work": unit_of_work,
            "spawn": spawn,
            "read": read,
            "logs": logs,
        }
    finally:
        stop_all(processes)
        web.close()
        for key in client.scan_iter(match=f"{prefix}*"):
            client.delete(key)
        drop_process_tables(engine, tables)
        drop_tables(engine, tables)
        engine.dispose()
        client.close()


def test_one_call_wires_the_runner_its_jobs_and_the_jobs_that_step_a_process_on_a_worker(
    clinic: dict[str, Any],
) -> None:
    wired, spawn, read = clinic["wired"], clinic["spawn"], clinic["read"]
    spawn("beat", "beat", "-l", "INFO")
    spawn(
        "worker", "worker", "-l", "INFO", "-P", "prefork", "-c", "2",
        "-Q", "booking,ddd_celery", "-n", f"pw-{uuid.uuid4().hex[:8]}@%h",
        "--without-mingle", "--without-gossip", "--without-heartbeat",
    )  # fmt: skip
    runner = wired.runner
    paid_later = runner.handle(
        AppointmentBooking, "a-1", AppointmentBooking.slot_held, held("a-1", 600_000)
    )
    runner.handle(AppointmentBooking, "a-2", AppointmentBooking.slot_held, held("a-2", 2_000))
    jobs = wired.background.queue(unit_of_work=clinic["unit_of_work"])
    with clinic["unit_of_work"].begin():
        webhook = jobs.enqueue(PaymentWebhookJob, {"appointment_id": "a-1", "payment_id": "p-1"})

    def sent() -> list[tuple[str, str]]:
        return sorted((c["type"], c["body"]["appointment_id"]) for c in read("commands"))

    wait_until(
        lambda: len(sent()) == 2, 60, f"the confirmation and the release\n{clinic['logs']()}"
    )

    assert sent() == [("ConfirmAppointment", "a-1"), ("ReleaseSlot", "a-2")]
    assert all(c["pid"] != os.getpid() for c in read("commands"))
    confirmed = runner.find(AppointmentBooking, "a-1")
    released = runner.find(AppointmentBooking, "a-2")
    assert confirmed is not None
    assert released is not None
    assert (confirmed.version, confirmed.state.status, confirmed.timeouts) == (2, "confirmed", {})
    assert (released.version, released.state.status) == (2, "released")
    store = wired.background.store

    def status(job_id: str) -> JobStatus | None:
        job = store.find(job_id, tenant_id=None)
        return None if job is None else job.status

    # the worker's runner cancelled the disarmed timeout after its commit; each job ends after
    # the command it sent
    wait_until(lambda: status(paid_later.timeouts["payment"]) is JobStatus.CANCELLED, 10, "cancel")
    wait_until(lambda: status(webhook) is JobStatus.SUCCEEDED, 10, "the webhook job's end")

    def steps() -> list[tuple[str, str]]:
        counted = [m["labels"] for m in read("metrics") if m["name"] == "process_steps_total"]
        return sorted((labels["step"], labels["outcome"]) for labels in counted)

    assert steps() == [("payment_received", "succeeded"), ("payment_timed_out", "succeeded")]
