"""The worker side: the Celery task of each declared job and its run of one occurrence.

Beat decides and sends; the task runs one occurrence. It reads the occurrence from the message,
opens the execution scope (origin ``schedule``, the job's system actor, the message's
correlation id), builds the job from its providers, runs it tenant by tenant, and records
``succeeded`` or ``failed`` with the same log line, metrics and ``on_run`` as every driver. It
then ends the run in the shared run state, which may hand back an occurrence queued behind it
(``overlap: 'queue'``): the task sends that one on, since beat cannot know when a run ends
(``promotion.py``). ``run_now`` (``run_now.py``) runs an occurrence the same way, in this
process.

``timeout_ms`` is enforced twice, because pools differ. On prefork, Celery's soft time limit
raises inside the job's thread; on every pool (solo and threads have no time limits), the
process's watchdog (one thread for all runs) aborts ``execution.signal`` at the deadline.
Whichever comes first records ``failed``, ``JOB_TIMEOUT``; the occurrence is recorded once,
whatever ends after.

A run that failed then ends its task in failure, raising ``ScheduledJobFailedError`` (or
``ScheduledJobRefusedError`` for a ``DomainError``), so Celery's own failure path sees it: the
``task_failure`` signal, the FAILURE state, Flower, Sentry's and OpenTelemetry's integrations.
It is never retried: the next occurrence is the retry.
"""

from __future__ import annotations

import inspect
import threading
import warnings
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import replace
from datetime import datetime
from types import MethodType
from typing import Any, ClassVar, cast

from celery import exceptions as celery_exceptions
from celery.app.annotations import resolve_all
from celery.app.task import extract_exec_options
from celery.exceptions import SoftTimeLimitExceeded
from celery.local import PromiseProxy
from celery.utils.functional import firstmethod

from ddd_celery.celery.config import app_config
from ddd_celery.celery.event_loop import run_in_thread_loop
from ddd_celery.celery.logs import render_fields_in_celery_logs
from ddd_celery.celery.message import OccurrenceMessage, UnreadableMessageError, refuse_unreal
from ddd_celery.celery.promotion import conclude_run, end_run
from ddd_celery.celery.registry import ATTRIBUTE, CeleryJob, CeleryJobs, jobs_of
from ddd_celery.celery.shutdown import RUNS
from ddd_celery.celery.spread import spread_occurrence, spreads
from ddd_celery.celery.tracing import TraceparentScope, run_span
from ddd_celery.celery.watchdog import WATCHDOG, Watch
from ddd_celery.declarations.execution import JobExecution
from ddd_celery.kernel.abort import AbortController
from ddd_celery.kernel.errors import DddCeleryError, DomainError
from ddd_celery.kernel.instants import iso_ms
from ddd_celery.scheduling.errors import JobAbortedError, JobTimeoutError
from ddd_celery.scheduling.execution import (
    Attempt,
    AttemptResult,
    deadline_of,
    not_run,
    ran,
    run_attempt,
    run_attempt_sync,
    tenants_of,
)
from ddd_celery.scheduling.outcomes import JobRun, Outcome

DuplicateTaskNameWarning: type[Warning] = getattr(
    celery_exceptions, "DuplicateTaskNameWarning", celery_exceptions.CeleryWarning
)
"""Celery's warning of a task name registered twice (5.5 on), or its base before it."""

HARD_LIMIT_GRACE_S = 5.0
"""How long past its soft limit a prefork child may go on before Celery kills it.

Time for a job to see its signal and return; a job that ignores the signal is killed then, so
it cannot hold a pool process for ever.
"""


