"""How each step of a process manager is observed: its counter, and the port of its span.

``StoredProcessRunner`` counts every step in ``process_steps_total`` (labels ``process``,
``step``, ``outcome``, ``error_code``) and opens a span per step through a ``StepTracer``; the
OpenTelemetry one lives with the Celery wiring (``ddd_celery.celery.processes``), so this core
imports no tracing library.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from enum import StrEnum

PROCESS_STEPS_COUNTER = "process_steps_total"


class StepOutcome(StrEnum):
    """How a step ended, as counted and set on its span."""

    SUCCEEDED = "succeeded"
    """Its unit of work committed (inside a caller's, at the caller's commit)."""
    RETRIED = "retried"
    """An attempt lost the race for its instance: the step runs again (one count per loss)."""
    CONFLICT = "conflict"
    """It lost the race ``max_attempts`` times (``ProcessConflictError``)."""
    IGNORED = "ignored"
    """A timeout that is no longer the armed one, or of an instance that does not exist."""
    FAILED = "failed"
    """It raised anything else: a refused decision, an instance not started, a store down."""


@dataclass(frozen=True, slots=True)
class ProcessStep:
    """Which step runs, as its span names it.

    ``traceparent`` is that of the execution scope in progress (the W3C context the worker
    restored from the job that fired a timeout, or the request's): a span with no current
    parent nests under it.
    """

    process: str
    step: str
    instance_id: str
    tenant_id: str | None
    timeout: str | None
    """The timeout it runs on, or None for a message."""
    traceparent: str | None


class StepTrace(ABC):
    """The span of one step, open: the runner concludes it once, before it is closed."""

    @abstractmethod
    def conclude(
        self,
        outcome: StepOutcome,
        *,
        attempts: int,
        version: int | None = None,
        error: BaseException | None = None,
    ) -> None:
        """Record how the step ended: ``version`` as saved, ``error`` when it raised (its type
        and code only: its message quotes data). Never raises."""


class StepTracer(ABC):
    """Opens a span per step, current while the step runs (its commands are sent inside it)."""

    @abstractmethod
    def trace(self, step: ProcessStep) -> AbstractContextManager[StepTrace]:
        """The span of ``step``, nested under the current one; never raises into the step."""


class _Untraced(StepTrace):
    def conclude(
        self,
        outcome: StepOutcome,
        *,
        attempts: int,
        version: int | None = None,
        error: BaseException | None = None,
    ) -> None:
        return None


_UNTRACED = _Untraced()


class NoStepTracer(StepTracer):
    """Traces nothing: the runner's default."""

    @contextmanager
    def _nothing(self) -> Iterator[StepTrace]:
        yield _UNTRACED

    def trace(self, step: ProcessStep) -> AbstractContextManager[StepTrace]:
        return self._nothing()
