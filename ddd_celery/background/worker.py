"""``QueueWorker``: the driver of background jobs without Celery, on an asyncio loop.

It polls the store for the queues it has jobs for, claims as many due jobs as each queue has
free slots, and runs each attempt through the shared attempt API (``attempt.py``), as the Celery
tasks do: the same scope, payload validation, conclusion and record. Around an attempt it renews
the lease every third of it (a cancel is seen there and aborts the signal with
``JobInterruptedError``, as does a lease no renewal reached the store for: it has run out there,
and another worker may run the job), enforces ``timeout_ms`` (``JobTimeoutError``: failed,
retried per the rules), and on ``stop()`` waits ``grace_ms`` before aborting what still runs
(``JobAbortedError``: released, the attempt uncounted). It also hands back the jobs of workers
that died (``expire_leases``), so nothing stays running for ever.

It sleeps and runs sync jobs through its ``JobTimers``: a worker thread per sync attempt with
the system timers, inline on ``ManualJobTimers`` in a spec. The store is called on the loop:
each call is one short round trip, and a claim is made and its attempts started in one step, so
``stop()`` never finds a claim in flight whose jobs it would have to give back.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import random as _random
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from ddd_celery.background.attempt import (
    AttemptOutcome,
    BackgroundCallable,
    BackgroundRegistration,
    conclude,
    lease_outlived,
    registration_of,
    renew_lease,
    run_claimed,
)
from ddd_celery.background.errors import UnknownBackgroundJobError
from ddd_celery.background.observability import (
    DEFAULT_LOGGER,
    BackgroundRecorder,
    OnBackgroundRun,
    log_lease_expired,
)
from ddd_celery.background.rules import DEFAULT_LEASE_MS, AttemptEnd, heartbeat_interval_ms
from ddd_celery.background.store import ClaimedJob, JobLease, JobStore
from ddd_celery.declarations.background import BackgroundOptions
from ddd_celery.declarations.errors import DeclarationError
from ddd_celery.kernel.abort import AbortController, settle
from ddd_celery.kernel.clock import Clock
from ddd_celery.kernel.errors import JobAbortedError, JobTimeoutError
from ddd_celery.kernel.metrics import Metrics
from ddd_celery.kernel.scope import ExecutionScope
from ddd_celery.kernel.timers import JobTimers, SystemJobTimers

DEFAULT_POLL_INTERVAL_MS = 1_000
DEFAULT_GRACE_MS = 30_000
EXPIRE_LIMIT = 100
"""Expired leases handed back per sweep."""


@dataclass(eq=False, slots=True)
class _Queue:
    name: str
    limit: int
    running: int = 0
    freed: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when an attempt of this queue ends: a full poller claims again at once."""

    @property
    def free(self) -> int:
        return max(0, self.limit - self.running)