class ScheduledJobFailedError(DddCeleryError, RuntimeError):
    """The task of an occurrence whose run failed, raised once the outcome is recorded.

    Its message names the job, the error code and the type of what the job raised, never that
    error's message (it quotes data): Celery's log line, the result backend, Flower's event and
    an error tracker get ``billing.close-month failed: UNEXPECTED_ERROR (ValueError), scheduled_at
    2026-03-02T06:00:00.000Z, correlation id 4f1c...``. Its traceback is the job's own, so the
    frames show where the run failed: chained to the job's error, whose message Celery's
    traceback then shows, unless ``ddd_celery_traceback_messages`` is false (then its frames
    alone). ``code`` is the run's error code.
    """

    def __init__(
        self,
        message: str,
        *,
        job: str | None = None,
        code: str | None = None,
        error_type: str | None = None,
    ) -> None:
        super().__init__(message)
        self.job = job
        self.code = code
        self.error_type = error_type

    @classmethod
    def of(cls, record: JobRun) -> ScheduledJobFailedError:
        """The failure of the run ``record``, as this class (``raise_if_failed`` chooses it)."""
        tenant = "" if record.tenant_id is None else f", tenant {record.tenant_id}"
        message = (
            f"{record.job} failed: {record.error_code} ({record.error_type}), "
            f"scheduled_at {iso_ms(record.scheduled_at)}, "
            f"correlation id {record.correlation_id}{tenant}"
        )
        return cls(message, job=record.job, code=record.error_code, error_type=record.error_type)


class ScheduledJobRefusedError(ScheduledJobFailedError):
    """A run that failed with a ``DomainError``: a refusal of the model, expected.

    In the job task's ``throws``: the task still ends in failure, Celery logs it at INFO with no
    traceback, and Sentry's Celery integration does not report it, as ``report_failed_runs``
    does not.
    """


def raise_if_failed(record: JobRun, error: BaseException | None, *, messages: bool) -> None:
    """Raise the failure of ``record`` when it failed, with the frames of ``error``.

    With ``messages`` (``ddd_celery_traceback_messages``), chained to ``error``, whose message
    Celery then prints; without, carrying its traceback alone, never its message.
    """
    if record.outcome is not Outcome.FAILED:
        return
    kind = ScheduledJobRefusedError if isinstance(error, DomainError) else ScheduledJobFailedError
    failure = kind.of(record)
    if messages and error is not None:
        raise failure from error
    traceback = None if error is None else error.__traceback__
    raise failure.with_traceback(traceback) from None


def time_limits(timeout_ms: int | None) -> dict[str, float]:
    """The task's soft and hard time limits for ``timeout_ms``; none without a timeout."""
    if timeout_ms is None:
        return {}
    soft = timeout_ms / 1000
    return {"soft_time_limit": soft, "time_limit": soft + HARD_LIMIT_GRACE_S}


