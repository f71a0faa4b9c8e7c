"""What the Celery tests share beside fixtures: the Redis URL, waiting on workers.

A module of its own (not ``conftest``), so test modules can import it by a unique name.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from celery import Celery
from celery.signals import task_postrun

from ddd_celery.scheduling.observability import RunDetail
from ddd_celery.scheduling.outcomes import JobRun

WAIT_S = 10.0
"""The longest a test waits for a worker to handle a message before it fails."""

AppFactory = Callable[..., Celery]
"""``make_app(**settings)``: a Celery app on the real Redis, under the test's key prefix."""


@dataclass
class Runs:
    """An ``on_run`` observer that keeps every record and lets a test wait for them."""

    records: list[JobRun] = field(default_factory=list)
    errors: list[BaseException | None] = field(default_factory=list)
    _changed: threading.Condition = field(default_factory=threading.Condition)

    def __call__(self, run: JobRun, error: BaseException | None, detail: RunDetail) -> None:
        with self._changed:
            self.records.append(run)
            self.errors.append(error)
            self._changed.notify_all()

    def wait_for(self, count: int, timeout: float = WAIT_S) -> list[JobRun]:
        """Block until ``count`` records arrived; fail the test if they do not in time."""
        with self._changed:
            arrived = self._changed.wait_for(lambda: len(self.records) >= count, timeout)
            assert arrived, f"waited {timeout}s for {count} runs, got {self.records}"
            return list(self.records)


class TaskEnds:
    """Counts the tasks of one app that returned on a worker (Celery's ``task_postrun``)."""

    def __init__(self, app: Celery) -> None:
        self._app = app
        self._ended: list[str] = []
        self._changed = threading.Condition()
        task_postrun.connect(self._on_postrun, weak=False)

    def close(self) -> None:
        task_postrun.disconnect(self._on_postrun)

    def wait_for(self, count: int, timeout: float = WAIT_S) -> list[str]:
        """Block until ``count`` tasks returned; fail the test if they do not in time."""
        with self._changed:
            ended = self._changed.wait_for(lambda: len(self._ended) >= count, timeout)
            assert ended, f"waited {timeout}s for {count} tasks to end, got {self._ended}"
            return list(self._ended)

    def _on_postrun(self, sender: Any = None, task_id: str = "", **kwargs: Any) -> None:
        if getattr(sender, "app", None) is self._app:
            with self._changed:
                self._ended.append(task_id)
                self._changed.notify_all()
