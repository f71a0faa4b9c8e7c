"""The in-memory deployment of a process manager: stores, queue, worker on ManualJobTimers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from ddd_celery.background import (
    InMemoryJobStore,
    JobStatus,
    QueueWorker,
    StoredJob,
    StoredJobQueue,
)
from ddd_celery.kernel import (
    FixedClock,
    FixedExecutionScope,
    InMemoryCommandBus,
    InMemoryUnitOfWork,
    SequentialIdGenerator,
)
from ddd_celery.processes import (
    InMemoryProcessStore,
    ProcessCommandsJob,
    StoredProcessRunner,
)
from ddd_celery.testing import ManualJobTimers
from examples.clinic.booking.process import (
    AppointmentBookingTimeoutJob,
    ConfirmAppointment,
    ReleaseSlot,
    RequestPayment,
)
from tests.unit.process_managers.processes import Noted

START = datetime(2026, 10, 1, 8, 0, tzinfo=UTC)
RESEND_AFTER_MS = 30_000


def plus(ms: int) -> datetime:
    return START + timedelta(milliseconds=ms)


@dataclass
class Deployment:
    """One application's process managers, in memory, on a fixed clock."""

    clock: FixedClock = field(default_factory=lambda: FixedClock(START))
    unit_of_work: InMemoryUnitOfWork = field(default_factory=InMemoryUnitOfWork)
    processes: InMemoryProcessStore = field(default_factory=InMemoryProcessStore)
    bus: InMemoryCommandBus = field(default_factory=InMemoryCommandBus)
    max_attempts: int = 5

    def __post_init__(self) -> None:
        self.store = InMemoryJobStore(unit_of_work=self.unit_of_work)
        self.scope = FixedExecutionScope()
        self.jobs = StoredJobQueue(
            store=self.store,
            clock=self.clock,
            ids=SequentialIdGenerator("job-"),
            scope=self.scope,
            unit_of_work=self.unit_of_work,
        )
        self.runner = StoredProcessRunner(
            store=self.processes,
            jobs=self.jobs,
            commands=self.bus,
            unit_of_work=self.unit_of_work,
            max_attempts=self.max_attempts,
            resend_after_ms=RESEND_AFTER_MS,
        )
        for command in (RequestPayment, ConfirmAppointment, ReleaseSlot, Noted):
            self.bus.register(command, lambda command: None)
        self.timers = ManualJobTimers(self.clock)
        self.worker = QueueWorker(
            store=self.store, clock=self.clock, scope=self.scope, timers=self.timers
        )
        self.worker.register(
            AppointmentBookingTimeoutJob, lambda: AppointmentBookingTimeoutJob(self.runner)
        )
        self.worker.register(ProcessCommandsJob, lambda: ProcessCommandsJob(self.bus))

    def job(self, job_id: str) -> StoredJob:
        found = self.store.find(job_id, tenant_id=None)
        assert found is not None
        return found

    def jobs_named(self, name: str, status: JobStatus | None = None) -> list[StoredJob]:
        return [
            job
            for job in self.store.list()
            if job.name == name and (status is None or job.status is status)
        ]


@pytest.fixture
def deployment() -> Deployment:
    return Deployment()


@pytest.fixture
async def running(deployment: Deployment) -> AsyncIterator[Deployment]:
    """The deployment with its worker polling, stopped after the test."""
    await deployment.worker.start()
    yield deployment
    await deployment.worker.stop()