class RunTask:
    """The Celery task of a job, shared: one class per kind and app, one instance per job.

    Celery's ``app.task`` builds a class per task (``type()``, an exec'd argument checker, a
    bind reading ``app.conf``): some 4.6 KB and 150 µs each, 460 MB and 15 s at 100,000 jobs.
    Here what every job's task shares lives on the class: early acknowledged, never redelivered
    (an occurrence is not retried: the next one is the retry), JSON only, no result kept but a
    failure, ``ScheduledJobRefusedError`` expected. What is the job's own lives on its
    instance: its name, its job and its time limits, read there by the worker's request. The
    class is bound to its app (``task.app``) and holds the request stack, a ``LocalStack``: each
    thread, so each run of every pool, sees its own request. A kind says what runs a message
    (``run_message``) and the sentence of its ``__doc__``.
    """

    acks_late = False
    reject_on_worker_lost = False
    ignore_result = True
    store_errors_even_if_ignored = True
    throws: tuple[type[BaseException], ...] = (ScheduledJobRefusedError,)
    serializer = "json"
    sentence: ClassVar[str] = "Run one occurrence of the scheduled job {}."
    """The task's ``__doc__``, naming its job: made when read, not kept per job."""

    name: str
    job_name: str
    soft_time_limit: float | None
    time_limit: float | None
    # Celery's, from the Task class this one is mixed with (``of_app``).
    app: Any
    request: Any
    _bound_to: ClassVar[Any]
    _shared_exec_options: ClassVar[dict[tuple[Any, ...], dict[str, Any]]]

    def __init__(self, name: str, job: CeleryJob) -> None:
        self.name = name
        self.job_name = job.name
        timeout_ms = job.schedule.options.timeout_ms
        if timeout_ms is not None:  # else the app's task_time_limit, if any, as any task's
            self.soft_time_limit = timeout_ms / 1000
            self.time_limit = self.soft_time_limit + HARD_LIMIT_GRACE_S

    @staticmethod
    def run_message(
        app: Any, name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any], *, carrier: Any
    ) -> tuple[JobRun, BaseException | None] | None:
        """Run what a message of this kind carries (``run_message`` below, for a job's task)."""
        return run_message(app, name, args, kwargs, carrier=carrier)

    def run(self, *args: Any, **kwargs: Any) -> None:
        """Run the message's occurrence; the task ends in failure when the run failed.

        As a bound task: the request (its headers) is the carrier of the run's trace.
        """
        concluded = self.run_message(self.app, self.job_name, args, kwargs, carrier=self.request)
        if concluded is not None:
            raise_if_failed(*concluded, messages=app_config(self.app).traceback_messages)

    @staticmethod
    def __header__(*args: Any, **kwargs: Any) -> int:
        """Celery's check of ``apply_async``'s arguments (``strict_typing``): as ``run``, any."""
        return 1

    @classmethod
    def of_app(cls, app: Any) -> type[RunTask]:
        """This kind mixed with ``app.Task`` (the app's ``task_cls``, as ``app.task`` does)."""
        namespace = {
            "__doc__": _TaskDoc(cls.__doc__, cls.sentence),
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
        }
        made: type[RunTask] = type(cls.__name__, (cls, app.Task), namespace)
        return made

    @classmethod
    def bind(cls, app: Any) -> Any:
        """Bind the class to ``app`` once: Celery's finalize binds every task it holds, here
        each job's instance of this one class (17 µs each, 1.7 s at 100,000 jobs)."""
        if cls.__dict__.get("_bound_to") is app:
            return app
        bound = cast(Any, super()).bind(app)
        cls._bound_to = app
        cls._shared_exec_options = {}  # as Celery forgets its cache at each bind
        return bound

    def _get_exec_options(self) -> dict[str, Any]:
        """Celery's send options of this task (``apply_async``, beat's message), one dict for
        every task of the class whose own options are the same, not one each: 23 MB at 100,000
        jobs in a beat that sent them all. Celery's caller copies it, never writes it."""
        # Read as attributes: a task's ``__dict__``, once asked, is made and kept (64 bytes).
        key = tuple(getattr(self, attr, None) for attr in _EXEC_OPTIONS)
        shared = type(self)._shared_exec_options
        try:
            options = shared.get(key)
        except TypeError:  # an option that cannot be a key (a kombu object): Celery's cache
            own: dict[str, Any] = cast(Any, super())._get_exec_options()
            return own
        if options is None:
            options = shared[key] = dict(zip(_EXEC_OPTIONS, key, strict=True))
        return options


_EXEC_OPTIONS = tuple(extract_exec_options(object()))
"""The attributes Celery reads a task's send options from (``extract_exec_options``)."""


class _TaskDoc:
    """A task's ``__doc__``: its kind's docstring on the class, its job's sentence on a task."""

    def __init__(self, doc: str | None, sentence: str) -> None:
        self._doc = doc
        self._sentence = sentence

    def __get__(self, task: RunTask | None, owner: type | None = None) -> str | None:
        return self._doc if task is None else self._sentence.format(task.job_name)


RunTasks = Callable[[], Iterable[tuple[type[RunTask], str, CeleryJob]]]
"""The tasks to register: each one's kind, name and job, read when the app finalizes."""


