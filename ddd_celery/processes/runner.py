"""``StoredProcessRunner``: the kernel's ``ProcessRunner`` on a ``ProcessStore`` and a ``JobQueue``.

A step runs in one unit of work:

1. the instance is loaded (for a timeout: the step runs only if that job is still the armed one);
2. the step decides: next state, commands, timeouts to arm and to disarm;
3. the timeouts it arms are enqueued as delayed jobs of the process's timeout job (a re-armed
   one replaces the earlier: the instance keeps the new job id); the jobs of those it disarms
   or re-arms are cancelled after the commit (the instance no longer names them, so until then
   they could only fire as no-ops);
4. its commands are enqueued as one ``ProcessCommandsJob``, due ``resend_after_ms`` later: the
   outbox;
5. the state is saved at the next version: last, so that nothing fails after it.

After the commit the runner sends the commands itself, then cancels their outbox job. A crash
between the commit and the send loses nothing: the outbox job sends them once it is due. With a
SQL store and the SQL job store in one unit of work that is one transaction; with the in-memory
stores, one process. Commands are sent at least once: a handler must be idempotent.

Two steps racing on one instance: the save of the second is refused (its version is stale), its
unit of work rolls back (nothing enqueued, nothing sent), and the step runs again on the
winner's state after a pause drawn at random below ``backoff_ms`` (doubling at each loss, up
to ``max_backoff_ms``), so that contenders fall out of step; ``max_attempts`` times at most,
then ``ProcessConflictError``. A retry loads the instance ``for_update``: a store that can hold
it (SQL in a unit of work) makes any racing step wait for the retry's commit, so a retry does not
lose again, while a first attempt takes no lock. Inside a unit of work the caller opened, the
runner joins it and cannot roll it back: a stale save raises at once, and the caller's unit of
work (rolled back by that error) decides whether to retry.

Instances are scoped by tenant as jobs are: every step, timeout and ``find`` reaches the instance
of the tenant of the execution scope in progress (none outside a scope), so two tenants' ``o-1``
are two instances. A timeout job runs in the scope of the step that armed it (the worker restores
it from the job), so it steps the instance of that tenant.

Each step is logged (``Process step ran`` once it committed), counted in ``process_steps_total``
by process, step and outcome (``StepOutcome``: succeeded, retried, conflict, ignored, failed),
and traced: a span per step through the ``StepTracer`` given, under the current span or the
scope's traceparent (the message that caused it).
"""

from __future__ import annotations

import logging
import random as _random
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from ddd_celery.declarations.process import (
    ProcessDeclaration,
    StepDeclaration,
    process_declaration_of,
    step_name,
)
from ddd_celery.kernel.commands import CommandBus
from ddd_celery.kernel.job_queue import JobQueue
from ddd_celery.kernel.metrics import Metrics, NoMetrics
from ddd_celery.kernel.process_runner import (
    ProcessDecision,
    ProcessInstance,
    ProcessRunner,
    StepRef,
    TimeoutFired,
)
from ddd_celery.kernel.scope import ContextVarExecutionScope, ExecutionScope
from ddd_celery.kernel.unit_of_work import UnitOfWork
from ddd_celery.processes.commands import encode_command
from ddd_celery.processes.errors import (
    CorruptProcessStateError,
    InvalidDecisionError,
    NoTimeoutJobError,
    ProcessConflictError,
    ProcessNotStartedError,
    StaleProcessVersionError,
    UnknownProcessError,
)
from ddd_celery.processes.jobs import ProcessCommandsJob
from ddd_celery.processes.observability import (
    PROCESS_STEPS_COUNTER,
    NoStepTracer,
    ProcessStep,
    StepOutcome,
    StepTrace,
    StepTracer,
)
from ddd_celery.processes.store import ProcessStore, StoredProcess, dump_json

DEFAULT_LOGGER = "ddd_celery.processes"
DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_RESEND_AFTER_MS = 30_000
"""How long the outbox job waits before sending the commands itself: longer than a healthy
send after the commit takes, short enough that a crash delays the commands by little."""
DEFAULT_BACKOFF_MS = 10
"""The bound of the first pause after a lost race: about a step's time on a database."""
DEFAULT_MAX_BACKOFF_MS = 1_000

