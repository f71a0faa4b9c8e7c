"""The JobScheduler contract, run by the in-process scheduler on manual timers and by the
manual scheduler itself."""

from __future__ import annotations

import pytest

from ddd_celery.scheduling.in_process import InProcessJobScheduler
from ddd_celery.scheduling.scheduler import JobScheduler
from ddd_celery.testing import ManualJobScheduler, ManualJobTimers
from ddd_celery.testing.contracts.job_scheduler import (
    JobSchedulerContract,
    MakeScheduler,
    SchedulerHarness,
    SchedulerPorts,
)


class InProcessHarness(SchedulerHarness):
    def __init__(self, ports: SchedulerPorts) -> None:
        self.timers = ManualJobTimers(ports.clock)
        self._scheduler = InProcessJobScheduler(
            clock=ports.clock,
            lock=ports.lock,
            scope=ports.scope,
            ids=ports.ids,
            tenants=ports.tenants,
            on_run=ports.on_run,
            timers=self.timers,
        )

    @property
    def scheduler(self) -> JobScheduler:
        return self._scheduler

    async def advance(self, ms: int) -> None:
        await self.timers.advance(ms)

    async def stop(self) -> None:
        await self.timers.run_until(self._scheduler.stop())


class ManualHarness(SchedulerHarness):
    def __init__(self, ports: SchedulerPorts) -> None:
        self._scheduler = ManualJobScheduler(
            clock=ports.clock,
            lock=ports.lock,
            scope=ports.scope,
            ids=ports.ids,
            tenants=ports.tenants,
            on_run=ports.on_run,
        )

    @property
    def scheduler(self) -> JobScheduler:
        return self._scheduler

    async def advance(self, ms: int) -> None:
        await self._scheduler.advance(ms)


class TestInProcessJobSchedulerOnManualTimers(JobSchedulerContract):
    @pytest.fixture
    def make_scheduler(self) -> MakeScheduler:
        return InProcessHarness


class TestManualJobScheduler(JobSchedulerContract):
    @pytest.fixture
    def make_scheduler(self) -> MakeScheduler:
        return ManualHarness
