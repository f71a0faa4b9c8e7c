"""The JobScheduler contract, run by the Celery driver: install_jobs, beat's tick, the job task.

``CeleryJobScheduler`` is a test-only facade of the port over a real Celery app: nothing in it
decides an occurrence. ``register`` declares the job as an application does (a class whose
``run`` calls the callable given) and wires the app with ``install_jobs``, so the driver's own
refusals surface where the port says; ``start`` builds a ``JobBeatScheduler`` on it;
``run_now`` is ``ddd_celery.celery.run_now``. The harness moves the fixed clock onto each instant
``tick()`` says beat wakes up at, ticks, and runs every message beat (or a worker) published
through the job's registered task, as a worker would, before it moves on. No Redis, no broker
and no real sleep: the app's ``send_task`` is the wire, and the kwargs cross it as JSON.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import pytest
from celery import Celery
from kombu.serialization import dumps, loads

from ddd_celery.celery import install_jobs, jobs_of, run_now
from ddd_celery.celery.beat import JobBeatScheduler
from ddd_celery.celery.describe import describe_jobs
from ddd_celery.celery.tasks import ScheduledJobFailedError
from ddd_celery.declarations.execution import JobExecution
from ddd_celery.declarations.options import Tenancy
from ddd_celery.declarations.scheduled import ScheduledJobDeclaration
from ddd_celery.scheduling.execution import JobCallable
from ddd_celery.scheduling.last_runs import InMemoryJobLastRuns
from ddd_celery.scheduling.outcomes import context_of
from ddd_celery.scheduling.scheduler import (
    JobDescription,
    JobScheduler,
    ScheduleInput,
    registered_schedule,
)
from ddd_celery.testing.contracts.job_scheduler import (
    JobSchedulerContract,
    MakeScheduler,
    SchedulerHarness,
    SchedulerPorts,
)

MAX_TICKS = 100_000
"""Ticks one ``advance`` allows before it calls beat stuck (a tick that never lets time pass)."""


@dataclass(frozen=True)
class Published:
    """One ``send_task``: what a broker would carry to a worker."""

    task: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    options: Mapping[str, Any]


class CeleryJobScheduler(JobScheduler):
    """The JobScheduler port over a Celery app wired by ``install_jobs``; for the contract only.

    ``install_jobs`` wires an app once, so each ``register`` wires a new app with every job
    declared so far and keeps it only if ``install_jobs`` accepts them all. As in a deployment,
    the jobs are fixed once beat runs: one registered after ``start()`` is refused, not
    scheduled at once (the port allows it; the contract does not test it).
    """

    def __init__(self, ports: SchedulerPorts) -> None:
        self._ports = ports
        self._declared: list[ScheduledJobDeclaration] = []
        self._beat: JobBeatScheduler | None = None
        self._stopped = False
        self.published: deque[Published] = deque()
        self.app = self._wire([])

    @property
    def beat(self) -> JobBeatScheduler | None:
        """Beat once started; still ticked after ``stop()``, which closed it."""
        return self._beat

    def register(
        self,
        *,
        name: str,
        schedule: ScheduleInput,
        run: JobCallable,
        tenancy: Tenancy | str | None = None,
    ) -> None:
        if self._beat is not None:
            raise RuntimeError(
                "install_jobs wires a Celery app's jobs once: register every job before start()"
            )
        parsed = registered_schedule(name, schedule, tenancy)
        declaration = ScheduledJobDeclaration(name, context_of(name), parsed, _job_class(run))
        declared = [*self._declared, declaration]
        app = self._wire(declared)  # what install_jobs refuses is refused here, naming the job
        self.app.close()
        self.app, self._declared = app, declared

    async def start(self) -> None:
        if self._beat is not None:
            raise RuntimeError("the scheduler is already started")
        # Not lazy: setup_schedule reads the jobs and puts each first instant on beat's heap.
        self._beat = JobBeatScheduler(self.app)

    async def stop(self) -> None:
        if self._beat is None or self._stopped:
            return
        self._stopped = True
        self._beat.close()

    async def run_now(self, name: str) -> None:
        # run_now is synchronous and runs an async job on a loop of its own.
        await asyncio.to_thread(run_now, self.app, name)

    def describe(self) -> list[JobDescription]:
        """The library's own description (``describe_jobs``, as ``celery jobs list`` reads it).

        Only the fact that no beat runs (not started, or stopped) is the facade's: then no job
        has a next run.
        """
        registry = jobs_of(self.app)
        described = describe_jobs(registry, registry.clock.now())
        if self._beat is not None and not self._stopped and registry.start:
            return described
        return [replace(job, next_run_at=None) for job in described]

    async def deliver(self) -> None:
        """Run every message published so far, oldest first, as a worker takes them.

        A run may publish more (the occurrence queued behind it): those run too.
        """
        while self.published:
            message = self.published.popleft()
            # In a thread of its own, as on a worker: the task runs its own event loop.
            await asyncio.to_thread(self._consume, message)

    def close(self) -> None:
        self.app.close()

    def _wire(self, declared: list[ScheduledJobDeclaration]) -> Celery:
        ports = self._ports
        app = Celery(f"contract-{uuid.uuid4().hex[:12]}", broker="memory://", set_as_current=False)
        app.send_task = self._publish
        try:
            install_jobs(
                app,
                jobs=declared,
                lock=ports.lock,
                clock=ports.clock,
                scope=ports.scope,
                ids=ports.ids,
                tenants=ports.tenants,
                last_runs=InMemoryJobLastRuns(),
                on_run=ports.on_run,
                environ={},
                start=True,
            )
        except BaseException:
            app.close()
            raise
        return app

    def _publish(self, name: str, args: Any = None, kwargs: Any = None, **options: Any) -> None:
        self.published.append(Published(name, tuple(args or ()), dict(kwargs or {}), options))

    def _consume(self, message: Published) -> None:
        """The job's registered task runs the message, its arguments read back from JSON."""
        content_type, encoding, body = dumps([message.args, message.kwargs], serializer="json")
        args, kwargs = loads(body, content_type, encoding)
        task = self.app.tasks[message.task]
        result = task.apply(args=tuple(args), kwargs=kwargs, throw=False)
        # a failed run fails its task, as Celery is told; anything else is the driver's bug
        if result.failed() and not isinstance(result.result, ScheduledJobFailedError):
            raise result.result


