"""InProcessJobScheduler: runs scheduled jobs on this process's asyncio loop.

One driver task keeps the jobs in a heap by next instant and sleeps until the earliest (at most
an hour), so handling an occurrence costs O(log n) in the number of jobs. Each occurrence then
follows the core's steps (``occurrence.py``) in its own task: jitter, lock, claim, run, record.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import random as _random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime

from ddd_celery.declarations.cron_evaluator import next_occurrence
from ddd_celery.declarations.options import OverlapPolicy, Tenancy
from ddd_celery.declarations.schedule import ParsedJobSchedule
from ddd_celery.kernel.abort import AbortController, settle
from ddd_celery.kernel.clock import Clock
from ddd_celery.kernel.ids import IdGenerator
from ddd_celery.kernel.lock import Lease, Lock
from ddd_celery.kernel.metrics import Metrics
from ddd_celery.kernel.scope import ExecutionScope
from ddd_celery.kernel.tenants import TenantDirectory
from ddd_celery.scheduling.checkpoints import JobCheckpoints
from ddd_celery.scheduling.errors import (
    InvalidJobScheduleError,
    JobAbortedError,
    JobLockUnavailableError,
    JobTimeoutError,
    UnknownJobError,
)
from ddd_celery.scheduling.execution import (
    Attempt,
    AttemptResult,
    JobCallable,
    deadline_of,
    not_run,
    ran,
    require_tenants,
    run_attempt,
    tenants_of,
)
from ddd_celery.scheduling.last_runs import JobLastRuns
from ddd_celery.scheduling.observability import OnRun, RunRecorder
from ddd_celery.scheduling.occurrence import (
    DEFAULT_GRACE_MS,
    DEFAULT_LATE_AFTER_MS,
    DEFAULT_LOCK_TTL_MS,
    Event,
    Occurrence,
    SchedulerRules,
    Step,
    jitter_delay_ms,
    lock_key,
    lock_ttl_ms,
    plan_start,
    reach,
    release_after,
    run_ttl_ms,
    sleep_ms,
)
from ddd_celery.scheduling.outcomes import JobRun, Outcome
from ddd_celery.scheduling.run_state import Claim, InMemoryJobRunState, JobRunState
from ddd_celery.scheduling.scheduler import (
    JobDescription,
    JobScheduler,
    ScheduleInput,
    registered_schedule,
)
from ddd_celery.scheduling.timers import JobTimers, SystemJobTimers

SLICE = 32
"""Occurrences the driver starts before it hands the loop back: a batch of ten thousand due
at once neither holds the loop nor keeps every one of its runs alive at the same time."""


@dataclass(eq=False, slots=True)
class _Job:
    name: str
    schedule: ParsedJobSchedule
    run: JobCallable
    rank: int
    """Its place in the order of registration: jobs due at the same instant start in it."""
    next_at: datetime | None = None
    leases: deque[tuple[datetime, Lease]] = field(default_factory=deque)
    """The locks this instance took, oldest first, released by ``_release_settled``."""
    last_run: JobRun | None = None
    running: int = 0


@dataclass(eq=False, slots=True)
class _Run:
    """A run in progress; ``settled`` says why the scheduler stops waiting for it."""

    job: _Job
    controller: AbortController
    settled: asyncio.Future[BaseException | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    def settle(self, reason: BaseException | None) -> None:
        """Stop waiting: None when the run ended by itself, else why its signal is aborted."""
        settle(self.settled, self.controller, reason)


class InProcessJobScheduler(JobScheduler):
    """The JobScheduler of an application that runs its jobs in its own process.

    Every instant comes from ``clock``; it sleeps through ``timers``. Sync jobs run through
    ``timers.run_sync`` (a worker thread with the system timers), async ones are awaited. The
    ports (lock, checkpoints, run state, last runs, tenants) are called on the loop: each is one
    short round trip. ``describe()`` is this instance's view: its ``last_run`` is what this
    instance handled, while ``last_runs`` is where every instance's records meet.
    """

    def __init__(
        self,
        *,
        clock: Clock,
        lock: Lock,
        scope: ExecutionScope,
        ids: IdGenerator,
        logger: logging.Logger | None = None,
        metrics: Metrics | None = None,
        timers: JobTimers | None = None,
        checkpoints: JobCheckpoints | None = None,
        late_after_ms: int = DEFAULT_LATE_AFTER_MS,
        grace_ms: int = DEFAULT_GRACE_MS,
        lock_ttl_ms: int = DEFAULT_LOCK_TTL_MS,
        random: Callable[[], float] = _random.random,
        on_run: OnRun | None = None,
        tenants: TenantDirectory | None = None,
        run_state: JobRunState | None = None,
        last_runs: JobLastRuns | None = None,
    ) -> None:
        if isinstance(grace_ms, bool) or not isinstance(grace_ms, int) or grace_ms < 0:
            raise ValueError(f"grace_ms must be an int of milliseconds >= 0, not {grace_ms!r}")
        self._clock = clock
        self._lock = lock
        self._scope = scope
        self._ids = ids
        self._timers = timers or SystemJobTimers()
        self._checkpoints = checkpoints
        self._rules = SchedulerRules(late_after_ms=late_after_ms, lock_ttl_ms=lock_ttl_ms)
        self._grace_ms = grace_ms
        self._random = random
        self._recorder = RunRecorder(
            logger=logger, metrics=metrics, on_run=on_run, last_runs=last_runs
        )
        self._tenants = tenants
        self._run_state = run_state or InMemoryJobRunState(clock)
        self._jobs: dict[str, _Job] = {}
        self._heap: list[tuple[datetime, int, _Job]] = []
        """(next instant, rank, job): one entry per armed job."""
        self._driver: asyncio.Task[None] | None = None
        self._nap: asyncio.Task[None] | None = None
        self._stopped: asyncio.Future[None] | None = None
        self._occurrences: set[asyncio.Task[None]] = set()
        self._in_progress: set[_Run] = set()
        self._behind: set[asyncio.Task[AttemptResult]] = set()
        self._queued: dict[str, Occurrence] = {}

    # -- the port -------------------------------------------------------------------------

    def register(
        self,
        *,
        name: str,
        schedule: ScheduleInput,
        run: JobCallable,
        tenancy: Tenancy | str | None = None,
    ) -> None:
        if name in self._jobs:
            raise InvalidJobScheduleError("a job of this name is already registered", job=name)
        if not callable(run):
            raise InvalidJobScheduleError("run must be a callable taking the execution", job=name)
        parsed = registered_schedule(name, schedule, tenancy)
        require_tenants(name, parsed.options, self._tenants)
        job = _Job(name=name, schedule=parsed, run=run, rank=len(self._jobs))
        self._jobs[name] = job
        if self._driver is not None:
            self._arm(job, self._clock.now())
            self._wake()

    async def start(self) -> None:
        if self._driver is not None:
            raise RuntimeError("the scheduler is already started")
        self._stopped = asyncio.get_running_loop().create_future()
        now = self._clock.now()
        for job in self._jobs.values():
            self._arm(job, now)
        self._driver = asyncio.create_task(self._drive(), name="ddd_celery job scheduler")

    async def stop(self) -> None:
        driver, stopped = self._driver, self._stopped
        if driver is None or stopped is None:
            return
        self._driver = None
        stopped.set_result(None)
        self._wake()
        await driver
        self._heap.clear()
        for job in self._jobs.values():
            job.next_at = None
        for name in list(self._queued):
            self._drop_queued(name)
        await self._wait_grace()
        for run in list(self._in_progress):
            run.settle(
                JobAbortedError(
                    f"the scheduler stopped and its grace of {self._grace_ms} ms ran out",
                    job=run.job.name,
                )
            )
        if self._occurrences:
            await asyncio.gather(*self._occurrences)

    async def run_now(self, name: str) -> None:
        job = self._jobs.get(name)
        if job is None:
            raise UnknownJobError(f"no job is named {name!r}", job=name)
        occurrence = Occurrence(name, self._clock.now(), Step.RUNNING)
        error = await self._execute(job, occurrence)
        if error is not None:
            raise error

    def describe(self) -> list[JobDescription]:
        return [
            JobDescription(
                name=job.name,
                schedule=job.schedule.description,
                enabled=job.schedule.options.enabled,
                running=job.running > 0,
                next_run_at=job.next_at,
                last_run=job.last_run,
            )
            for job in self._jobs.values()
        ]

    # -- the driver: one task, one heap ---------------------------------------------------

    async def _drive(self) -> None:
        stopped = self._stopped
        while stopped is not None and not stopped.done():
            now = self._clock.now()
            heap = self._heap
            reached = 0
            while heap and heap[0][0] <= now and reached < SLICE:
                self._reach(heapq.heappop(heap)[2], now)
                reached += 1
            if reached == SLICE:
                await asyncio.sleep(0)
                continue
            wake_at = heap[0][0] if heap else None
            self._nap = asyncio.ensure_future(self._timers.sleep(sleep_ms(now, wake_at)))
            await asyncio.wait((self._nap,))

    def _wake(self) -> None:
        """Cut the driver's sleep short: a job was added or the scheduler stops."""
        if self._nap is not None:
            self._nap.cancel()

    def _arm(self, job: _Job, now: datetime) -> None:
        """Put the job's first instant in the heap, recording the gap since its checkpoint once."""
        job.next_at = None
        if not job.schedule.options.enabled:
            return
        checkpoint = self._read_checkpoint(job.name)
        try:
            plan = plan_start(job.schedule, now, checkpoint, self._rules)
        except OverflowError:
            return
        if plan.missed is not None and plan.dropped_until is not None:
            missed = Occurrence(job.name, plan.missed)
            missed.move(Event.REACHED)
            missed.move(Event.LATE)
            self._record(job, not_run(job.name, plan.missed, Outcome.MISSED))
            self._write_checkpoint(job.name, plan.dropped_until)
        self._push(job, lambda: plan.first_due)

    def _push(self, job: _Job, next_at: Callable[[], datetime]) -> None:
        """Arm the job at the instant ``next_at`` answers; none after the year 9999."""
        try:
            job.next_at = next_at()
        except OverflowError:
            job.next_at = None
            return
        heapq.heappush(self._heap, (job.next_at, job.rank, job))

    def _reach(self, job: _Job, now: datetime) -> None:
        """Handle the job's due instant: record a gap, start an occurrence, arm the next one."""
        due = job.next_at
        assert due is not None, "only an armed job is in the heap"
        self._release_settled(job, now)
        decision = reach(job.schedule, due, now, self._rules)
        if decision.missed is not None:
            missed = Occurrence(job.name, decision.missed)
            missed.move(Event.REACHED)
            missed.move(Event.LATE)
            self._record(job, not_run(job.name, decision.missed, Outcome.MISSED))
        self._write_checkpoint(job.name, decision.resume_after)
        self._push(job, lambda: next_occurrence(job.schedule, decision.resume_after))
        if decision.run is not None:
            occurrence = Occurrence(job.name, decision.run)
            occurrence.move(Event.REACHED)
            occurrence.move(Event.ON_TIME)
            delay = jitter_delay_ms(job.schedule.options, self._random)
            task = asyncio.create_task(self._occur(job, occurrence, delay))
            self._occurrences.add(task)
            task.add_done_callback(self._occurrences.discard)

    # -- one occurrence: jitter, lock, claim, run -----------------------------------------

    async def _occur(self, job: _Job, occurrence: Occurrence, delay_ms: int) -> None:
        if delay_ms > 0 and not await self._jitter(delay_ms):
            occurrence.move(Event.DROPPED)
            self._record(job, not_run(job.name, occurrence.scheduled_at, Outcome.MISSED))
            return
        occurrence.move(Event.JITTER_ELAPSED)
        if not self._take_lock(job, occurrence) or not self._claim(job, occurrence):
            return
        while True:
            await self._execute(job, occurrence)
            promoted = self._finish(job, occurrence.scheduled_at)
            if promoted is None:
                return
            occurrence = self._promoted(job.name, promoted)
            if self._stopped is None or self._stopped.done():
                occurrence.move(Event.DROPPED)
                self._record(job, not_run(job.name, promoted, Outcome.MISSED))
                self._finish(job, promoted)
                return
            occurrence.move(Event.PROMOTED)

    def _promoted(self, name: str, promoted: datetime) -> Occurrence:
        """The queued occurrence the run state promoted: ours, or one another instance queued."""
        queued = self._queued.pop(name, None)
        if queued is not None and queued.scheduled_at == promoted:
            return queued
        return Occurrence(name, promoted, Step.QUEUED)

    async def _jitter(self, delay_ms: int) -> bool:
        """Wait the jitter; False when the scheduler stopped meanwhile (nothing new starts)."""
        stopped = self._stopped
        assert stopped is not None
        nap = asyncio.ensure_future(self._timers.sleep(delay_ms))
        await asyncio.wait((nap, stopped), return_when=asyncio.FIRST_COMPLETED)
        nap.cancel()
        return not stopped.done()

    def _take_lock(self, job: _Job, occurrence: Occurrence) -> bool:
        """Elect this instance for the occurrence; False (recorded) when it must not run here."""
        options = job.schedule.options
        if not options.single_instance:
            occurrence.move(Event.LOCK_NOT_NEEDED)
            return True
        key = lock_key(job.name, occurrence.scheduled_at)
        try:
            lease = self._lock.acquire(key, lock_ttl_ms(options, self._rules))
        except Exception as cause:
            self._unavailable(job, occurrence, cause, "lock")
            return False
        if lease is None:
            occurrence.move(Event.LOCK_HELD)
            self._record(job, not_run(job.name, occurrence.scheduled_at, Outcome.SKIPPED_LOCKED))
            return False
        job.leases.append((occurrence.scheduled_at, lease))
        occurrence.move(Event.LOCK_TAKEN)
        return True

    def _claim(self, job: _Job, occurrence: Occurrence) -> bool:
        """Ask the run state about overlap; True when the occurrence runs now."""
        options = job.schedule.options
        try:
            claim = self._run_state.claim(
                job.name,
                occurrence.scheduled_at,
                queue=options.overlap is OverlapPolicy.QUEUE,
                ttl_ms=run_ttl_ms(options, self._rules),
            )
        except Exception as cause:
            self._unavailable(job, occurrence, cause, "run state")
            return False
        if claim is Claim.BUSY:
            occurrence.move(Event.BUSY)
            self._record(job, not_run(job.name, occurrence.scheduled_at, Outcome.SKIPPED_OVERLAP))
            return False
        if claim is Claim.QUEUED:
            occurrence.move(Event.QUEUED)
            self._queued[job.name] = occurrence
            return False
        occurrence.move(Event.STARTED)
        return True

    def _unavailable(self, job: _Job, occurrence: Occurrence, cause: Exception, store: str) -> None:
        """A store that cannot be asked: the occurrence fails rather than runs everywhere."""
        occurrence.move(Event.LOCK_UNAVAILABLE)
        error = JobLockUnavailableError(f"the {store} store could not be asked", job=job.name)
        error.__cause__ = cause
        self._record(
            job, not_run(job.name, occurrence.scheduled_at, Outcome.FAILED, error=error), error
        )

    async def _execute(self, job: _Job, occurrence: Occurrence) -> BaseException | None:
        """Run the occurrence until it ends, times out or is aborted; record it; return its error.

        A run that times out or is aborted is no longer waited for: it goes on behind.
        """
        options = job.schedule.options
        started_at = self._clock.now()
        run = _Run(job, AbortController())
        attempt = Attempt(
            job=job.name,
            scheduled_at=occurrence.scheduled_at,
            started_at=started_at,
            correlation_id=self._ids.next_id(),
            signal=run.controller.signal,
            deadline=deadline_of(started_at, options),
            tenants=(),
        )
        task = asyncio.create_task(self._attempt(job, attempt))
        job.running += 1
        task.add_done_callback(lambda _: _ended(job))
        task.add_done_callback(lambda _: run.settle(None))
        self._in_progress.add(run)
        expiry = None
        if options.timeout_ms is not None:
            expiry = asyncio.ensure_future(self._expire(run, options.timeout_ms))
        try:
            reason = await run.settled
        finally:
            self._in_progress.discard(run)
            if expiry is not None:
                expiry.cancel()
        if reason is None:
            error, tenant = _outcome_of(task)
        else:
            self._behind.add(task)
            task.add_done_callback(self._behind.discard)
            error, tenant = reason, None
        occurrence.move(Event.SUCCEEDED if error is None else Event.FAILED)
        self._record(job, ran(attempt, self._clock.now(), error, tenant), error)
        return error

    async def _attempt(self, job: _Job, attempt: Attempt) -> AttemptResult:
        """The job's run for each tenant of the occurrence, asked of the directory now."""
        try:
            tenants = tenants_of(job.name, job.schedule.options, self._tenants)
        except Exception as error:
            return AttemptResult(error, None)
        return await run_attempt(
            replace(attempt, tenants=tenants),
            job.run,
            self._scope,
            call_sync=self._timers.run_sync,
        )

    async def _expire(self, run: _Run, timeout_ms: int) -> None:
        await self._timers.sleep(timeout_ms)
        run.settle(
            JobTimeoutError(f"the run outlived its timeout of {timeout_ms} ms", job=run.job.name)
        )

    async def _wait_grace(self) -> None:
        """Wait until every run in progress ends, or the grace period passes."""
        pending = [run.settled for run in self._in_progress]
        if not pending:
            return
        grace = asyncio.ensure_future(self._timers.sleep(self._grace_ms))
        every_run = asyncio.ensure_future(asyncio.wait(pending))
        await asyncio.wait((grace, every_run), return_when=asyncio.FIRST_COMPLETED)
        grace.cancel()
        every_run.cancel()

    # -- state around the runs ------------------------------------------------------------

    def _finish(self, job: _Job, scheduled_at: datetime) -> datetime | None:
        """Free the job in the run state; the occurrence queued behind it, if any."""
        try:
            return self._run_state.finish(
                job.name, scheduled_at, ttl_ms=run_ttl_ms(job.schedule.options, self._rules)
            )
        except Exception as error:
            self._recorder.could_not_follow(job.name, error, what="run state finish")
            return None

    def _drop_queued(self, name: str) -> None:
        """Stopping: the occurrence this instance queued will not run; record it missed."""
        job, occurrence = self._jobs[name], self._queued.pop(name)
        try:
            dropped = self._run_state.drop_queued(name)
        except Exception as error:
            self._recorder.could_not_follow(name, error, what="run state drop")
            return
        if dropped is not None:
            occurrence.move(Event.DROPPED)
            self._record(job, not_run(name, dropped, Outcome.MISSED))

    def _release_settled(self, job: _Job, now: datetime) -> None:
        """Release, as the job's next occurrence comes, the locks no instance can still want."""
        options = job.schedule.options
        while job.leases and release_after(job.leases[0][0], options, self._rules) < now:
            _, lease = job.leases.popleft()
            try:
                self._lock.release(lease)
            except Exception as error:
                self._recorder.could_not_follow(job.name, error, what="lock release")

    def _read_checkpoint(self, name: str) -> datetime | None:
        if self._checkpoints is None:
            return None
        try:
            return self._checkpoints.read(name)
        except Exception as error:
            self._recorder.could_not_follow(name, error, what="checkpoint read")
            return None

    def _write_checkpoint(self, name: str, handled: datetime) -> None:
        if self._checkpoints is None:
            return
        try:
            self._checkpoints.write(name, handled)
        except Exception as error:
            self._recorder.could_not_follow(name, error, what="checkpoint write")

    def _record(self, job: _Job, run: JobRun, error: BaseException | None = None) -> None:
        job.last_run = run
        self._recorder.record(run, error)


def _ended(job: _Job) -> None:
    job.running -= 1


def _outcome_of(task: asyncio.Task[AttemptResult]) -> tuple[BaseException | None, str | None]:
    """The first error of a finished attempt and its tenant; a job that cancelled itself failed."""
    if task.cancelled():
        return asyncio.CancelledError(), None
    result = task.result()
    return result.error, result.tenant_id
