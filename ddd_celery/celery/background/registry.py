"""What ``install_background_jobs`` wired on a Celery app, read by its tasks, the relay and the CLI.

It lives on the app as ``app.ddd_background``, beside ``app.ddd_jobs`` of the scheduled jobs: the
process that enqueues, the worker that runs and the operator's CLI share one description of the
background jobs and one store.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ddd_celery.background.attempt import BackgroundRegistration
from ddd_celery.background.observability import BackgroundRecorder
from ddd_celery.background.operations import JobOrigin, JobOrigins
from ddd_celery.background.queue import StoredJobQueue
from ddd_celery.background.store import JobStore
from ddd_celery.celery.background.lease import Heartbeats
from ddd_celery.celery.background.publisher import CeleryJobPublisher
from ddd_celery.celery.background.relay import Relay
from ddd_celery.celery.config import app_config
from ddd_celery.celery.registry import Provider, dependencies
from ddd_celery.declarations.background import BackgroundJobDeclaration, BackgroundJobExecution
from ddd_celery.kernel.clock import Clock
from ddd_celery.kernel.ids import IdGenerator
from ddd_celery.kernel.reporting import ErrorReporter
from ddd_celery.kernel.scope import ExecutionScope
from ddd_celery.kernel.unit_of_work import UnitOfWork
from ddd_celery.processes.jobs import PROCESS_COMMANDS_JOB, ProcessTimeoutJob

BACKGROUND_ATTRIBUTE = "ddd_background"


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """How a worker holds the jobs it runs."""

    lease_ms: int
    """How long a claim holds a job without a heartbeat: a dead worker's job waits this long."""


@dataclass(frozen=True, slots=True)
class BackgroundJobs:
    """The background jobs of an app and the ports their tasks, relay and CLI share."""

    jobs: Mapping[str, BackgroundJobDeclaration]
    store: JobStore
    clock: Clock
    """The store's clock as this process reads it (``StoreClock``): every instant of a job."""
    ids: IdGenerator
    scope: ExecutionScope
    recorder: BackgroundRecorder
    logger: logging.Logger
    providers: Mapping[type, Provider]
    worker: WorkerSettings
    heartbeats: Heartbeats
    """Extends the leases of this process's attempts in progress, from one thread."""
    relay: Relay
    """The system job beat runs (``ddd_celery.relay``); ``relay.run()`` runs one tick here."""
    app: Any
    _registrations: dict[str, BackgroundRegistration] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _max_payload_bytes: list[int] = field(
        default_factory=list, init=False, repr=False, compare=False
    )

    def queue(
        self,
        *,
        unit_of_work: UnitOfWork | None = None,
        scope: ExecutionScope | None = None,
        traceparent: Callable[[], str | None] | None = None,
        errors: ErrorReporter | None = None,
    ) -> StoredJobQueue:
        """The ``JobQueue`` a use case enqueues on: this app's jobs, published as their tasks.

        Inside a ``unit_of_work`` a job is added and published after the commit, never on
        rollback. ``scope`` is where it reads who enqueues (the app's by default); ``errors``
        gets each add that fails after its commit (``JobNotAddedAfterCommitError``). A payload
        is limited by ``ddd_celery_max_payload_bytes``, read from ``app.conf`` at the first
        queue.
        """
        if not self._max_payload_bytes:
            self._max_payload_bytes.append(app_config(self.app).max_payload_bytes)
        return StoredJobQueue(
            store=self.store,
            clock=self.clock,
            ids=self.ids,
            scope=scope or self.scope,
            unit_of_work=unit_of_work,
            publisher=CeleryJobPublisher(self.app),
            traceparent=traceparent,
            declarations=self.jobs.values(),
            logger=self.logger,
            max_payload_bytes=self._max_payload_bytes[0],
            errors=errors,
        )

    def origins(self) -> JobOrigins:
        """Which jobs are the library's own, told by their classes: the timeouts of process
        managers (``ProcessTimeoutJob`` subclasses) and the outbox of their commands (by its
        name, installed here or not: another app on the store may run process managers)."""
        library = {PROCESS_COMMANDS_JOB: JobOrigin.PROCESS_COMMANDS}
        for name, declaration in self.jobs.items():
            job_class = declaration.job_class
            if isinstance(job_class, type) and issubclass(job_class, ProcessTimeoutJob):
                library[name] = JobOrigin.PROCESS_TIMEOUT
        return JobOrigins(library)

    def registration(self, name: str) -> BackgroundRegistration:
        """What a task runs for the job ``name``: built once per process, its constructor's
        ports read once (``typing.get_type_hints`` per message cost more than a no-op job)."""
        registration = self._registrations.get(name)
        if registration is None:
            registration = self._registrations[name] = _registration(self, self.jobs[name])
        return registration


def _registration(
    jobs: BackgroundJobs, declaration: BackgroundJobDeclaration
) -> BackgroundRegistration:
    """The registration of ``declaration``: each attempt builds a new instance of the job's
    class, each constructor parameter from its provider."""
    ports = [(name, jobs.providers[port]) for name, port in dependencies(declaration).items()]
    job_class = declaration.job_class

    def run(payload: Any, execution: BackgroundJobExecution) -> Any:
        return job_class(**{name: provide() for name, provide in ports}).run(payload, execution)

    return BackgroundRegistration(
        name=declaration.name,
        options=declaration.options,
        run=run,
        is_async=False,
        payload_type=declaration.payload_type,
    )


def background_jobs_of(app: Any) -> BackgroundJobs:
    """The background jobs wired on ``app``; a clear error when none were installed."""
    jobs = getattr(app, BACKGROUND_ATTRIBUTE, None)
    if not isinstance(jobs, BackgroundJobs):
        raise LookupError(
            f"no background jobs are installed on Celery app {getattr(app, 'main', app)!r}: "
            "call ddd_celery.celery.install_background_jobs(app, ...) where the app is built"
        )
    return jobs