def register_run_tasks(app: Any, tasks: RunTasks) -> None:
    """Register each task in ``app.tasks`` when the app finalizes, or now if it has.

    As ``app.task`` does, through Celery's pending promises, so that neither the app is
    finalized nor ``app.conf`` read here (``config_from_object`` may come after
    ``install_jobs``). A name the app already has keeps its task, with Celery's warning.
    Also makes Celery's log lines show the library's fields, once per process
    (``render_fields_in_celery_logs``).
    """

    def register() -> None:
        kinds: dict[type[RunTask], type[RunTask]] = {}
        annotations = app.annotations
        registered = app._tasks
        for kind, name, job in tasks():
            made = kinds.get(kind)
            if made is None:
                made = kinds[kind] = kind.of_app(app)
                made.bind(app)
            if name in registered:
                warnings.warn(
                    DuplicateTaskNameWarning(
                        f"a task named {name!r} is already registered and keeps the name: "
                        f"the scheduled job {job.name} has no task of its own"
                    ),
                    stacklevel=2,
                )
                continue
            task = made(name, job)
            if annotations:
                _annotate(task, annotations)
            registered[name] = task

    def registered_or_raised() -> None:
        try:
            register()
        except AttributeError as error:  # Celery's promise would take it for "not a promise"
            raise RuntimeError(f"the job tasks could not be registered: {error}") from error

    if app.finalized:
        register()
    else:
        app._pending.append(PromiseProxy(registered_or_raised))
    render_fields_in_celery_logs()


def _annotate(task: RunTask, annotations: Any) -> None:
    """Apply the ``task_annotations`` naming ``task`` to it alone, as Celery applies them to a
    task's class: attributes, and methods wrapped (``'@name'``); the first that names it, then
    the one for every task (``'*'``) over it. Without one naming it, the class has it all."""
    if _first_annotation(annotations, task) is None:
        return
    for found in resolve_all(annotations, task):
        for key, value in found.items():
            if key.startswith("@"):
                original = getattr(type(task), key[1:])
                original = getattr(original, "__wrapped__", original)
                wrapped = value(original)
                wrapped.__wrapped__ = original
                setattr(task, key[1:], MethodType(wrapped, task))
            else:
                setattr(task, key, value)


_first_annotation = firstmethod("annotate")
"""What the first of ``task_annotations`` naming a task says of it (Celery's own matcher)."""


def run_message(
    app: Any,
    name: str,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    *,
    carrier: Any = None,
) -> tuple[JobRun, BaseException | None] | None:
    """Run the occurrence a task message carries; a message that cannot be read runs nothing.

    Returns the record and what the job raised, None for a message that could not be read.
    Never raises for the job's sake: its outcome is recorded, and the task decides what
    Celery sees. ``carrier`` holds the message's headers (the task's request): its trace.
    """
    registry = jobs_of(app)
    job = registry.job(name)
    if args:
        refused = UnreadableMessageError(
            "must be empty: an occurrence travels as keyword arguments", field="args"
        )
        _refused(registry, name, refused)
        return None
    message = read_occurrence(registry, job, kwargs)
    if message is None:
        return None
    if spreads(registry, job, message):
        return spread_occurrence(app, registry, job, message)
    run = OccurrenceRun(
        registry,
        job,
        scheduled_at=message.scheduled_at,
        correlation_id=message.correlation_id,
        tenant_id=message.tenant_id,
        app=app,
        carrier=carrier,
    )
    return run.execute()


def read_occurrence(
    registry: CeleryJobs, job: CeleryJob, kwargs: Mapping[str, Any]
) -> OccurrenceMessage | None:
    """The occurrence a message names, or None once a message that is not one is logged.

    Refused: a message that cannot be read, and one that cannot be a real occurrence of the
    job (``refuse_unreal``). Nothing is recorded as the job's outcome and the run state is left
    alone: the instant is the sender's word, and recording it could pin the job's last outcome.
    """
    try:
        message = OccurrenceMessage.from_kwargs(kwargs)
        refuse_unreal(message, job.schedule, registry.clock.now(), registry.rules, registry.tenants)
    except UnreadableMessageError as error:
        _refused(registry, job.name, error)
        return None
    return message