STEP_RAN = "Process step ran"
TIMEOUT_IGNORED = "Process timeout no longer armed, ignored"
STEP_RETRIED = "Process step lost a race for its instance, running it again"
COMMAND_NOT_SENT = "Process command not sent, its outbox job will"
JOB_NOT_CANCELLED = "Process job not cancelled after the commit"
STEP_NOT_COUNTED = "Process step not counted: the metrics raised"


class StoredProcessRunner(ProcessRunner):
    """Runs the steps of the processes declared with ``@process_manager`` in this process.

    ``store`` keeps the instances; ``jobs`` enqueues the timeout jobs and the outbox jobs (it
    must know ``ProcessCommandsJob`` and each process's timeout job); ``commands`` sends the
    commands; ``unit_of_work`` is the one ``store`` and ``jobs`` write in; ``scope`` tells the
    tenant of the work in progress (by default the process's ``ContextVarExecutionScope``, which
    every scope of the library shares). A step that lost a race pauses ``random() * min(
    max_backoff_ms, backoff_ms * 2 ** (losses - 1))`` ms through ``sleep`` (seconds) before it
    runs again. The process class is built with no argument for each step: a step decides from
    its state and its message only. ``logger``, ``metrics`` and ``tracer`` observe each step
    (by default: the ``ddd_celery.processes`` logger, no metrics, no spans).
    """

    def __init__(
        self,
        *,
        store: ProcessStore,
        jobs: JobQueue,
        commands: CommandBus,
        unit_of_work: UnitOfWork,
        scope: ExecutionScope | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        resend_after_ms: int = DEFAULT_RESEND_AFTER_MS,
        backoff_ms: int = DEFAULT_BACKOFF_MS,
        max_backoff_ms: int = DEFAULT_MAX_BACKOFF_MS,
        random: Callable[[], float] = _random.random,
        sleep: Callable[[float], None] = time.sleep,
        logger: logging.Logger | None = None,
        metrics: Metrics | None = None,
        tracer: StepTracer | None = None,
    ) -> None:
        for name, value in (
            ("max_attempts", max_attempts),
            ("resend_after_ms", resend_after_ms),
            ("backoff_ms", backoff_ms),
            ("max_backoff_ms", max_backoff_ms),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, not {value!r}")
        self._store = store
        self._jobs = jobs
        self._commands = commands
        self._unit_of_work = unit_of_work
        self._scope = scope if scope is not None else ContextVarExecutionScope()
        self._max_attempts = max_attempts
        self._resend_after_ms = resend_after_ms
        self._backoff_ms = backoff_ms
        self._max_backoff_ms = max_backoff_ms
        self._random = random
        self._sleep = sleep
        self._logger = logger or logging.getLogger(DEFAULT_LOGGER)
        self._metrics = metrics or NoMetrics()
        self._tracer = tracer or NoStepTracer()

    def handle(
        self, process: type[Any] | str, instance_id: str, step: StepRef, message: Any
    ) -> ProcessInstance[Any]:
        declaration = _declaration(process)
        found = self._run(declaration, instance_id, _step(declaration, step), message, None)
        assert found is not None  # only a timeout that is not armed returns None
        return found

    def timeout(
        self,
        process: type[Any] | str,
        fired: Mapping[str, str],
        step: StepRef | None = None,
    ) -> ProcessInstance[Any] | None:
        declaration = _declaration(process)
        try:
            instance_id, name, job_id = fired["id"], fired["timeout"], fired["job_id"]
        except (KeyError, TypeError):
            raise ValueError(
                'a fired timeout is {"id": ..., "timeout": ..., "job_id": ...}'
            ) from None
        if step is None:
            declared = declaration.timeouts.get(name)
            if declared is None:
                raise UnknownProcessError(
                    f"no step runs on timeout {name!r}", process=declaration.name
                )
        else:
            declared = _step(declaration, step)
        return self._run(declaration, instance_id, declared, TimeoutFired(name, job_id), name)

    def find(self, process: type[Any] | str, instance_id: str) -> ProcessInstance[Any] | None:
        declaration = _declaration(process)
        stored = self._store.load(declaration.name, instance_id, tenant_id=self._tenant())
        return None if stored is None else _instance(declaration, stored)

    def _tenant(self) -> str | None:
        context = self._scope.current()
        return None if context is None else context.tenant_id

    # -- a step -------------------------------------------------------------------------

    def _run(
        self,
        declaration: ProcessDeclaration,
        instance_id: str,
        step: StepDeclaration,
        message: Any,
        timeout: str | None,
    ) -> ProcessInstance[Any] | None:
        context = self._scope.current()
        tenant_id = None if context is None else context.tenant_id
        traced = ProcessStep(
            declaration.name,
            step.name,
            instance_id,
            tenant_id,
            timeout,
            None if context is None else context.traceparent,
        )
        with self._tracer.trace(traced) as span:
            return self._attempts(
                declaration, instance_id, step, message, timeout, tenant_id=tenant_id, span=span
            )

    def _attempts(
        self,
        declaration: ProcessDeclaration,
        instance_id: str,
        step: StepDeclaration,
        message: Any,
        timeout: str | None,
        *,
        tenant_id: str | None,
        span: StepTrace,
    ) -> ProcessInstance[Any] | None:
        joined = self._unit_of_work.in_progress()
        attempts = 1 if joined else self._max_attempts
        for attempt in range(1, attempts + 1):
            try:
                found = self._attempt(
                    declaration,
                    instance_id,
                    step,
                    message,
                    timeout,
                    tenant_id=tenant_id,
                    first=attempt == 1,
                )
            except StaleProcessVersionError as error:
                if attempt == attempts:
                    conflict = ProcessConflictError(
                        f"step {step.name!r} of instance {instance_id!r} lost the race for it "
                        f"{attempts} time(s)"
                        + (" inside the caller's unit of work, which decides" if joined else ""),
                        process=declaration.name,
                    )
                    self._count(declaration, step, StepOutcome.CONFLICT, conflict)
                    span.conclude(StepOutcome.CONFLICT, attempts=attempt, error=conflict)
                    raise conflict from error
                self._count(declaration, step, StepOutcome.RETRIED, error)
                pause_ms = self._random() * min(
                    self._max_backoff_ms, self._backoff_ms * 2 ** (attempt - 1)
                )
                self._logger.info(
                    STEP_RETRIED,
                    extra={
                        "process_manager": declaration.name,
                        "instance_id": instance_id,
                        "tenant_id": tenant_id,
                        "step": step.name,
                        "attempt": attempt,
                        "pause_ms": round(pause_ms, 3),
                    },
                )
                self._sleep(pause_ms / 1_000)
                continue
            except Exception as error:
                self._count(declaration, step, StepOutcome.FAILED, error)
                span.conclude(StepOutcome.FAILED, attempts=attempt, error=error)
                raise
            if found is None:
                self._count(declaration, step, StepOutcome.IGNORED)
                span.conclude(StepOutcome.IGNORED, attempts=attempt)
            else:
                span.conclude(StepOutcome.SUCCEEDED, attempts=attempt, version=found.version)
            return found
        raise AssertionError("unreachable")  # pragma: no cover

    def _count(
        self,
        declaration: ProcessDeclaration,
        step: StepDeclaration,
        outcome: StepOutcome,
        error: BaseException | None = None,
    ) -> None:
        code = getattr(error, "code", None)
        labels = {
            "process": declaration.name,
            "step": step.name,
            "outcome": outcome.value,
            "error_code": code if isinstance(code, str) else "",
        }
        try:
            self._metrics.increment(PROCESS_STEPS_COUNTER, labels)
        except Exception as failed:  # a Metrics must not raise: if it does, the step goes on
            self._logger.warning(
                STEP_NOT_COUNTED,
                extra={
                    "process_manager": declaration.name,
                    "step": step.name,
                    "outcome": outcome.value,
                    "error_type": type(failed).__name__,
                },
            )

    def _attempt(
        self,
        declaration: ProcessDeclaration,
        instance_id: str,
        step: StepDeclaration,
        message: Any,
        timeout: str | None,
        *,
        tenant_id: str | None,
        first: bool,
    ) -> ProcessInstance[Any] | None:
        name = declaration.name
        with self._unit_of_work.begin():
            stored = self._store.load(name, instance_id, tenant_id=tenant_id, for_update=not first)
            if stored is None and not (step.starts and timeout is None):
                if timeout is not None:
                    self._ignored(
                        declaration, instance_id, tenant_id, message, "the instance does not exist"
                    )
                    return None
                raise ProcessNotStartedError(
                    f"step {step.name!r} does not start the process, and instance "
                    f"{instance_id!r} does not exist",
                    process=name,
                )
            version = 0 if stored is None else stored.version
            timeouts = {} if stored is None else dict(stored.timeouts)
            if timeout is not None:
                if timeouts.get(timeout) != message.job_id:
                    self._ignored(
                        declaration, instance_id, tenant_id, message, "another job is armed"
                    )
                    return None
                del timeouts[timeout]  # it fired: its job is the one running now
            state = None if stored is None else _state_of(declaration, stored)
            process = declaration.process_class()
            decision = getattr(process, step.name)(state, message)
            if not isinstance(decision, ProcessDecision):
                raise InvalidDecisionError(
                    f"step {step.name!r} returned a {type(decision).__name__}, not a "
                    "ProcessDecision",
                    process=name,
                )
            new_state = _stored_state(declaration, decision.state)
            disarmed = [t for t in decision.disarm if t in timeouts]
            cancelled = [timeouts.pop(t) for t in disarmed]
            for armed, when in decision.arm.items():
                previous = timeouts.pop(armed, None)
                if previous is not None:
                    cancelled.append(previous)
                timeouts[armed] = self._arm(declaration, instance_id, armed, when)
            sent = list(decision.send)
            outbox = self._outbox(declaration, instance_id, version + 1, sent)
            saved = StoredProcess(name, instance_id, version + 1, new_state, timeouts, tenant_id)
            self._store.save(saved, expected_version=version)
            ran = {
                "process_manager": name,
                "instance_id": instance_id,
                "tenant_id": tenant_id,
                "step": step.name,
                "version": version + 1,
                "commands": [type(command).__name__ for command in sent],
                "armed": sorted(decision.arm),
                "disarmed": disarmed,
                "fired": timeout,
            }
            self._unit_of_work.after_commit(lambda: self._logger.info(STEP_RAN, extra=ran))
            self._unit_of_work.after_commit(
                lambda: self._count(declaration, step, StepOutcome.SUCCEEDED)
            )
            self._unit_of_work.after_commit(
                lambda: self._after_commit(saved, sent, outbox, cancelled)
            )
        return ProcessInstance(
            name, instance_id, version + 1, _state_of(declaration, saved), dict(timeouts)
        )

    def _arm(
        self, declaration: ProcessDeclaration, instance_id: str, timeout: str, when: int | datetime
    ) -> str:
        if declaration.timeout_job is None:
            raise NoTimeoutJobError(
                f"it arms timeout {timeout!r}, and it was declared without a timeout_job",
                process=declaration.name,
            )
        if timeout not in declaration.timeouts:
            raise InvalidDecisionError(
                f"it arms timeout {timeout!r}, on which no step runs "
                f"(declared: {', '.join(sorted(declaration.timeouts)) or 'none'})",
                process=declaration.name,
            )
        payload = {"process": declaration.name, "id": instance_id, "timeout": timeout}
        job = declaration.timeout_job.name
        if isinstance(when, datetime):
            return self._jobs.enqueue(job, payload, run_at=when)
        return self._jobs.enqueue(job, payload, delay_ms=when)

    def _outbox(
        self, declaration: ProcessDeclaration, instance_id: str, version: int, sent: list[object]
    ) -> str | None:
        if not sent:
            return None
        payload = {
            "process": declaration.name,
            "id": instance_id,
            "version": version,
            "commands": [encode_command(declaration, command) for command in sent],
        }
        return self._jobs.enqueue(ProcessCommandsJob, payload, delay_ms=self._resend_after_ms)

    def _after_commit(
        self, saved: StoredProcess, sent: list[object], outbox: str | None, cancelled: list[str]
    ) -> None:
        """Send the commands, then cancel what no longer needs to run; never raise: the step
        committed, and what is left undone here its jobs do (or find nothing to do)."""
        for command in sent:
            try:
                self._commands.execute(command)
            except Exception as error:
                self._logger.warning(
                    COMMAND_NOT_SENT,
                    extra={
                        "process_manager": saved.process,
                        "instance_id": saved.id,
                        "version": saved.version,
                        "command": type(command).__name__,
                        "error_type": type(error).__name__,
                        "error_code": getattr(error, "code", None),
                    },
                )
                outbox = None  # it sends them all again, later
                break
        for job_id in [*cancelled, *([outbox] if outbox is not None else [])]:
            try:
                self._jobs.cancel(job_id)
            except Exception as error:
                self._logger.warning(
                    JOB_NOT_CANCELLED,
                    extra={
                        "process_manager": saved.process,
                        "instance_id": saved.id,
                        "job_id": job_id,
                        "error_type": type(error).__name__,
                    },
                )

    def _ignored(
        self,
        declaration: ProcessDeclaration,
        instance_id: str,
        tenant_id: str | None,
        fired: TimeoutFired,
        why: str,
    ) -> None:
        self._logger.info(
            TIMEOUT_IGNORED,
            extra={
                "process_manager": declaration.name,
                "instance_id": instance_id,
                "tenant_id": tenant_id,
                "timeout": fired.timeout,
                "job_id": fired.job_id,
                "reason": why,
            },
        )


def _declaration(process: type[Any] | str) -> ProcessDeclaration:
    try:
        return process_declaration_of(process)
    except LookupError as error:
        raise UnknownProcessError(str(error)) from None


def _step(declaration: ProcessDeclaration, step: StepRef) -> StepDeclaration:
    name = step_name(step)
    found = declaration.steps.get(name)
    if found is None:
        raise UnknownProcessError(
            f"it has no step {name!r} (steps: {', '.join(sorted(declaration.steps))})",
            process=declaration.name,
        )
    return found


def _state_of(declaration: ProcessDeclaration, stored: StoredProcess) -> Any:
    """The state a step gets: the stored JSON, or its model validated from it;
    ``CorruptProcessStateError`` when the model no longer takes it (naming the field, never the
    value, with nothing chained: pydantic's error quotes the input)."""
    model = declaration.state_type
    if model is None:
        return stored.state
    try:
        return model.model_validate(stored.state)
    except ValidationError as error:
        field, kind = _refusal(error, model)
    raise CorruptProcessStateError(
        f"the stored state of instance {stored.id!r} no longer fits {model.__name__} "
        f"({kind}{'' if field is None else f' at field {field!r}'})",
        process=declaration.name,
        instance_id=stored.id,
        tenant_id=stored.tenant_id,
    )


def _refusal(error: ValidationError, model: type[BaseModel]) -> tuple[str | None, str]:
    """The model's own field pydantic refused first (None when it is not one), and the error's
    type: a deeper part of the path may be a dict key, which is data."""
    first = error.errors(include_url=False, include_input=False)[0]
    loc = first["loc"]
    return (str(loc[0]) if loc and loc[0] in model.model_fields else None), first["type"]


def _stored_state(declaration: ProcessDeclaration, state: Any) -> Any:
    """The JSON to save for ``state``, validated by the process's state type."""
    model = declaration.state_type
    if model is not None:
        try:
            valid = model.model_validate(
                state.model_dump() if isinstance(state, BaseModel) else state
            )
        except ValidationError as error:
            field, kind = _refusal(error, model)
        else:
            return valid.model_dump(mode="json")
        part = "its state" if field is None else f"its state's field {field!r}"
        raise InvalidDecisionError(  # outside the except: nothing chained quotes the state
            f"{part} is refused by {model.__name__} ({kind})", process=declaration.name
        )
    try:
        dump_json(StoredProcess(declaration.name, "", 1, state))
    except ValueError:
        raise InvalidDecisionError(
            "its state cannot be stored as JSON: give the process a pydantic state type, or "
            "a state of JSON values",
            process=declaration.name,
        ) from None
    return state


def _instance(declaration: ProcessDeclaration, stored: StoredProcess) -> ProcessInstance[Any]:
    return ProcessInstance(
        stored.process,
        stored.id,
        stored.version,
        _state_of(declaration, stored),
        dict(stored.timeouts),
    )
