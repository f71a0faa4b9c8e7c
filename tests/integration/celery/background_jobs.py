"""Background jobs the Celery tests wire, and the probe they report to.

A module of its own, imported by a unique name (no ``__init__.py`` in ``tests/integration/celery``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from ddd_celery.background import BackgroundJobRun, BackgroundRunDetail
from ddd_celery.declarations.background import BackgroundJobExecution, background

ECHO = "celerybg.echo"
FLAKY = "celerybg.flaky"
SLOW = "celerybg.slow"
STUCK = "celerybg.stuck"
LONG = "celerybg.long"


class EchoPayload(BaseModel):
    text: str


class Seen:
    """What the jobs saw, shared with the test; ``wait`` blocks until a job noted something."""

    def __init__(self) -> None:
        self.notes: list[tuple[str, Any]] = []
        self.started = threading.Event()
        self._changed = threading.Condition()

    def note(self, what: str, value: Any) -> None:
        with self._changed:
            self.notes.append((what, value))
            self._changed.notify_all()

    def of(self, what: str) -> list[Any]:
        with self._changed:
            return [value for kind, value in self.notes if kind == what]


@dataclass
class Attempts:
    """An ``on_run`` observer keeping every attempt; ``wait_for`` blocks until enough came."""

    runs: list[BackgroundJobRun] = field(default_factory=list)
    errors: list[BaseException | None] = field(default_factory=list)
    _changed: threading.Condition = field(default_factory=threading.Condition)

    def __call__(
        self, run: BackgroundJobRun, error: BaseException | None, detail: BackgroundRunDetail
    ) -> None:
        with self._changed:
            self.runs.append(run)
            self.errors.append(error)
            self._changed.notify_all()

    def wait_for(self, count: int, timeout: float = 10.0) -> list[BackgroundJobRun]:
        with self._changed:
            arrived = self._changed.wait_for(lambda: len(self.runs) >= count, timeout)
            assert arrived, f"waited {timeout}s for {count} attempts, got {self.runs}"
            return list(self.runs)


@background(ECHO)
class EchoJob:
    def __init__(self, seen: Seen) -> None:
        self._seen = seen

    def run(self, payload: EchoPayload, execution: BackgroundJobExecution) -> None:
        self._seen.note("echo", (payload.text, execution.job_id, execution.attempt))


@background(FLAKY, max_attempts=2, backoff_ms=1, max_backoff_ms=1)
class FlakyJob:
    """Fails every attempt."""

    def __init__(self, seen: Seen) -> None:
        self._seen = seen

    def run(self, payload: Any, execution: BackgroundJobExecution) -> None:
        self._seen.note("flaky", execution.attempt)
        raise RuntimeError("the attempt failed on purpose, with data: secret")


@background(SLOW)
class SlowJob:
    """Waits on its signal until aborted (a cancel), at most 10 s."""

    def __init__(self, seen: Seen) -> None:
        self._seen = seen

    def run(self, payload: Any, execution: BackgroundJobExecution) -> None:
        self._seen.started.set()
        aborted = execution.signal.wait(10)
        self._seen.note("slow", type(execution.signal.reason).__name__ if aborted else None)


@background(STUCK, timeout_ms=300, max_attempts=1)
class StuckJob:
    """Outlives its timeout, watching its signal."""

    def __init__(self, seen: Seen) -> None:
        self._seen = seen

    def run(self, payload: Any, execution: BackgroundJobExecution) -> None:
        aborted = execution.signal.wait(10)
        self._seen.note("stuck", type(execution.signal.reason).__name__ if aborted else None)


@background(LONG, max_attempts=1)
class LongJob:
    """Runs 1.5 s, longer than the lease of the worker specs, unless aborted."""

    def __init__(self, seen: Seen) -> None:
        self._seen = seen

    def run(self, payload: Any, execution: BackgroundJobExecution) -> None:
        self._seen.started.set()
        aborted = execution.signal.wait(1.5)
        self._seen.note("long", type(execution.signal.reason).__name__ if aborted else None)
