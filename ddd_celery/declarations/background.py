"""``@background``: a job a use case enqueues and a worker runs later, maybe more than once.

Like ``@scheduled``, everything is checked when the declaring module is imported: the name, the
options (attempts, backoff, timeout, queue) and ``run(self, payload, execution)``, whose
``payload`` annotation is the payload type: a pydantic model is validated on enqueue and on
each attempt; anything else (or nothing) means plain JSON. Declarations live in one registry per
process, so a name stays unique and ``collect_background_jobs`` finds a context's jobs.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import ModuleType
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from ddd_celery.declarations.errors import DeclarationError
from ddd_celery.declarations.names import check_job_name, reserve_job_name
from ddd_celery.declarations.schedule import MAX_TIMEOUT_MS
from ddd_celery.declarations.scheduled import _walk, _where
from ddd_celery.kernel.abort import AbortSignal
from ddd_celery.kernel.instants import require_aware

DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_BACKOFF_MS = 1_000
DEFAULT_MAX_BACKOFF_MS = 3_600_000
MAX_ATTEMPTS = 1_000
"""More attempts than that is a loop, not a retry."""
MAX_BACKOFF_MS = 366 * 86_400_000
"""366 days: the longest wait between two attempts, so a retry instant is always a date."""


class AttemptReports(Protocol):
    """Where an attempt's progress and checkpoint go: the store, under the attempt's lease."""

    def report_progress(self, value: Any) -> None: ...

    def save_checkpoint(self, value: Any) -> None: ...


@dataclass(frozen=True, slots=True)
class BackgroundJobExecution:
    """What an attempt is told about itself, handed to ``run(payload, execution)``.

    ``scheduled_at`` is the instant the attempt was due (its ``run_at``), not the clock: use it
    where "now" matters to the work. A long job checks ``signal`` between two steps: it is
    aborted on cancel, on timeout and when the worker stops. ``checkpoint`` is what the previous
    attempt saved (None on the first), so a retry resumes rather than restarts.
    ``report_progress`` and ``save_checkpoint`` write through the store (JSON values); once the
    attempt has lost its lease they abort ``signal`` with ``JobInterruptedError``.
    """

    job_id: str
    attempt: int
    signal: AbortSignal
    scheduled_at: datetime
    enqueued_at: datetime
    started_at: datetime
    tenant_id: str | None = None
    checkpoint: Any = None
    reports: AttemptReports | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        require_aware(self.scheduled_at, "scheduled_at")
        require_aware(self.enqueued_at, "enqueued_at")
        require_aware(self.started_at, "started_at")
        if self.attempt < 1:
            raise ValueError(f"attempt counts from 1, got {self.attempt}")

    def report_progress(self, value: Any) -> None:
        """Save how far the attempt is (a JSON value), for ``find`` to show."""
        if self.reports is not None:
            self.reports.report_progress(value)

    def save_checkpoint(self, value: Any) -> None:
        """Save where the next attempt should resume (a JSON value), if this one fails."""
        if self.reports is not None:
            self.reports.save_checkpoint(value)


class BackgroundJob(Protocol):
    """A class of the application layer that does work a use case handed over.

    ``run`` may be a plain or an ``async def``; it must be safe to run twice (at least once).
    """

    def run(self, payload: Any, execution: BackgroundJobExecution) -> Awaitable[None] | None: ...


@dataclass(frozen=True, slots=True)
class BackgroundOptions:
    """How a background job is retried and bounded, checked by ``background_options``."""

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    """Attempts before the job is dead (>= 1)."""
    backoff_ms: int = DEFAULT_BACKOFF_MS
    """The wait after the first failure, doubled after each next one (> 0)."""
    max_backoff_ms: int = DEFAULT_MAX_BACKOFF_MS
    """The longest wait between two attempts (>= ``backoff_ms``)."""
    timeout_ms: int | None = None
    """An attempt running longer is aborted and fails with ``JOB_TIMEOUT`` (> 0, or None)."""
    queue: str | None = None
    """The queue its attempts are counted and routed in; the job's context when None."""


