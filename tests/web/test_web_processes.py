"""The process instances on the page: the clinic's appointment booking on PostgreSQL, found by
its key with its version and armed timeout; the timeout's job refused a cancel; another
tenant's viewer reaches nothing; a store that can list its instances lists them."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from celery import Celery
from services import REDIS_URL
from sqlalchemy import Engine
from sqlalchemy.orm import sessionmaker
from web_support import csrf_of

from ddd_celery.background.memory import InMemoryJobStore
from ddd_celery.background.store import JobStatus
from ddd_celery.celery import install_jobs, install_process_managers
from ddd_celery.celery.processes import ProcessManagers
from ddd_celery.kernel import InMemoryCommandBus, InMemoryLock, InMemoryUnitOfWork, SystemClock
from ddd_celery.processes import InMemoryProcessStore
from ddd_celery.sql import (
    SqlAlchemyUnitOfWork,
    SqlJobStore,
    SqlProcessStore,
    create_tables,
    drop_tables,
)
from ddd_celery.sql.process_store import create_process_tables, drop_process_tables
from ddd_celery.web import Viewer, create_app
from examples.clinic.booking.process import (
    AppointmentBooking,
    ConfirmAppointment,
    ReleaseSlot,
    RequestPayment,
    SlotHeld,
)

BOOKING = "booking.appointment-booking"


def commands() -> InMemoryCommandBus:
    bus = InMemoryCommandBus()
    for command in (RequestPayment, ConfirmAppointment, ReleaseSlot):
        bus.register(command, lambda command: None)
    return bus


def held(appointment: str) -> SlotHeld:
    return SlotHeld(
        appointment_id=appointment,
        patient="ada@example.test",
        slot="2026-10-02T09:00",
        amount_cents=4_500,
        pay_within_ms=3_600_000,
    )


def clinic_app(store: Any, job_store: Any, unit_of_work: Any) -> tuple[Celery, ProcessManagers]:
    prefix = f"test:webpm:{uuid.uuid4().hex}:"
    app = Celery(f"webpm-{uuid.uuid4().hex[:8]}", broker=REDIS_URL, set_as_current=False)
    app.conf.update(broker_transport_options={"global_keyprefix": prefix})
    app.conf.ddd_celery_redis_url = None
    install_jobs(app, jobs=[], lock=InMemoryLock(SystemClock()), environ={})
    wired = install_process_managers(
        app,
        managers=[AppointmentBooking],
        store=store,
        commands=commands(),
        unit_of_work=unit_of_work,
        job_store=job_store,
    )
    return app, wired


@pytest.fixture
def on_postgresql(engine: Engine) -> Iterator[tuple[Celery, ProcessManagers]]:
    tables = f"test_webpm_{uuid.uuid4().hex[:10]}_"
    create_tables(engine, tables)
    create_process_tables(engine, tables)
    unit_of_work = SqlAlchemyUnitOfWork(sessionmaker(engine))
    app, wired = clinic_app(
        SqlProcessStore(engine, unit_of_work=unit_of_work, prefix=tables),
        SqlJobStore(engine, unit_of_work=unit_of_work, prefix=tables),
        unit_of_work,
    )
    try:
        yield app, wired
    finally:
        app.close()
        drop_process_tables(engine, tables)
        drop_tables(engine, tables)


def client(app: Celery, **options: Any) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=create_app(app, **options))
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


@pytest.mark.postgres
@pytest.mark.redis
async def test_an_instance_shows_its_version_state_shape_and_armed_timeout(
    on_postgresql: tuple[Celery, ProcessManagers],
) -> None:
    app, wired = on_postgresql
    started = wired.runner.handle(
        AppointmentBooking, "a-1", AppointmentBooking.slot_held, held("a-1")
    )
    timeout_job = started.timeouts["payment"]

    async with client(app, authorize=lambda request: Viewer("ops", may_act=True)) as browser:
        listed = await browser.get("/processes")
        shown = await browser.get("/processes/instance", params={"process": BOOKING, "id": "a-1"})
        story = await browser.get("/background/job", params={"id": timeout_job})
        refused = await browser.post(
            "/background/cancel",
            data={"csrf": csrf_of(story.text), "id": timeout_job, "confirmed": "yes"},
        )
        unknown = await browser.get("/processes/instance", params={"process": BOOKING, "id": "a-9"})

    assert "SqlProcessStore" in listed.text
    assert "does not list them" in listed.text
    page = shown.text
    assert re.search(r"<dt>state version</dt><dd>1</dd>", page)
    assert "ada@example.test" not in page  # the state's shape, not its values
    assert "&#34;patient&#34;: str" in page
    [row] = re.findall(r"<tr><td>payment</td>.*?</tr>", page, flags=re.S)
    assert f'href="/background/job?id={timeout_job}"' in row
    assert "o-scheduled" in row
    assert "the timeout &#39;payment&#39; of process" in story.text
    assert refused.status_code == 409
    assert "still to fire" in refused.text
    assert wired.background.store.find(timeout_job, tenant_id=None).status is JobStatus.QUEUED  # type: ignore[union-attr]
    assert unknown.status_code == 404


@pytest.mark.postgres
@pytest.mark.redis
async def test_a_viewer_of_another_tenant_reaches_no_instance(
    on_postgresql: tuple[Celery, ProcessManagers],
) -> None:
    app, wired = on_postgresql
    wired.runner.handle(AppointmentBooking, "a-1", AppointmentBooking.slot_held, held("a-1"))

    async with client(app, viewer_tenant="t-9") as browser:
        mine = await browser.get("/processes/instance", params={"process": BOOKING, "id": "a-1"})
        asked = await browser.get(
            "/processes/instance", params={"process": BOOKING, "id": "a-1", "tenant": "t-1"}
        )

    assert mine.status_code == 404
    assert asked.status_code == 403


@pytest.mark.redis
async def test_a_store_that_lists_its_instances_is_listed() -> None:
    store = InMemoryProcessStore()
    job_store = InMemoryJobStore()
    app, wired = clinic_app(store, job_store, InMemoryUnitOfWork())
    for appointment in ("a-1", "a-2"):
        wired.runner.handle(
            AppointmentBooking, appointment, AppointmentBooking.slot_held, held(appointment)
        )

    async with client(app) as browser:
        listed = await browser.get("/processes")

    ids = re.findall(r"process=booking.appointment-booking&amp;id=([\w-]+)", listed.text)
    assert ids == ["a-1", "a-2"]
    app.close()
