"""Schedulers for specs about time: a fixed clock moved by the test, timers fired in order.

``ManualJobTimers`` is the ``JobTimers`` of a spec; ``ManualJobScheduler`` is the in-process
scheduler on it, keeping every run for assertions. Nothing here sleeps in real time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import weakref
from collections.abc import Awaitable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from ddd_celery.declarations.execution import JobExecution
from ddd_celery.kernel.clock import FixedClock
from ddd_celery.kernel.ids import IdGenerator
from ddd_celery.kernel.lock import Lock
from ddd_celery.kernel.metrics import Metrics
from ddd_celery.kernel.scope import ExecutionScope
from ddd_celery.kernel.tenants import TenantDirectory
from ddd_celery.scheduling.checkpoints import JobCheckpoints
from ddd_celery.scheduling.execution import JobCallable
from ddd_celery.scheduling.in_process import InProcessJobScheduler
from ddd_celery.scheduling.last_runs import JobLastRuns
from ddd_celery.scheduling.observability import OnRun, RunDetail
from ddd_celery.scheduling.occurrence import (
    DEFAULT_GRACE_MS,
    DEFAULT_LATE_AFTER_MS,
    DEFAULT_LOCK_TTL_MS,
)
from ddd_celery.scheduling.outcomes import JobRun
from ddd_celery.scheduling.run_state import JobRunState
from ddd_celery.scheduling.timers import JobTimers

_T = TypeVar("_T")

MAX_SETTLE_ROUNDS = 100_000
"""Loop passes a settle allows before it calls the loop busy for ever (a job spinning)."""

_SETTLING: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, int] = weakref.WeakKeyDictionary()
"""Settles in progress per loop: each keeps one callback ready, which is not work to wait for."""


class ManualJobTimers(JobTimers):
    """Timers on a ``FixedClock`` that fire only when the test moves time with ``advance``.

    A timer is due at the clock's instant when it was set plus its delay. Sync jobs run inline
    on the loop, so no thread escapes a settle: when ``advance`` returns, every task that waits
    only on these timers or on other tasks has gone as far as it can. A task blocked on
    something the test holds (an ``asyncio.Event``) stays blocked; one that sleeps in real time
    counts as blocked too.
    """

    def __init__(self, clock: FixedClock) -> None:
        self._clock = clock
        self._timers: list[tuple[datetime, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self._advancing = 0
        self._still = asyncio.Event()
        """Set while no ``advance`` is in progress."""
        self._still.set()

    async def sleep(self, ms: int) -> None:
        if ms < 0:
            raise ValueError(f"a timer waits a positive number of ms, not {ms}")
        fired = asyncio.get_running_loop().create_future()
        due = self._clock.now() + timedelta(milliseconds=ms)
        heapq.heappush(self._timers, (due, next(self._order), fired))
        await fired

    async def run_sync(self, run: JobCallable, execution: JobExecution) -> Any:
        return run(execution)

    @property
    def pending(self) -> list[datetime]:
        """The instants of the timers set and not yet fired nor cancelled, earliest first."""
        return sorted(due for due, _, fired in self._timers if not fired.done())

    async def advance(self, by: int | timedelta) -> None:
        """Move the clock by ``by`` (ms or a timedelta), firing each timer due on the way.

        Timers fire in the order of their instants (then of their setting), each with the clock
        at its instant, and everything they wake settles before the next one fires. ``advance(0)``
        fires what is due now: the clock may have been moved by another scheduler sharing it.
        """
        delta = by if isinstance(by, timedelta) else timedelta(milliseconds=by)
        if delta < timedelta(0):
            raise ValueError(f"time advances by a positive duration, not {delta}")
        target = self._clock.now() + delta
        self._advancing += 1
        self._still.clear()
        try:
            await self.settle()
            while self._fire_next(until=target) is not None:
                await self.settle()
            if target > self._clock.now():
                self._clock.set(target)
            await self.settle()
        finally:
            self._advancing -= 1
            if not self._advancing:
                self._still.set()

    async def run_until(self, awaitable: Awaitable[_T]) -> _T:
        """Await ``awaitable``, letting time pass when nothing else moves it.

        For what waits on these timers itself (``stop()`` waiting out its grace period). While
        the test advances the clock, it only watches; otherwise, each time everything has
        settled and ``awaitable`` still waits, it fires the next timer. Raises ``RuntimeError``
        when it still waits with no timer left to fire.
        """
        task = asyncio.ensure_future(awaitable)
        while True:
            await self.settle()
            if task.done():
                return task.result()
            if self._advancing:
                await self._still.wait()
            elif self._fire_next(until=None) is None:
                task.cancel()
                raise RuntimeError("it waits on something no timer will fire")

    async def settle(self) -> None:
        """Let every task that can make progress run until none can, without moving time."""
        loop = asyncio.get_running_loop()
        ready = getattr(loop, "_ready", None)
        if ready is None:
            raise RuntimeError(
                "ManualJobTimers settles on asyncio's own event loop, which exposes its ready "
                f"queue; {type(loop).__name__} does not"
            )
        _SETTLING[loop] = _SETTLING.get(loop, 0) + 1
        try:
            for _ in range(MAX_SETTLE_ROUNDS):
                await asyncio.sleep(0)
                # what is ready then is this loop's callbacks, or the other settles' next pass
                if len(ready) < _SETTLING[loop]:
                    return
        finally:
            _SETTLING[loop] -= 1
        raise RuntimeError(f"the loop is still busy after {MAX_SETTLE_ROUNDS} passes")

    def _fire_next(self, *, until: datetime | None) -> datetime | None:
        """Fire the earliest live timer due at or before ``until`` (any, when None)."""
        while self._timers:
            due, _, fired = self._timers[0]
            if until is not None and due > until:
                return None
            heapq.heappop(self._timers)
            if fired.done():
                continue
            if due > self._clock.now():
                self._clock.set(due)
            fired.set_result(None)
            return due
        return None


class ManualJobScheduler(InProcessJobScheduler):
    """The in-process scheduler on ``ManualJobTimers``: a spec moves time with ``advance``.

    It keeps every occurrence handled in ``runs`` and what the failed ones raised in
    ``failures``. There is no jitter. Two of them sharing a clock and a lock are two instances.
    """

    def __init__(
        self,
        *,
        clock: FixedClock,
        lock: Lock,
        scope: ExecutionScope,
        ids: IdGenerator,
        tenants: TenantDirectory | None = None,
        logger: logging.Logger | None = None,
        metrics: Metrics | None = None,
        checkpoints: JobCheckpoints | None = None,
        late_after_ms: int = DEFAULT_LATE_AFTER_MS,
        grace_ms: int = DEFAULT_GRACE_MS,
        lock_ttl_ms: int = DEFAULT_LOCK_TTL_MS,
        on_run: OnRun | None = None,
        run_state: JobRunState | None = None,
        last_runs: JobLastRuns | None = None,
    ) -> None:
        self.timers = ManualJobTimers(clock)
        self.runs: list[JobRun] = []
        """Every occurrence handled (and every ``run_now``), in the order recorded."""
        self.failures: list[BaseException] = []
        """What each failed run raised, in the order recorded."""
        self._observer = on_run
        super().__init__(
            clock=clock,
            lock=lock,
            scope=scope,
            ids=ids,
            logger=logger,
            metrics=metrics,
            timers=self.timers,
            checkpoints=checkpoints,
            late_after_ms=late_after_ms,
            grace_ms=grace_ms,
            lock_ttl_ms=lock_ttl_ms,
            random=_no_jitter,
            on_run=self._keep,
            tenants=tenants,
            run_state=run_state,
            last_runs=last_runs,
        )

    async def advance(self, by: int | timedelta) -> None:
        """Move the clock by ``by`` and fire each timer at its instant, in order.

        When it returns, every job that waits on the scheduler alone has ended; a job the test
        keeps blocked is still running.
        """
        await self.timers.advance(by)

    async def stop(self) -> None:
        """Stop as the in-process scheduler does, letting its grace period pass on the clock."""
        await self.timers.run_until(super().stop())

    def runs_of(self, job: str) -> list[JobRun]:
        """The runs of one job, in the order recorded."""
        return [run for run in self.runs if run.job == job]

    def _keep(self, run: JobRun, error: BaseException | None, detail: RunDetail) -> None:
        self.runs.append(run)
        if error is not None:
            self.failures.append(error)
        if self._observer is not None:
            self._observer(run, error, detail)


def _no_jitter() -> float:
    return 0.0