def _refused(registry: CeleryJobs, name: str, error: UnreadableMessageError) -> None:
    """Log a refused message: which field and why, never the value it holds."""
    what = "read the task message"
    if error.field is not None:
        what = f"{what}: {error.field} {error.reason}"
    registry.recorder.could_not_follow(name, error, what=what)


def on_task_revoked(
    sender: Any = None,
    request: Any = None,
    terminated: bool = False,
    **_: Any,
) -> None:
    """Record ``missed`` an occurrence a worker dropped unrun: its message expired, or was revoked.

    Celery discards such a message without calling the task, so without this the occurrence
    would have no outcome and its claim would hold the job busy until it expired. A run
    terminated while in progress is not one: it had started.
    """
    registry = getattr(getattr(sender, "app", None), ATTRIBUTE, None)
    if terminated or not isinstance(registry, CeleryJobs):
        return
    job = registry.jobs.get(getattr(sender, "name", ""))
    if job is None or not job.declared:
        return
    message = read_occurrence(registry, job, getattr(request, "kwargs", None) or {})
    if message is None:
        return
    registry.recorder.record(
        not_run(
            job.name,
            message.scheduled_at,
            Outcome.MISSED,
            correlation_id=message.correlation_id,
        )
    )
    end_run(sender.app, registry, job, message.scheduled_at)


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


