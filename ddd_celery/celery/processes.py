"""Wiring process managers on a Celery app: one call for the store, the queue, the runner and
the jobs that fire their timeouts and send their commands.

The runner enqueues on the app's background job queue, and the timeout jobs the workers run are
built with the runner: ``install_process_managers`` installs the background jobs and the runner
together, so no provider has to name a runner that does not exist yet. It is called where the
app is built, after ``install_jobs``, instead of ``install_background_jobs``: the app's other
background jobs are given to it as ``jobs``.

With ``opentelemetry-api`` installed, each step gets a span (``OpenTelemetryStepTracer``) under
the span current in the worker's task or the request, or else under the traceparent of the work
in progress (the job that fired a timeout carries the span of the step that armed it).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ddd_celery.background.store import JobStore
from ddd_celery.celery.background.install import install_background_jobs
from ddd_celery.celery.background.registry import BackgroundJobs
from ddd_celery.celery.registry import Provider
from ddd_celery.declarations.background import (
    BackgroundJobDeclaration,
    background_declaration_of,
)
from ddd_celery.declarations.process import ProcessDeclaration, process_declaration_of
from ddd_celery.kernel.commands import CommandBus
from ddd_celery.kernel.job_queue import BackgroundJobView, EnqueueRequest, JobQueue
from ddd_celery.kernel.metrics import Metrics
from ddd_celery.kernel.process_runner import ProcessRunner
from ddd_celery.kernel.unit_of_work import UnitOfWork
from ddd_celery.processes.errors import UnknownProcessError
from ddd_celery.processes.jobs import ProcessCommandsJob
from ddd_celery.processes.observability import (
    NoStepTracer,
    ProcessStep,
    StepOutcome,
    StepTrace,
    StepTracer,
)
from ddd_celery.processes.runner import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_RESEND_AFTER_MS,
    StoredProcessRunner,
)
from ddd_celery.processes.store import ProcessStore

try:
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    from opentelemetry.trace.status import Status, StatusCode
except ImportError:  # the [otel] extra is not installed: steps are not traced
    TRACING = False
else:
    TRACING = True

PROCESSES_ATTRIBUTE = "ddd_processes"
TRACER_NAME = "ddd_celery"


@dataclass(frozen=True, slots=True)
class ProcessManagers:
    """What ``install_process_managers`` wired: the runner, and the background jobs it runs on."""

    managers: Mapping[str, ProcessDeclaration]
    runner: StoredProcessRunner
    """The ``ProcessRunner`` the use cases step their processes with (and the jobs, through
    their providers)."""
    background: BackgroundJobs
    """What ``install_background_jobs`` returned: ``background.queue(...)`` for the use cases."""
    store: ProcessStore


def install_process_managers(
    app: Any,
    *,
    managers: Iterable[type],
    store: ProcessStore,
    commands: CommandBus,
    unit_of_work: UnitOfWork,
    job_store: JobStore,
    jobs: Iterable[type | BackgroundJobDeclaration] = (),
    providers: Mapping[type, Provider] | None = None,
    metrics: Metrics | None = None,
    tracer: StepTracer | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    resend_after_ms: int = DEFAULT_RESEND_AFTER_MS,
    **background: Any,
) -> ProcessManagers:
    """Install process managers and the background jobs on a Celery app given ``install_jobs``.

    - ``managers``: the ``@process_manager`` classes; their timeout jobs and
      ``ProcessCommandsJob`` become background jobs of the app (a worker consumes the timeout
      jobs' queues and ``ddd_celery``).
    - ``store``: the ``ProcessStore`` of the instances (``SqlProcessStore``);
      ``unit_of_work``: the one it and ``job_store`` write in, so that a step's state, timeouts
      and outbox commit together; ``commands``: the ``CommandBus`` the commands leave through,
      from the runner and from the outbox job.
    - ``job_store``, ``jobs``, ``providers``, ``metrics`` and any other keyword
      (``lease_ms``, ``logger``, ``on_run``...): as ``install_background_jobs`` takes them;
      ``jobs`` are the app's other background jobs. ``ProcessRunner`` and ``CommandBus`` are
      provided to every job: the runner and ``commands``.
    - ``metrics``, ``tracer``, ``max_attempts``, ``resend_after_ms``: the runner's
      (``StoredProcessRunner``); ``tracer`` is ``OpenTelemetryStepTracer`` when
      ``opentelemetry-api`` is installed.

    The runner's queue is ``background.queue(unit_of_work=unit_of_work)``, built at its first
    enqueue (it reads ``app.conf`` then), and its scope the app's. Keeps what it wired as
    ``app.ddd_processes`` (``process_managers_of``) and returns it. Refuses no manager or a
    class not declared with ``@process_manager`` (``ValueError``, ``UnknownProcessError``),
    providers of ``ProcessRunner`` or ``CommandBus`` (``ValueError``: they are this call's),
    a ``store`` that is no ``ProcessStore`` or a ``job_store`` no ``JobStore`` (``TypeError``:
    ``install_background_jobs`` calls the job store ``store``), and whatever
    ``install_background_jobs`` refuses. Connects to nothing.
    """
    declared = _managers(managers)
    for name, value, port in (("store", store, ProcessStore), ("job_store", job_store, JobStore)):
        if not isinstance(value, port):
            raise TypeError(
                f"{name} must be a {port.__name__}, and {type(value).__name__} is not one "
                "(store= keeps the instances, job_store= the background jobs)"
            )
    given = dict(providers or {})
    taken = sorted(port.__name__ for port in (ProcessRunner, CommandBus) if port in given)
    if taken:
        raise ValueError(
            f"providers of {', '.join(taken)} are given by install_process_managers (the "
            "runner, and commands=): leave them out of providers"
        )
    holder: list[StoredProcessRunner] = []
    installed = install_background_jobs(
        app,
        jobs=_with_process_jobs(jobs, declared.values()),
        store=job_store,
        providers={**given, ProcessRunner: lambda: holder[0], CommandBus: lambda: commands},
        metrics=metrics,
        **background,
    )
    runner = StoredProcessRunner(
        store=store,
        jobs=_AppQueue(installed, unit_of_work),
        commands=commands,
        unit_of_work=unit_of_work,
        scope=installed.scope,
        max_attempts=max_attempts,
        resend_after_ms=resend_after_ms,
        metrics=metrics,
        tracer=tracer if tracer is not None else _default_tracer(),
    )
    holder.append(runner)
    wired = ProcessManagers(managers=declared, runner=runner, background=installed, store=store)
    setattr(app, PROCESSES_ATTRIBUTE, wired)
    return wired


def process_managers_of(app: Any) -> ProcessManagers:
    """The process managers wired on ``app`` (for a provider that needs the runner before it
    exists: ``lambda: process_managers_of(app).runner``); a clear error when none were."""
    wired = getattr(app, PROCESSES_ATTRIBUTE, None)
    if not isinstance(wired, ProcessManagers):
        raise LookupError(
            f"no process managers are installed on Celery app {getattr(app, 'main', app)!r}: "
            "call ddd_celery.celery.install_process_managers(app, ...) where the app is built"
        )
    return wired


def _managers(managers: Iterable[type]) -> dict[str, ProcessDeclaration]:
    declared: dict[str, ProcessDeclaration] = {}
    for manager in managers:
        try:
            declaration = process_declaration_of(manager)
        except LookupError as error:
            raise UnknownProcessError(str(error)) from None
        declared[declaration.name] = declaration
    if not declared:
        raise ValueError("install_process_managers needs at least one process manager")
    return declared


def _with_process_jobs(
    jobs: Iterable[type | BackgroundJobDeclaration], managers: Iterable[ProcessDeclaration]
) -> list[BackgroundJobDeclaration]:
    """The app's jobs, then each timeout job and the outbox job not among them already (the
    same job listed twice is kept once; another job of the same name is refused by the
    install)."""
    listed = [background_declaration_of(job) if isinstance(job, type) else job for job in jobs]
    wanted = [m.timeout_job for m in managers if m.timeout_job is not None]
    for job in [*wanted, background_declaration_of(ProcessCommandsJob)]:
        if job not in listed:
            listed.append(job)
    return listed


class _AppQueue(JobQueue):
    """The app's background job queue in the runner's unit of work, built at its first use:
    building it reads ``app.conf``, which a project may still be configuring at install."""

    def __init__(self, background: BackgroundJobs, unit_of_work: UnitOfWork) -> None:
        self._background = background
        self._unit_of_work = unit_of_work
        self._queue: JobQueue | None = None
        self._mutex = threading.Lock()

    def _built(self) -> JobQueue:
        if self._queue is None:
            with self._mutex:
                if self._queue is None:
                    self._queue = self._background.queue(
                        unit_of_work=self._unit_of_work, traceparent=current_traceparent
                    )
        return self._queue

    def enqueue(
        self,
        job: type[Any] | str,
        payload: Any,
        *,
        delay_ms: int | None = None,
        run_at: datetime | None = None,
        idempotency_key: str | None = None,
    ) -> str:
        return self._built().enqueue(
            job, payload, delay_ms=delay_ms, run_at=run_at, idempotency_key=idempotency_key
        )

    def enqueue_many(self, requests: Iterable[EnqueueRequest]) -> list[str]:
        return self._built().enqueue_many(requests)

    def find(self, job_id: str) -> BackgroundJobView | None:
        return self._built().find(job_id)

    def cancel(self, job_id: str) -> bool:
        return self._built().cancel(job_id)


def current_traceparent() -> str | None:
    """The W3C traceparent of the current span (a step's, while it enqueues its timeouts and
    outbox), or None: the queue then keeps the scope's."""
    if not TRACING:
        return None
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent")


def _default_tracer() -> StepTracer:
    return OpenTelemetryStepTracer() if TRACING else NoStepTracer()


class OpenTelemetryStepTracer(StepTracer):
    """A span per step on OpenTelemetry's tracer provider, named ``<process>/<step>``.

    Its parent is the current span (``opentelemetry-instrumentation-celery``'s task span, a
    request's); with none, the traceparent of the work in progress (restored by the worker from
    the job that fired a timeout). Attributes ``ddd_celery.process``, ``ddd_celery.step``,
    ``ddd_celery.instance_id``, ``ddd_celery.tenant_id``, ``ddd_celery.timeout`` and, at its end,
    ``ddd_celery.outcome``, ``ddd_celery.attempts``, ``ddd_celery.version``; a step that failed
    or lost every race has an error status with its code and ``error.type``, never the error's
    message. With no parent and no tracer provider set, no span is started.
    """

    def trace(self, step: ProcessStep) -> AbstractContextManager[StepTrace]:
        return self._span(step)

    @contextmanager
    def _span(self, step: ProcessStep) -> Iterator[StepTrace]:
        current = trace.get_current_span().get_span_context()
        carried = None
        if not current.is_valid and step.traceparent is not None:
            context = TraceContextTextMapPropagator().extract({"traceparent": step.traceparent})
            if trace.get_current_span(context).get_span_context().is_valid:
                carried = context
        if not current.is_valid and carried is None and not _recording():
            with NoStepTracer().trace(step) as untraced:
                yield untraced
            return
        attributes = {
            "ddd_celery.process": step.process,
            "ddd_celery.step": step.step,
            "ddd_celery.instance_id": step.instance_id,
        }
        if step.tenant_id is not None:
            attributes["ddd_celery.tenant_id"] = step.tenant_id
        if step.timeout is not None:
            attributes["ddd_celery.timeout"] = step.timeout
        with trace.get_tracer(TRACER_NAME).start_as_current_span(
            f"{step.process}/{step.step}",
            context=carried,
            kind=trace.SpanKind.INTERNAL,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            yield _StepSpan(span)


class _StepSpan(StepTrace):
    def __init__(self, span: Any) -> None:
        self._span = span

    def conclude(
        self,
        outcome: StepOutcome,
        *,
        attempts: int,
        version: int | None = None,
        error: BaseException | None = None,
    ) -> None:
        span = self._span
        if not span.is_recording():
            return
        span.set_attribute("ddd_celery.outcome", outcome.value)
        span.set_attribute("ddd_celery.attempts", attempts)
        if version is not None:
            span.set_attribute("ddd_celery.version", version)
        if error is not None and outcome in (StepOutcome.FAILED, StepOutcome.CONFLICT):
            code = getattr(error, "code", None)
            code = code if isinstance(code, str) else ""
            kind = type(error).__name__
            span.set_attribute("ddd_celery.error_code", code)
            span.set_attribute("ddd_celery.error_type", kind)
            span.set_attribute("error.type", kind)
            span.set_status(Status(StatusCode.ERROR, f"{code} ({kind})"))


def _recording() -> bool:
    """Whether a tracer provider is set that may record spans (not OpenTelemetry's default)."""
    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)