@dataclass(eq=False, slots=True)
class _Run:
    """An attempt in progress; ``settled`` says why the worker stops waiting for it."""

    claimed: ClaimedJob
    registration: BackgroundRegistration
    controller: AbortController
    lease: JobLease
    renewed_at: float
    """When the claim or the last answered renewal was sent (the worker's ``monotonic``)."""
    settled: asyncio.Future[BaseException | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    def settle(self, reason: BaseException | None) -> None:
        """Stop waiting: None when the job ended by itself, else why its signal is aborted."""
        settle(self.settled, self.controller, reason)


class QueueWorker:
    """Claims and runs the jobs of the queues it has jobs for, in this process.

    ``concurrency`` is how many attempts of one queue run at once: a number for every queue, or
    ``{"<queue>": n, "default": n}`` (a queue not named takes ``default``, else 1). An idle queue
    asks the store again every ``poll_interval_ms``; a full one as soon as a slot frees. Every
    job of a queue it polls must be registered on it: a job it does not know is given back
    (for a worker that knows it) and logged once per job name.

    ``monotonic`` (seconds) times how long a lease went unrenewed: an attempt none of whose
    renewals reached the store for ``lease_ms`` aborts its signal with ``JobInterruptedError``.

    ``name`` is what each claim records as the attempt's worker (``AttemptRecord.worker``, what
    ``find`` shows); ``<hostname>:<pid>`` by default (``default_worker_name``).
    """

    def __init__(
        self,
        *,
        store: JobStore,
        clock: Clock,
        scope: ExecutionScope,
        concurrency: int | Mapping[str, int] = 1,
        poll_interval_ms: int = DEFAULT_POLL_INTERVAL_MS,
        grace_ms: int = DEFAULT_GRACE_MS,
        timers: JobTimers | None = None,
        on_run: OnBackgroundRun | None = None,
        logger: logging.Logger | None = None,
        metrics: Metrics | None = None,
        lease_ms: int = DEFAULT_LEASE_MS,
        random: Callable[[], float] = _random.random,
        monotonic: Callable[[], float] = time.monotonic,
        name: str | None = None,
    ) -> None:
        _check_concurrency(concurrency)
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ValueError(f"name must be a non-empty string, not {name!r}")
        for setting, value, low in (
            ("poll_interval_ms", poll_interval_ms, 1),
            ("grace_ms", grace_ms, 0),
            ("lease_ms", lease_ms, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(
                    f"{setting} must be an int of milliseconds >= {low}, not {value!r}"
                )
        self._store = store
        self._clock = clock
        self._scope = scope
        self._concurrency = concurrency
        self._poll_interval_ms = poll_interval_ms
        self._grace_ms = grace_ms
        self._timers = timers or SystemJobTimers()
        self._logger = logger or logging.getLogger(DEFAULT_LOGGER)
        self._recorder = BackgroundRecorder(logger=self._logger, metrics=metrics, on_run=on_run)
        self._lease_ms = lease_ms
        self._random = random
        self._monotonic = monotonic
        self._name = default_worker_name() if name is None else name
        self._unknown: set[str] = set()
        """The names of the jobs met and not registered, each logged once."""
        self._jobs: dict[str, BackgroundRegistration] = {}
        self._queues: dict[str, _Queue] = {}
        self._stopped: asyncio.Future[None] | None = None
        self._pollers: list[asyncio.Task[None]] = []
        self._in_progress: set[_Run] = set()
        self._attempts: set[asyncio.Task[None]] = set()
        self._behind: set[asyncio.Task[AttemptOutcome]] = set()

    def register(
        self,
        job: type[Any] | None = None,
        factory: Callable[[], Any] | None = None,
        *,
        name: str | None = None,
        options: BackgroundOptions | Mapping[str, Any] | None = None,
        run: BackgroundCallable | None = None,
    ) -> None:
        """Register a ``@background`` class built by ``factory()`` for each attempt (the class
        itself by default), or a job by ``name``, ``options`` and ``run(payload, execution)``.

        Raises ``DeclarationError`` for a name registered twice, bad options, or both forms.
        """
        if job is not None:
            if name is not None or options is not None or run is not None:
                raise DeclarationError("register a class, or name=, options= and run=, not both")
            registration = registration_of(job, factory)
        else:
            if name is None or run is None:
                raise DeclarationError("register a @background class, or name= and run=")
            registration = BackgroundRegistration.of_callable(name=name, run=run, options=options)
        if registration.name in self._jobs:
            raise DeclarationError(
                "a job of this name is already registered", job=registration.name
            )
        self._jobs[registration.name] = registration
        if registration.queue not in self._queues:
            queue = _Queue(registration.queue, _limit_of(self._concurrency, registration.queue))
            self._queues[queue.name] = queue
            if self._stopped is not None and not self._stopped.done():
                self._pollers.append(asyncio.create_task(self._poll(queue)))

    @property
    def name(self) -> str:
        """What the claims of this worker name it (``AttemptRecord.worker``)."""
        return self._name

    @property
    def queues(self) -> dict[str, int]:
        """The queues polled and the attempts each runs at once."""
        return {queue.name: queue.limit for queue in self._queues.values()}

    async def start(self) -> None:
        """Start polling every queue; raises ``RuntimeError`` when already started."""
        if self._stopped is not None and not self._stopped.done():
            raise RuntimeError("the worker is already started")
        self._stopped = asyncio.get_running_loop().create_future()
        self._pollers = [asyncio.create_task(self._poll(queue)) for queue in self._queues.values()]
        self._pollers.append(asyncio.create_task(self._sweep()))

    async def stop(self) -> None:
        """Stop claiming, wait ``grace_ms`` for the attempts in progress, then abort and release
        those still running (their attempts uncounted), and return once each is recorded."""
        stopped = self._stopped
        if stopped is None or stopped.done():
            return
        stopped.set_result(None)
        await asyncio.gather(*self._pollers)
        self._pollers = []
        await self._wait_grace()
        for run in list(self._in_progress):
            run.settle(
                JobAbortedError(
                    f"the worker stopped and its grace of {self._grace_ms} ms ran out",
                    job=run.registration.name,
                )
            )
        if self._attempts:
            await asyncio.gather(*self._attempts)

    async def run_due(self) -> None:
        """Run what is due now, queue by queue within their concurrency, until nothing is due;
        return once every attempt it started is recorded. For specs and one-off runs."""
        self._expire()
        while True:
            started = []
            for queue in self._queues.values():
                claimed, claimed_at = self._claim(queue)
                started += [self._start(one, claimed_at) for one in claimed]
            tasks = [task for task in started if task is not None]
            if not tasks:
                return
            await asyncio.gather(*tasks)

    # -- polling ------------------------------------------------------------------------

    async def _poll(self, queue: _Queue) -> None:
        stopped = self._stopped
        assert stopped is not None
        while not stopped.done():
            free = queue.free
            claimed, claimed_at = self._claim(queue)
            started = [one for one in claimed if self._start(one, claimed_at) is not None]
            queue.freed.clear()
            waiter: asyncio.Future[Any]
            if free and len(started) < free:  # a job given back frees no slot to wait for
                waiter = asyncio.ensure_future(self._timers.sleep(self._poll_interval_ms))
            else:
                waiter = asyncio.ensure_future(queue.freed.wait())
            await asyncio.wait((waiter, stopped), return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()

    async def _sweep(self) -> None:
        stopped = self._stopped
        assert stopped is not None
        while not stopped.done():
            self._expire()
            nap = asyncio.ensure_future(self._timers.sleep(self._poll_interval_ms))
            await asyncio.wait((nap, stopped), return_when=asyncio.FIRST_COMPLETED)
            nap.cancel()

    def _claim(self, queue: _Queue) -> tuple[list[ClaimedJob], float]:
        """The jobs claimed, and when the claim was sent: where their leases start."""
        sent = self._monotonic()
        if not queue.free:
            return [], sent
        try:
            claimed = self._store.claim_due(
                [queue.name],
                now=self._clock.now(),
                lease_ms=self._lease_ms,
                limit=queue.free,
                worker=self._name,
            )
        except Exception as error:
            self._recorder.could_not_follow(queue.name, "", error, what="claim due jobs")
            return [], sent
        return claimed, sent

    def _expire(self) -> None:
        try:
            expired = self._store.expire_leases(now=self._clock.now(), limit=EXPIRE_LIMIT)
        except Exception as error:
            self._recorder.could_not_follow("", "", error, what="expire leases")
            return
        for job in expired:
            log_lease_expired(self._logger, job)

    def _give_back(self, claimed: ClaimedJob) -> None:
        try:
            self._store.release(claimed.lease, now=self._clock.now())
        except Exception as error:
            self._recorder.could_not_follow(
                claimed.job.name, claimed.job.id, error, what="release a claim"
            )

    # -- one attempt --------------------------------------------------------------------

    def _start(self, claimed: ClaimedJob, claimed_at: float) -> asyncio.Task[None] | None:
        registration = self._jobs.get(claimed.job.name)
        if registration is None:
            self._give_back(claimed)
            if claimed.job.name in self._unknown:
                return None  # given back at every poll: said once
            self._unknown.add(claimed.job.name)
            self._recorder.could_not_follow(
                claimed.job.name,
                claimed.job.id,
                UnknownBackgroundJobError("not registered on this worker", job=claimed.job.name),
                what="run a job this worker does not know",
            )
            return None
        queue = self._queues[claimed.job.queue]
        queue.running += 1
        run = _Run(claimed, registration, AbortController(), claimed.lease, claimed_at)
        task = asyncio.create_task(self._attempt(run, queue))
        self._attempts.add(task)
        task.add_done_callback(self._attempts.discard)
        return task

    async def _attempt(self, run: _Run, queue: _Queue) -> None:
        self._in_progress.add(run)
        started_at = self._clock.now()
        job = asyncio.create_task(
            run_claimed(
                run.claimed,
                run.registration,
                scope=self._scope,
                clock=self._clock,
                store=self._store,
                controller=run.controller,
                call_sync=self._call_sync,
            )
        )
        job.add_done_callback(lambda _: run.settle(None))
        watchers = [asyncio.create_task(self._keep_lease(run))]
        timeout_ms = run.registration.options.timeout_ms
        if timeout_ms is not None:
            watchers.append(asyncio.create_task(self._expire_after(run, timeout_ms)))
        try:
            reason = await run.settled
        finally:
            self._in_progress.discard(run)
            for watcher in watchers:
                watcher.cancel()
        if reason is None:
            outcome = _outcome_of(job, started_at, self._clock.now())
        else:
            self._behind.add(job)
            job.add_done_callback(self._behind.discard)
            outcome = AttemptOutcome.abandoned(
                reason, started_at=started_at, ended_at=self._clock.now()
            )
        try:
            conclusion = conclude(
                self._store,
                ClaimedJob(run.claimed.job, run.lease),
                outcome,
                options=run.registration.options,
                now=self._clock.now(),
                random=self._random,
            )
        except Exception as error:  # the lease expires and the job comes back
            self._recorder.could_not_follow(
                run.claimed.job.name, run.claimed.job.id, error, what="conclude the attempt"
            )
        else:
            self._recorder.record(conclusion.run, conclusion.error)
        finally:
            queue.running -= 1
            queue.freed.set()

    async def _keep_lease(self, run: _Run) -> None:
        every_ms = heartbeat_interval_ms(self._lease_ms)
        while True:
            left_ms = (run.renewed_at - self._monotonic()) * 1000 + self._lease_ms
            await self._timers.sleep(max(0, min(every_ms, math.ceil(left_ms))))
            if (self._monotonic() - run.renewed_at) * 1000 >= self._lease_ms:
                run.settle(lease_outlived(run.registration.name, run.lease, self._lease_ms))
                return
            sent = self._monotonic()
            try:
                lease = renew_lease(
                    self._store,
                    run.lease,
                    now=self._clock.now(),
                    lease_ms=self._lease_ms,
                    controller=run.controller,
                    job=run.registration.name,
                )
            except Exception as error:
                self._recorder.could_not_follow(
                    run.registration.name, run.claimed.job.id, error, what="renew the lease"
                )
                continue
            if lease is None:
                run.settle(run.controller.signal.reason)
                return
            run.lease, run.renewed_at = lease, sent

    async def _expire_after(self, run: _Run, timeout_ms: int) -> None:
        await self._timers.sleep(timeout_ms)
        run.settle(
            JobTimeoutError(
                f"the attempt outlived its timeout of {timeout_ms} ms", job=run.registration.name
            )
        )

    async def _call_sync(self, work: Callable[[], Any]) -> Any:
        # The timers hand the execution through untouched: the work needs none.
        return await self._timers.run_sync(lambda _: work(), cast(Any, None))

    async def _wait_grace(self) -> None:
        pending = [run.settled for run in self._in_progress]
        if not pending:
            return
        grace = asyncio.ensure_future(self._timers.sleep(self._grace_ms))
        every_run = asyncio.ensure_future(asyncio.wait(pending))
        await asyncio.wait((grace, every_run), return_when=asyncio.FIRST_COMPLETED)
        grace.cancel()
        every_run.cancel()


def default_worker_name() -> str:
    """``<hostname>:<pid>``: tells two workers on one machine apart, as Celery's ``%h`` does
    two hosts."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _outcome_of(
    job: asyncio.Task[AttemptOutcome], started_at: datetime, ended_at: datetime
) -> AttemptOutcome:
    """What ``run_claimed`` returned; a job that cancelled itself (or raised a
    ``BaseException`` through it) failed."""
    if job.cancelled():
        return AttemptOutcome(AttemptEnd.FAILED, asyncio.CancelledError(), started_at, ended_at)
    error = job.exception()
    if error is not None:
        return AttemptOutcome(AttemptEnd.FAILED, error, started_at, ended_at)
    return job.result()


def _check_concurrency(concurrency: int | Mapping[str, int]) -> None:
    values = concurrency.values() if isinstance(concurrency, Mapping) else [concurrency]
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(
                "concurrency is an int >= 1 or a mapping {queue: n, 'default': n} of them, "
                f"not {concurrency!r}"
            )


def _limit_of(concurrency: int | Mapping[str, int], queue: str) -> int:
    if isinstance(concurrency, int):
        return concurrency
    return concurrency.get(queue, concurrency.get("default", 1))