_J = TypeVar("_J", bound=type[BackgroundJob])


@dataclass(frozen=True, slots=True)
class BackgroundJobDeclaration:
    """A declared background job: name, context, queue, options, class and payload type."""

    name: str
    context: str
    options: BackgroundOptions
    job_class: type[BackgroundJob]
    payload_type: type[BaseModel] | None
    """The pydantic model ``run``'s payload is annotated with; None for plain JSON."""

    @property
    def queue(self) -> str:
        return self.options.queue or self.context


_REGISTRY: dict[str, BackgroundJobDeclaration] = {}


def background(
    name: str,
    *,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    backoff_ms: int = DEFAULT_BACKOFF_MS,
    max_backoff_ms: int = DEFAULT_MAX_BACKOFF_MS,
    timeout_ms: int | None = None,
    queue: str | None = None,
) -> Callable[[_J], _J]:
    """Declare the decorated class a background job named ``name``; the class is returned as is.

    Raises ``DeclarationError`` naming the job for a bad name, an option out of its values, a
    class without ``run(self, payload, execution)``, or a payload annotation that cannot be
    resolved when the module is imported.
    """
    check_name(name)
    options = background_options(
        {
            "max_attempts": max_attempts,
            "backoff_ms": backoff_ms,
            "max_backoff_ms": max_backoff_ms,
            "timeout_ms": timeout_ms,
            "queue": queue,
        },
        job=name,
    )

    def declare(job_class: _J) -> _J:
        payload_type = _check_run(job_class, name)
        declaration = BackgroundJobDeclaration(
            name, name.partition(".")[0], options, job_class, payload_type
        )
        _register(declaration)
        setattr(job_class, "__background_job__", declaration)  # noqa: B010 - not in the type
        return job_class

    return declare


def check_name(name: object) -> str:
    """Refuse a name that is not ``<context>.<job-name>`` in lower case, as ``@scheduled`` does."""
    return check_job_name(name)


def background_options(
    options: Mapping[str, Any] | BackgroundOptions | None, *, job: str
) -> BackgroundOptions:
    """Check the options of a background job; ``DeclarationError`` naming ``job`` otherwise."""
    if isinstance(options, BackgroundOptions):
        options = {key: getattr(options, key) for key in _OPTION_KEYS}
    given = dict(options or {})
    unknown = sorted(str(key) for key in given if key not in _OPTION_KEYS)
    if unknown:
        raise DeclarationError(
            f"unknown option {', '.join(map(repr, unknown))}; the options are "
            f"{', '.join(_OPTION_KEYS)}",
            job=job,
        )
    max_attempts = _whole(
        given.get("max_attempts", DEFAULT_MAX_ATTEMPTS), "max_attempts", MAX_ATTEMPTS, job
    )
    backoff_ms = _whole(
        given.get("backoff_ms", DEFAULT_BACKOFF_MS), "backoff_ms", MAX_BACKOFF_MS, job
    )
    max_backoff_ms = _whole(
        given.get("max_backoff_ms", DEFAULT_MAX_BACKOFF_MS), "max_backoff_ms", MAX_BACKOFF_MS, job
    )
    if max_backoff_ms < backoff_ms:
        raise DeclarationError(
            f"'max_backoff_ms' ({max_backoff_ms}) must be at least 'backoff_ms' ({backoff_ms})",
            job=job,
        )
    timeout_ms = given.get("timeout_ms")
    if timeout_ms is not None:
        timeout_ms = _whole(timeout_ms, "timeout_ms", MAX_TIMEOUT_MS, job)
    queue = given.get("queue")
    if queue is not None and (not isinstance(queue, str) or not _QUEUE.fullmatch(queue)):
        raise DeclarationError(
            f"'queue' must be a lower-case name such as 'billing' or 'billing-slow', got {queue!r}",
            job=job,
        )
    return BackgroundOptions(max_attempts, backoff_ms, max_backoff_ms, timeout_ms, queue)


