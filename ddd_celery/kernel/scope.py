"""The execution scope: who runs this unit of work, for whom, why, and until when.

It lives on ``contextvars``, so it follows asyncio tasks and is copied into worker threads by
``asyncio.to_thread``; logs, audit columns and published messages read it from there.
"""

from __future__ import annotations

import contextvars
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from ddd_celery.kernel.actor import Actor

_current: contextvars.ContextVar[ExecutionContext | None] = contextvars.ContextVar(
    "ddd_celery_execution", default=None
)


@dataclass(frozen=True, slots=True)
class ExecutionContext:
    """What is known of the work in progress."""

    origin: str
    actor: Actor
    correlation_id: str
    scheduled_at: datetime | None = None
    deadline: datetime | None = None
    tenant_id: str | None = None
    traceparent: str | None = None


class ExecutionScope(ABC):
    """Opens a context around a unit of work and tells the current one."""

    @abstractmethod
    @contextmanager
    def open(self, context: ExecutionContext) -> Iterator[ExecutionContext]:
        """Make ``context`` current until the block ends, then restore the previous one."""

    @abstractmethod
    def current(self) -> ExecutionContext | None:
        """The context of the work in progress, or None outside any."""


class ContextVarExecutionScope(ExecutionScope):
    """The scope of production: one ``ContextVar`` shared by every instance."""

    @contextmanager
    def open(self, context: ExecutionContext) -> Iterator[ExecutionContext]:
        token = _current.set(context)
        try:
            yield context
        finally:
            _current.reset(token)

    def current(self) -> ExecutionContext | None:
        return _current.get()


class FixedExecutionScope(ContextVarExecutionScope):
    """The scope of specs: works as in production and keeps every context it opened."""

    def __init__(self) -> None:
        self.opened: list[ExecutionContext] = []

    @contextmanager
    def open(self, context: ExecutionContext) -> Iterator[ExecutionContext]:
        self.opened.append(context)
        with super().open(context) as opened:
            yield opened
