"""``install_process_managers`` on a Celery app, in this process: what it registers, provides and
refuses. ``tests/acceptance/test_process_managers_wiring.py`` runs it on a real worker."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from celery import Celery

from ddd_celery import background
from ddd_celery.background import InMemoryJobStore, InvalidEnqueueError
from ddd_celery.celery import (
    install_background_jobs,
    install_jobs,
    install_process_managers,
    process_managers_of,
)
from ddd_celery.declarations import BackgroundJobExecution
from ddd_celery.kernel import (
    CommandBus,
    FixedClock,
    InMemoryCommandBus,
    InMemoryLock,
    InMemoryUnitOfWork,
    ProcessRunner,
)
from ddd_celery.processes import (
    PROCESS_COMMANDS_JOB,
    InMemoryProcessStore,
    UnknownProcessError,
)
from examples.clinic.booking.process import (
    AppointmentBooking,
    AppointmentBookingTimeoutJob,
    RequestPayment,
    SlotHeld,
)
from tests.unit.process_managers.processes import Counter

TIMEOUT_JOB = "booking.appointment-booking-timeout"
STEPS_A_COUNTER = "tests.steps-a-counter"


@background(STEPS_A_COUNTER)
class StepsACounterJob:
    """An application's job that steps a process: it takes the runner as a port."""

    def __init__(self, processes: ProcessRunner, commands: CommandBus) -> None:
        self.processes = processes
        self.commands = commands

    def run(self, payload: Any, execution: BackgroundJobExecution) -> None:
        self.processes.handle(Counter, "c", Counter.add, 1)


def app_with_jobs() -> Any:
    app = Celery("wiring", broker="memory://", set_as_current=False)
    install_jobs(app, jobs=[], lock=InMemoryLock(FixedClock(datetime(2026, 10, 1, tzinfo=UTC))))
    return app


def install(app: Any, **options: Any) -> Any:
    unit_of_work = InMemoryUnitOfWork()
    arguments: dict[str, Any] = {
        "managers": [AppointmentBooking, Counter],
        "store": InMemoryProcessStore(),
        "commands": InMemoryCommandBus(),
        "unit_of_work": unit_of_work,
        "job_store": InMemoryJobStore(unit_of_work=unit_of_work),
        "jobs": [StepsACounterJob],
    }
    return install_process_managers(app, **{**arguments, **options})


def test_the_timeout_jobs_and_the_outbox_job_become_tasks_beside_the_apps_own() -> None:
    app = app_with_jobs()
    wired = install(app)

    assert set(wired.background.jobs) == {TIMEOUT_JOB, PROCESS_COMMANDS_JOB, STEPS_A_COUNTER}
    assert {TIMEOUT_JOB, PROCESS_COMMANDS_JOB, STEPS_A_COUNTER} <= set(app.tasks)
    assert set(wired.managers) == {"booking.appointment-booking", "tests.counter"}
    assert process_managers_of(app) is wired


def test_every_job_is_given_the_runner_and_the_command_bus_of_the_call() -> None:
    app = app_with_jobs()
    bus = InMemoryCommandBus()
    wired = install(app, commands=bus)

    [runner_provider, bus_provider] = (
        wired.background.providers[port] for port in (ProcessRunner, CommandBus)
    )
    job = StepsACounterJob(runner_provider(), bus_provider())  # type: ignore[arg-type]
    timeout_job = AppointmentBookingTimeoutJob(runner_provider())  # type: ignore[arg-type]

    assert job.processes is wired.runner
    assert job.commands is bus
    assert timeout_job._processes is wired.runner


def test_a_timeout_job_the_app_lists_itself_is_installed_once() -> None:
    app = app_with_jobs()
    wired = install(app, jobs=[AppointmentBookingTimeoutJob, StepsACounterJob])

    assert sorted(wired.background.jobs) == sorted(
        [TIMEOUT_JOB, PROCESS_COMMANDS_JOB, STEPS_A_COUNTER]
    )


def test_the_runner_enqueues_on_the_apps_queue_with_the_settings_given_after_install() -> None:
    app = app_with_jobs()
    wired = install(app)
    app.conf.ddd_celery_max_payload_bytes = 16  # configured after the wiring, as projects do

    with pytest.raises(InvalidEnqueueError):
        wired.runner.handle(
            AppointmentBooking,
            "a-1",
            AppointmentBooking.slot_held,
            SlotHeld(appointment_id="a-1", patient="ada", slot="mon-09:00", amount_cents=4_000),
        )
    assert wired.runner.find(AppointmentBooking, "a-1") is None


@pytest.mark.parametrize("port", [ProcessRunner, CommandBus])
def test_a_provider_of_the_runner_or_the_bus_is_refused_they_are_the_calls(port: type) -> None:
    app = app_with_jobs()
    with pytest.raises(ValueError, match=f"providers of {port.__name__} are given by"):
        install(app, providers={port: lambda: None})


def test_no_manager_or_a_class_not_declared_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one process manager"):
        install(app_with_jobs(), managers=[])
    with pytest.raises(UnknownProcessError):
        install(app_with_jobs(), managers=[RequestPayment])


def test_the_job_store_given_as_the_process_store_is_refused_naming_both() -> None:
    job_store = InMemoryJobStore()
    refused = "store must be a ProcessStore, and InMemoryJobStore is not one"
    with pytest.raises(TypeError, match=refused):
        install(app_with_jobs(), store=job_store, job_store=job_store)


def test_an_app_with_background_jobs_installed_already_is_refused_by_the_install() -> None:
    app = app_with_jobs()
    install_background_jobs(app, jobs=[], store=InMemoryJobStore())
    with pytest.raises(RuntimeError, match="background jobs are already installed"):
        install(app)


def test_an_app_without_process_managers_has_none_to_find() -> None:
    with pytest.raises(LookupError, match="install_process_managers"):
        process_managers_of(app_with_jobs())
