"""StoredProcessRunner on the SQL family: the state, its timeout jobs and its commands' outbox in
one transaction, on the real PostgreSQL (two steps racing on two connections) and on SQLite."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from services import DATABASE_URL
from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import sessionmaker

from ddd_celery.background import JobStatus, QueueWorker, StoredJobQueue
from ddd_celery.kernel import (
    FixedClock,
    FixedExecutionScope,
    InMemoryCommandBus,
    UuidGenerator,
)
from ddd_celery.processes import (
    PROCESS_COMMANDS_JOB,
    ProcessCommandsJob,
    ProcessConflictError,
    StoredProcessRunner,
)
from ddd_celery.sql import (
    SqlAlchemyUnitOfWork,
    SqlJobStore,
    create_tables,
    drop_tables,
    sqlite_engine,
)
from ddd_celery.sql.process_store import (
    SqlProcessStore,
    create_process_tables,
    drop_process_tables,
)
from ddd_celery.testing import ManualJobTimers
from examples.clinic.booking.process import (
    AppointmentBooking,
    AppointmentBookingTimeoutJob,
    ConfirmAppointment,
    PaymentReceived,
    ReleaseSlot,
    RequestPayment,
    SlotHeld,
)
from tests.unit.process_managers.conftest import START
from tests.unit.process_managers.processes import Counter, Noted


@dataclass
class SqlDeployment:
    """The runner on one database, through a unit of work shared by both stores."""

    engine: Engine
    prefix: str
    max_attempts: int = 5

    def __post_init__(self) -> None:
        self.clock = FixedClock(START)
        self.unit_of_work = SqlAlchemyUnitOfWork(sessionmaker(self.engine))
        self.store = SqlJobStore(self.engine, unit_of_work=self.unit_of_work, prefix=self.prefix)
        self.processes = SqlProcessStore(
            self.engine, unit_of_work=self.unit_of_work, prefix=self.prefix
        )
        self.scope = FixedExecutionScope()
        self.bus = InMemoryCommandBus()
        for command in (RequestPayment, ReleaseSlot, Noted):
            self.bus.register(command, lambda command: None)
        self.runner = StoredProcessRunner(
            store=self.processes,
            jobs=StoredJobQueue(
                store=self.store,
                clock=self.clock,
                ids=UuidGenerator(),
                scope=self.scope,
                unit_of_work=self.unit_of_work,
            ),
            commands=self.bus,
            unit_of_work=self.unit_of_work,
            max_attempts=self.max_attempts,
        )

    def jobs(self, name: str) -> list[JobStatus]:
        return [j.status for j in self.store.list_jobs(limit=1_000) if j.name == name]


@pytest.fixture(params=[pytest.param("postgresql", marks=pytest.mark.postgres), "sqlite"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Engine, str]]:
    if request.param == "sqlite":
        engine = sqlite_engine(tmp_path / "app.sqlite3")
        create_process_tables(engine)
        yield engine, "ddd_"
        engine.dispose()
        return
    yield from _postgresql()


@pytest.fixture
def postgresql() -> Iterator[tuple[Engine, str]]:
    yield from _postgresql()


def _postgresql() -> Iterator[tuple[Engine, str]]:
    engine = create_engine(DATABASE_URL, connect_args={"connect_timeout": 2}, pool_size=4)
    prefix = f"test_{uuid.uuid4().hex[:12]}_"
    create_tables(engine, prefix)
    create_process_tables(engine, prefix)
    try:
        yield engine, prefix
    finally:
        drop_process_tables(engine, prefix)
        drop_tables(engine, prefix)
        engine.dispose()


async def test_a_booking_runs_to_its_payment_timeout_on_sql(
    database: tuple[Engine, str],
) -> None:
    d = SqlDeployment(*database)
    timers = ManualJobTimers(d.clock)
    worker = QueueWorker(store=d.store, clock=d.clock, scope=d.scope, timers=timers)
    worker.register(AppointmentBookingTimeoutJob, lambda: AppointmentBookingTimeoutJob(d.runner))
    worker.register(ProcessCommandsJob, lambda: ProcessCommandsJob(d.bus))
    held = SlotHeld(
        appointment_id="a-1", patient="ada", slot="09:00", amount_cents=100, pay_within_ms=5_000
    )

    started = d.runner.handle(AppointmentBooking, "a-1", AppointmentBooking.slot_held, held)
    await worker.start()
    try:
        await timers.advance(6_000)
    finally:
        await worker.stop()

    found = d.runner.find(AppointmentBooking, "a-1")
    assert found is not None
    assert (found.version, found.state.status, found.timeouts) == (2, "released", {})
    assert d.bus.executed == [
        RequestPayment(appointment_id="a-1", patient="ada", amount_cents=100),
        ReleaseSlot(appointment_id="a-1", slot="09:00"),
    ]
    timeout_job = d.store.find(started.timeouts["payment"], tenant_id=None)
    assert timeout_job is not None
    assert timeout_job.status is JobStatus.SUCCEEDED
    assert d.jobs(PROCESS_COMMANDS_JOB) == [JobStatus.CANCELLED, JobStatus.CANCELLED]


def test_a_step_that_fails_leaves_neither_state_nor_jobs_on_sql(
    database: tuple[Engine, str],
) -> None:
    d = SqlDeployment(*database)
    d.runner.handle(Counter, "c", Counter.add, 1)

    with pytest.raises(ValueError, match="NotDeclared"):
        d.runner.handle(Counter, "c", Counter.send_undeclared, None)
    with pytest.raises(LookupError, match="timeout_job"):
        d.runner.handle(Counter, "c", Counter.remind_later, None)

    found = d.runner.find(Counter, "c")
    assert found is not None
    assert (found.version, found.state) == (1, {"total": 1})
    assert d.jobs(PROCESS_COMMANDS_JOB) == [JobStatus.CANCELLED]


@pytest.mark.postgres
def test_two_steps_racing_on_two_connections_end_with_no_lost_update(
    postgresql: tuple[Engine, str],
) -> None:
    d = SqlDeployment(*postgresql)
    d.runner.handle(Counter, "c", Counter.add, 1)
    totals = _race(d, amounts=(10, 100))

    assert totals.errors == []
    found = d.runner.find(Counter, "c")
    assert found is not None
    assert (found.version, found.state) == (3, {"total": 111})
    sent = sorted(c.total for c in d.bus.executed if isinstance(c, Noted))
    assert sent[0] == 1
    assert sent[2] == 111
    assert sent[1] in (11, 101)  # the winner's; the loser's lost attempt sent nothing
    assert len(d.jobs(PROCESS_COMMANDS_JOB)) == 3


@pytest.mark.postgres
def test_of_two_steps_racing_with_one_attempt_each_one_wins_and_the_loser_leaves_nothing(
    postgresql: tuple[Engine, str],
) -> None:
    d = SqlDeployment(*postgresql, max_attempts=1)
    d.runner.handle(Counter, "c", Counter.add, 1)
    totals = _race(d, amounts=(10, 100))

    assert [type(error) for error in totals.errors] == [ProcessConflictError]
    found = d.runner.find(Counter, "c")
    assert found is not None
    assert found.version == 2
    assert found.state in ({"total": 11}, {"total": 101})
    assert [c.total for c in d.bus.executed if isinstance(c, Noted)] == [1, found.state["total"]]
    assert len(d.jobs(PROCESS_COMMANDS_JOB)) == 2  # the loser's outbox row rolled back


@dataclass
class Race:
    errors: list[BaseException]


def _race(d: SqlDeployment, *, amounts: tuple[int, int]) -> Race:
    """Run ``Counter.add`` for each amount in its own thread (its own connection), both steps
    reading the same version before either saves."""
    both_read = threading.Barrier(2)
    first_run = threading.local()

    def wait_for_the_other() -> None:
        if not getattr(first_run, "done", False):
            first_run.done = True
            both_read.wait(10)

    errors: list[BaseException] = []

    def add(amount: int) -> None:
        try:
            d.runner.handle(Counter, "c", Counter.add, amount)
        except BaseException as error:
            errors.append(error)

    Counter.before_deciding = staticmethod(wait_for_the_other)
    try:
        threads = [threading.Thread(target=add, args=(amount,)) for amount in amounts]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    finally:
        Counter.before_deciding = staticmethod(lambda: None)
    return Race(errors)


@pytest.mark.postgres
def test_a_payment_and_its_timeout_racing_never_both_act(
    postgresql: tuple[Engine, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    d = SqlDeployment(*postgresql)
    d.bus.register(ConfirmAppointment, lambda command: None)
    held = SlotHeld(
        appointment_id="a-1", patient="ada", slot="09:00", amount_cents=100, pay_within_ms=5_000
    )
    started = d.runner.handle(AppointmentBooking, "a-1", AppointmentBooking.slot_held, held)
    both_decide = threading.Barrier(2)
    first_run = threading.local()

    def racing(step: Any) -> Any:
        def wait_then_decide(self: Any, state: Any, message: Any) -> Any:
            if not getattr(first_run, "done", False):
                first_run.done = True
                both_decide.wait(10)
            return step(self, state, message)

        return wait_then_decide

    for name in ("payment_received", "payment_timed_out"):
        monkeypatch.setattr(AppointmentBooking, name, racing(getattr(AppointmentBooking, name)))
    errors: list[BaseException] = []

    def run(call: Any) -> None:
        try:
            call()
        except BaseException as error:
            errors.append(error)

    paid = PaymentReceived(appointment_id="a-1", payment_id="p-1")
    fired = {"id": "a-1", "timeout": "payment", "job_id": started.timeouts["payment"]}
    threads = [
        threading.Thread(
            target=run,
            args=(lambda: d.runner.handle(AppointmentBooking, "a-1", "payment_received", paid),),
        ),
        threading.Thread(target=run, args=(lambda: d.runner.timeout(AppointmentBooking, fired),)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert errors == []
    outcomes = [type(c).__name__ for c in d.bus.executed if not isinstance(c, RequestPayment)]
    assert outcomes in (["ConfirmAppointment"], ["ReleaseSlot"])
    found = d.runner.find(AppointmentBooking, "a-1")
    assert found is not None
    assert (
        found.state.status
        == {"ConfirmAppointment": "confirmed", "ReleaseSlot": "released"}[outcomes[0]]
    )
    assert found.timeouts == {}


@pytest.mark.postgres
def test_two_contenders_stepping_one_instance_200_times_each_never_run_out_of_attempts(
    postgresql: tuple[Engine, str],
) -> None:
    # two attempts, where the default gives five: a step that lost its race holds the row on its
    # retry (FOR UPDATE), so the retry cannot lose again
    d = SqlDeployment(*postgresql, max_attempts=2)
    d.runner.handle(Counter, "c", Counter.add, 1)
    steps = 200
    failed: list[BaseException] = []
    start = threading.Barrier(2)

    def contender() -> None:
        start.wait(10)
        for _ in range(steps):
            try:
                d.runner.handle(Counter, "c", Counter.add, 1)
            except Exception as error:
                failed.append(error)

    threads = [threading.Thread(target=contender) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)

    assert failed == []
    found = d.runner.find(Counter, "c")
    assert found is not None
    assert (found.version, found.state) == (1 + 2 * steps, {"total": 1 + 2 * steps})
