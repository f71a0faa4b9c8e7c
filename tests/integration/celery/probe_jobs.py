"""Jobs the worker-side tests run: each reports to a ``Probe``, the port the test provides.

A test tunes them through settings (``timeout_ms``, ``tenancy``) and gives the probe a
``behaviour`` (fail, block, ignore the signal), as a deployment configures its jobs.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from ddd_celery.declarations import JobExecution, scheduled
from ddd_celery.kernel import ContextVarExecutionScope, ExecutionContext

SYNC = "probe.sync"
ASYNC = "probe.async"


@dataclass
class Seen:
    execution: JobExecution
    context: ExecutionContext | None
    thread: str


@dataclass
class Probe:
    """Shared by the test and the jobs it builds: what ran, and what a run should do."""

    behaviour: Callable[[JobExecution], None] | None = None
    seen: list[Seen] = field(default_factory=list)
    ended: threading.Event = field(default_factory=threading.Event)
    """Set when a run returns or raises, so a test knows the job itself is over."""

    def run(self, execution: JobExecution) -> None:
        self.seen.append(
            Seen(execution, ContextVarExecutionScope().current(), threading.current_thread().name)
        )
        try:
            if self.behaviour is not None:
                self.behaviour(execution)
        finally:
            self.ended.set()


@scheduled(SYNC, every="1h")
class SyncProbeJob:
    def __init__(self, probe: Probe) -> None:
        self.probe = probe

    def run(self, execution: JobExecution) -> None:
        self.probe.run(execution)


@scheduled(ASYNC, every="1h")
class AsyncProbeJob:
    def __init__(self, probe: Probe) -> None:
        self.probe = probe

    async def run(self, execution: JobExecution) -> None:
        await asyncio.sleep(0)
        self.probe.run(execution)