def background_declaration_of(job_class: type[object]) -> BackgroundJobDeclaration:
    """The declaration ``@background`` attached to ``job_class``; ``DeclarationError`` if none."""
    declaration = job_class.__dict__.get("__background_job__")
    if not isinstance(declaration, BackgroundJobDeclaration):
        raise DeclarationError(f"{_where(job_class)} is not declared with @background")
    return declaration


def background_declaration_named(name: str) -> BackgroundJobDeclaration | None:
    """The job declared under ``name`` in this process, or None."""
    return _REGISTRY.get(name)


def collect_background_jobs(*modules: ModuleType | str) -> list[BackgroundJobDeclaration]:
    """Import ``modules`` (packages recursively) and return the background jobs declared there.

    Sorted by name. What an import raises (a ``DeclarationError``, an ``ImportError``) propagates.
    """
    names: set[str] = set()
    for module in modules:
        root = importlib.import_module(module) if isinstance(module, str) else module
        names.update(imported.__name__ for imported in _walk(root))
    found = [d for d in _REGISTRY.values() if d.job_class.__module__ in names]
    return sorted(found, key=lambda declaration: declaration.name)


def payload_type_of(run: Callable[..., Any], *, job: str) -> type[BaseModel] | None:
    """The pydantic model ``run``'s first parameter (the payload) is annotated with, or None."""
    try:
        parameters = list(inspect.signature(run).parameters.values())
    except (TypeError, ValueError):  # no signature to read (a builtin): plain JSON
        return None
    if parameters and parameters[0].name in ("self", "cls"):
        parameters = parameters[1:]
    if not parameters or parameters[0].annotation is inspect.Parameter.empty:
        return None
    annotation = parameters[0].annotation
    if isinstance(annotation, str):
        namespace = getattr(inspect.unwrap(run), "__globals__", {})
        try:
            annotation = eval(annotation, namespace)
        except Exception:
            raise DeclarationError(
                f"the payload annotation {annotation!r} of run cannot be resolved in its "
                "module: import the payload type at the module's top level",
                job=job,
            ) from None
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _check_run(job_class: object, name: str) -> type[BaseModel] | None:
    if not inspect.isclass(job_class):
        raise DeclarationError(
            f"@background decorates a class, not {type(job_class).__name__}", job=name
        )
    run = getattr(job_class, "run", None)
    if not callable(run):
        raise DeclarationError(
            f"{_where(job_class)} has no method run(self, payload, execution)", job=name
        )
    bound = isinstance(inspect.getattr_static(job_class, "run"), (staticmethod, classmethod))
    try:
        inspect.signature(run).bind(*([None] * (2 if bound else 3)))
    except TypeError:
        raise DeclarationError(
            f"{_where(job_class)}.run must take the payload and the execution: "
            "run(self, payload, execution)",
            job=name,
        ) from None
    except ValueError:  # no signature to read (a builtin): trust it
        return None
    return payload_type_of(run, job=name)


def _register(declaration: BackgroundJobDeclaration) -> None:
    reserve_job_name(declaration.name, "background job", declaration.job_class)
    _REGISTRY[declaration.name] = declaration


def _whole(value: object, key: str, high: int, job: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise DeclarationError(f"{key!r} must be an int, got {value!r}", job=job)
    if value < 1:
        raise DeclarationError(f"{key!r} must be positive, got {value}", job=job)
    if value > high:
        raise DeclarationError(f"{key!r} must be at most {high}, got {value}", job=job)
    return value


_OPTION_KEYS = ("max_attempts", "backoff_ms", "max_backoff_ms", "timeout_ms", "queue")
_QUEUE = re.compile(r"[a-z][a-z0-9_.-]*")