class OccurrenceRun:
    """One occurrence of a declared job run in this process, concluded exactly once.

    The run ends either when the job returns or at its deadline, whichever comes first: the
    first to conclude records the outcome and ends the run in the run state; the other waits
    for that and does nothing more, so the task (or ``run_now``) never returns before its
    record is kept. A job that ignores its aborted signal goes on behind, unrecorded.
    """

    def __init__(
        self,
        registry: CeleryJobs,
        job: CeleryJob,
        *,
        scheduled_at: datetime,
        correlation_id: str,
        tenant_id: str | None,
        app: Any | None,
        carrier: Any = None,
        started_at: datetime | None = None,
    ) -> None:
        """``app`` is the worker's: the run is ended in the run state and sends on what waited.

        None for ``run_now``, which leaves the run state alone. ``carrier`` holds the headers
        of the message, whose trace the run's span continues. ``started_at``: when the
        occurrence started, if before this run (a tenant run of a spread occurrence keeps the
        occurrence's deadline); now by default.
        """
        self._registry = registry
        self._job = job
        self._tenant_id = tenant_id
        self._app = app
        self._carrier = carrier
        self._scope = registry.scope
        self._controller = AbortController()
        started_at = started_at or registry.clock.now()
        self._attempt = Attempt(
            job=job.name,
            scheduled_at=scheduled_at,
            started_at=started_at,
            correlation_id=correlation_id,
            signal=self._controller.signal,
            deadline=deadline_of(started_at, job.schedule.options),
            tenants=(),
        )
        self._mutex = threading.Lock()
        self._concluded: tuple[JobRun, BaseException | None] | None = None
        self.unkept: BaseException | None = None
        """Why the last runs could not keep the record of a ``run_now`` (None: kept)."""

    def execute(self) -> tuple[JobRun, BaseException | None]:
        """Run the job and return the outcome recorded and the error it was recorded with.

        Inside the run's span, whose traceparent each run's execution scope carries.
        """
        attempt = self._attempt
        with run_span(
            attempt.job, attempt.scheduled_at, attempt.correlation_id, carrier=self._carrier
        ) as span:
            if span.traceparent is not None:
                self._scope = TraceparentScope(self._registry.scope, span.traceparent)
            record, error = self._run()
            span.conclude(record)
        return record, error

    def _run(self) -> tuple[JobRun, BaseException | None]:
        """The tenants are asked first: a directory that cannot answer fails the occurrence."""
        try:
            tenants = (
                [self._tenant_id]
                if self._tenant_id is not None
                else tenants_of(self._job.name, self._job.schedule.options, self._registry.tenants)
            )
        except Exception as unanswered:
            return self._conclude(unanswered, None)
        self._attempt = replace(self._attempt, tenants=tenants)
        watchdog = self._watchdog()
        if self._app is not None:
            RUNS.add(self)  # a worker's run: its stop gives it grace_ms, then aborts it
        try:
            try:
                result = self._attempted()
                error, tenant = result.error, result.tenant_id
            except SoftTimeLimitExceeded as exceeded:
                # Raised outside the job (an async job's loop, between two tenants).
                error, tenant = self._timed_out(exceeded), None
            if error is not None and error is self._controller.signal.reason:
                tenant = None  # a timeout is the occurrence's, not one tenant's
            return self._conclude(error, tenant)
        finally:
            RUNS.discard(self)
            if watchdog is not None:
                WATCHDOG.cancel(watchdog)

    def _attempted(self) -> AttemptResult:
        """Run the job for each tenant, each built anew inside that run's scope.

        An async job runs on this thread's loop; a sync one is called right here, no loop at
        all (``run_attempt_sync``). A soft time limit interrupting the job becomes the run's
        ``JobTimeoutError`` before the attempt sees it, so the signal is aborted and no further
        tenant starts.
        """
        registry, job = self._registry, self._job
        if inspect.iscoroutinefunction(getattr(job.job_class, "run", None)):

            async def run_async(execution: JobExecution) -> Any:
                try:
                    return await registry.build(job).run(execution)
                except SoftTimeLimitExceeded as exceeded:
                    raise self._timed_out(exceeded) from exceeded

            return run_in_thread_loop(run_attempt(self._attempt, run_async, self._scope))

        def run_sync(execution: JobExecution) -> Any:
            try:
                result = registry.build(job).run(execution)
                if inspect.isawaitable(result):
                    return run_in_thread_loop(_awaited(result))
                return result
            except SoftTimeLimitExceeded as exceeded:
                raise self._timed_out(exceeded) from exceeded

        return run_attempt_sync(self._attempt, run_sync, self._scope)

    def _watchdog(self) -> Watch | None:
        """A watch that times the run out at its deadline, on pools without time limits.

        On the process's one watchdog thread (``WATCHDOG``), not a thread per run.
        """
        deadline = self._attempt.deadline
        if deadline is None:
            return None
        delay = max(0.0, (deadline - self._registry.clock.now()).total_seconds())
        return WATCHDOG.watch(delay, self._on_deadline)

    @property
    def grace_ms(self) -> int:
        """How long the run may go on once its worker stops (``ddd_celery_grace_ms``)."""
        return self._registry.grace_ms

    def abort_for_stop(self) -> None:
        """The worker stopped and the grace passed: abort the signal, record ``JOB_ABORTED``.

        Recorded now, before the process exits; a timeout that came first keeps its record.
        """
        aborted = JobAbortedError(
            f"the worker stopped and the run outlived grace_ms={self.grace_ms}",
            job=self._job.name,
        )
        if self._controller.abort(aborted):
            self._conclude(aborted, None)

    def _on_deadline(self) -> None:
        self._conclude(self._timed_out(None), None)

    def _timed_out(self, cause: BaseException | None) -> BaseException:
        """Abort the signal with a ``JobTimeoutError`` (the first reason wins) and return it."""
        timeout = JobTimeoutError(
            f"the run outlived timeout_ms={self._job.schedule.options.timeout_ms}",
            job=self._job.name,
        )
        timeout.__cause__ = cause
        self._controller.abort(timeout)
        return self._controller.signal.reason or timeout

    def _conclude(
        self, error: BaseException | None, tenant: str | None
    ) -> tuple[JobRun, BaseException | None]:
        with self._mutex:
            if self._concluded is not None:
                return self._concluded
            record = ran(self._attempt, self._registry.clock.now(), error, tenant)
            self._concluded = (record, error)
            if self._app is not None:
                conclude_run(self._app, self._registry, self._job, record, error)
            else:
                self.unkept = self._registry.recorder.record(record, error)
        return record, error