class CeleryJobSchedulerHarness(SchedulerHarness):
    """The Celery driver under contract: beat ticks on the ports' fixed clock, a worker runs."""

    def __init__(self, ports: SchedulerPorts) -> None:
        self._clock = ports.clock
        self._scheduler = CeleryJobScheduler(ports)

    @property
    def scheduler(self) -> CeleryJobScheduler:
        return self._scheduler

    async def advance(self, ms: int) -> None:
        """Tick at each instant beat wakes up at, up to ``ms`` later, running what it sends.

        The clock moves by what ``tick()`` returns, as beat's service loop sleeps. A stopped
        (closed) beat is still ticked: that it sends nothing is its own doing.
        """
        target = self._clock.now() + timedelta(milliseconds=ms)
        for _ in range(MAX_TICKS):
            beat = self._scheduler.beat
            if beat is None:
                break
            sleep_s = beat.tick()
            await self._scheduler.deliver()
            now = self._clock.now()
            if now >= target:
                return
            self._clock.set(min(target, now + timedelta(seconds=sleep_s)))
        else:
            raise AssertionError(f"beat never let {ms} ms pass")
        if target > self._clock.now():
            self._clock.set(target)

    def close(self) -> None:
        self._scheduler.close()


class TestCeleryDriver(JobSchedulerContract):
    @pytest.fixture
    def make_scheduler(self) -> Iterator[MakeScheduler]:
        harnesses: list[CeleryJobSchedulerHarness] = []

        def make(ports: SchedulerPorts) -> SchedulerHarness:
            harness = CeleryJobSchedulerHarness(ports)
            harnesses.append(harness)
            return harness

        yield make
        for harness in harnesses:
            harness.close()


def _job_class(run: JobCallable) -> type:
    """A job class whose ``run`` calls ``run``: async when it is, so the task awaits it."""
    if inspect.iscoroutinefunction(run):

        async def run_async(self: object, execution: JobExecution) -> Any:
            return await run(execution)

        return type("ContractJob", (), {"run": run_async, "__module__": __name__})

    def run_sync(self: object, execution: JobExecution) -> Any:
        return run(execution)

    return type("ContractJob", (), {"run": run_sync, "__module__": __name__})
