"""Celery beat on the occurrence rules: a heap of next instants and one lock per occurrence.

Every beat of a deployment computes the same instants from the Clock and, before sending a
``single_instance`` job, takes the lock ``job:<name>:<instant>``. The beat that gets it sends
the task; the others record ``skipped-locked``. There is no leader, hence no failover delay: a
beat that dies costs nothing but itself. Chosen with ``celery -A app beat -S ddd`` or
``app.conf.beat_scheduler = "ddd_celery.celery.beat:JobBeatScheduler"`` (``install_jobs``
sets it).

Celery's own schedule machinery (the entry dict, the shelve file, ``celery.schedules``) is not
used: its intervals restart from beat's start and its crontab gets DST wrong. The only state
that crosses a restart is the checkpoints.

This module is the scheduler: its heap, its tick and its decisions. What it decided is carried
out beside it: ``beat_publishing`` sends the tasks, ``beat_system_jobs`` runs the relay's passes
on their thread, ``beat_outages`` says once when a store stops and starts answering.
"""

from __future__ import annotations

import gc
import heapq
import itertools
import logging
import random as _random
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict
from datetime import datetime, timedelta
from enum import Enum
from typing import Any, Generic, NamedTuple, TypeVar

from celery.beat import Scheduler

from ddd_celery.celery.beat_batches import Batch, BeginsAhead
from ddd_celery.celery.beat_entries import BeatScheduleEntryError, job_name_of
from ddd_celery.celery.beat_outages import CHECKPOINTS, StoreOutages
from ddd_celery.celery.beat_publishing import Publisher, Sending, free_run_state
from ddd_celery.celery.beat_system_jobs import SystemJobs
from ddd_celery.celery.guards import refuse_pickle_at_start
from ddd_celery.celery.pauses import BeatPauses
from ddd_celery.celery.registry import CeleryJob, CeleryJobs, jobs_of
from ddd_celery.declarations.cron_evaluator import next_occurrence
from ddd_celery.declarations.options import OverlapPolicy
from ddd_celery.declarations.schedule import CronRule, ParsedJobSchedule
from ddd_celery.kernel.instants import iso_ms
from ddd_celery.kernel.lock import Lease
from ddd_celery.scheduling.errors import JobAbortedError, JobLockUnavailableError
from ddd_celery.scheduling.execution import not_run
from ddd_celery.scheduling.occurrence import (
    MAX_SLEEP_MS,
    MOVES,
    Event,
    Occurrence,
    Reach,
    StartPlan,
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
from ddd_celery.scheduling.occurrence_store import IN_THE_LOCK, Beginning
from ddd_celery.scheduling.outcomes import Outcome
from ddd_celery.scheduling.pauses import Pause
from ddd_celery.scheduling.run_state import Claim

logger = logging.getLogger(__name__)

LISTED_AT_START = 50
"""How many jobs beat logs one by one at start; past that, a line says how many more."""

RETRY_MS = 60_000
"""How long a job whose next instant could not be computed waits before beat tries again."""

DISPATCH_BATCH = 1_000
"""Occurrences due together that one call to the stores begins and one producer publishes."""

_REACHED_ON_TIME = MOVES[MOVES[Step.SCHEDULED, Event.REACHED], Event.ON_TIME]
"""The step of an occurrence reached on its time, its two moves looked up once, not per job."""

CLOSE_WAIT_S = 2.0
"""How long ``close`` waits for a system job's pass in progress: a pass held by a store that
hangs must not hold beat's stop, and what it leaves undone its next pass does."""


class _Kind(Enum):
    DUE = "due"
    """``at`` is an instant of the job: decide whether it is on time, missed or caught up."""
    WAITING = "waiting"
    """``at`` is the end of the jitter of ``occurrence``: take its lock and send it."""
    RESUME = "resume"
    """The job's next instant could not be computed: compute it again from ``at``."""


class _Entry(NamedTuple):
    """One wake-up on the heap; ``seq`` breaks ties, so entries never compare further."""

    at: datetime
    seq: int
    kind: _Kind
    job: CeleryJob
    occurrence: Occurrence | None


_T = TypeVar("_T")


class _BySchedule(Generic[_T]):
    """What is computed from a schedule and an instant alone, made once for all the jobs of
    that schedule: 100,000 jobs on ``* * * * *`` share one plan at start and one next instant
    per tick. Found by the schedule object first (no hash of it), else by an equal schedule.
    """

    __slots__ = ("_by_id", "_by_value")

    def __init__(self) -> None:
        self._by_id: dict[tuple[int, datetime | None], tuple[ParsedJobSchedule, _T]] = {}
        self._by_value: dict[tuple[ParsedJobSchedule, datetime | None], _T] = {}

    def get(self, schedule: ParsedJobSchedule, at: datetime | None) -> _T | None:
        found = self._by_id.get((id(schedule), at))
        if found is not None and found[0] is schedule:  # the object kept: its id not reused
            return found[1]
        value = self._by_value.get((schedule, at))
        if value is not None:
            self._by_id[id(schedule), at] = (schedule, value)
        return value

    def put(self, schedule: ParsedJobSchedule, at: datetime | None, value: _T) -> None:
        self._by_id[id(schedule), at] = (schedule, value)
        self._by_value[schedule, at] = value


class JobBeatScheduler(Scheduler):  # type: ignore[misc]
    """A ``celery.beat.Scheduler`` that drives the jobs installed on the app by ``install_jobs``.

    A tick pops what is due, so it costs O(log n) per occurrence and O(1) when idle, whatever
    the number of jobs; it returns how long beat may sleep: until the next instant, at most
    ``max_interval`` (an hour unless ``--max-interval`` says less). ``tick()`` never raises: an
    error it does not expect is logged and beat keeps ticking.

    Beat records the occurrences it does not send (``missed``, ``skipped-locked``,
    ``skipped-overlap``, ``skipped-paused``, ``failed``); the worker records the ones that run.
    """

    max_interval = MAX_SLEEP_MS / 1000

    def __init__(
        self,
        app: Any,
        *args: Any,
        random: Callable[[], float] | None = None,
        spread: Callable[[int], int] | None = None,
        **kwargs: Any,
    ) -> None:
        self._random = random or _random.random
        self._spread = spread or _random.Random().randrange
        """Where a burst's walk starts, an index in ``range(n)`` batches: a generator of this
        instance's own, so beats started together still start apart (``_dispatch_ready``)."""
        self._jobs: CeleryJobs | None = None
        self._due: list[_Entry] = []
        self._seq = itertools.count()
        self._leases: dict[str, deque[tuple[datetime, Lease]]] = {}
        """Leases this beat holds, per job and oldest first, until no beat can still want them."""
        self._handled: dict[str, datetime] = {}
        """The checkpoint each job is owed, written once the tick's tasks are sent."""
        self._checkpoints_kept: dict[str, datetime] = {}
        """The checkpoint the stores wrote with each job's lock this tick (``begin``)."""
        self._ready: list[tuple[CeleryJob, Occurrence]] = []
        """Occurrences reached this tick and due now, begun and published together."""
        self._nexts = _BySchedule[datetime]()
        """The next instants computed this tick, shared by the jobs of one schedule."""
        self._reaches = _BySchedule[Reach]()
        """The decisions made this tick (``reach``), shared by the jobs of one schedule."""
        self._releasing: list[tuple[str, Lease]] = []
        self._beginnings: dict[str, tuple[bool, int, bool, int]] = {}
        """Each job's part of its ``Beginning`` that never changes: computed at its first."""
        self._publisher = Publisher(app)
        """Sends the tasks of the occurrences begun (``beat_publishing``)."""
        self._ahead = BeginsAhead()
        """Begins the next batch of a burst while one is published (``beat_batches``)."""
        self._system_jobs = SystemJobs()
        """Runs each system job's passes on a thread of its own (``beat_system_jobs``)."""
        self._outages = StoreOutages()
        """The stores that stopped answering, said once each way (``beat_outages``)."""
        self._pauses = BeatPauses()
        """The jobs an operator paused, read once per tick that sends (``celery/pauses.py``)."""
        self._closed = False
        self._frozen = False
        """Whether ``setup_schedule`` froze the set-up out of the garbage collector."""
        super().__init__(app, *args, **kwargs)

    def setup_schedule(self) -> None:
        """Read the jobs and their checkpoints; put each enabled job's first instant on the heap.

        Celery calls it for the scheduler that ticks, never for the lazy instance that prints
        the banner, so the banner asks no store anything. Then every object alive is frozen
        out of the garbage collector (``gc.freeze``) until ``close``. Raises ``LookupError``
        when no jobs are installed on the app, which stops beat at start. A checkpoint that
        cannot be read is logged and its job starts from now, as without checkpoints.
        """
        refuse_pickle_at_start(self)  # before the banner's beat_init: this reads the jobs first
        jobs = jobs_of(self.app)
        self._jobs, self._due, self._beginnings = jobs, [], {}
        self._warn_of_entries_not_installed(jobs)
        if not jobs.start:
            logger.info("beat: this process runs no job by time (RUN_JOBS is off)")
            return
        # What the set-up allocates lives as long as beat (frozen below): a collection while
        # it is built, a full one included, would walk every object of every job for nothing
        # (a third of the set-up at 100,000 jobs).
        collecting = gc.isenabled()
        gc.disable()
        try:
            self._build(jobs)
        finally:
            if collecting:
                gc.enable()
        # What the set-up built (the app, its tasks, the jobs, the heap) lives as long as beat:
        # out of the collector's generations, a full collection no longer walks every object
        # of every job (millions at 100,000 jobs) while a burst is sent. ``close`` gives them
        # back.
        gc.freeze()
        self._frozen = True

    def _build(self, jobs: CeleryJobs) -> None:
        """Read the checkpoints, make the heap of first instants, log the jobs.

        Jobs of one schedule and one checkpoint start alike: their plan is made once (100,000
        jobs on ``* * * * *`` are one plan, not 100,000). The heap is made in one ``heapify``
        once every first instant is known, not pushed to job by job.
        """
        enabled = [job for job in jobs.jobs.values() if job.schedule.options.enabled]
        checkpoints = self._checkpoints(jobs, enabled)
        now = jobs.clock.now()
        plans = _BySchedule[StartPlan]()
        for job in enabled:
            self._resume(job, now, checkpoints.get(job.name), plans, push=self._due.append)
        heapq.heapify(self._due)
        self._log_jobs(jobs)
        _log_overrides(jobs)

    def _log_jobs(self, jobs: CeleryJobs) -> None:
        """Log each job at INFO, soonest first: its schedule and first instant, UTC and local.

        Past ``LISTED_AT_START`` jobs, one line says how many more there are.
        """
        soonest = heapq.nsmallest(
            LISTED_AT_START,
            (entry for entry in self._due if entry.kind is _Kind.DUE),
            key=lambda entry: (entry.at, entry.job.name),
        )
        firsts = {entry.job.name: entry.at for entry in soonest}
        listed = [entry.job for entry in soonest]
        if len(listed) < LISTED_AT_START:  # then the jobs without a first instant, by name
            rest = (job for job in jobs.jobs.values() if job.name not in firsts)
            listed += heapq.nsmallest(LISTED_AT_START - len(listed), rest, key=lambda job: job.name)
        for job in listed:
            fields = {"job": job.name, "schedule": job.schedule.description}
            at = firsts.get(job.name)
            if not job.schedule.options.enabled:
                logger.info("beat: job switched off", extra=fields)
                continue
            if at is not None:
                fields["next_run_at"] = iso_ms(at)
                rule = job.schedule.rule
                if isinstance(rule, CronRule) and rule.time_zone != "UTC":
                    fields["next_run_local"] = at.astimezone(rule.zone).isoformat("T", "seconds")
            logger.info("beat: job scheduled", extra=fields)
        if len(jobs.jobs) > LISTED_AT_START:
            logger.info(
                "beat: %d more jobs not listed here; `celery jobs list` shows every job",
                len(jobs.jobs) - LISTED_AT_START,
                extra={"jobs": len(jobs.jobs)},
            )

    def _warn_of_entries_not_installed(self, jobs: CeleryJobs) -> None:
        """Say which ``beat_schedule`` entries this scheduler will not send.

        ``install_jobs`` translates the entries it finds; one added afterwards (or with
        ``include_beat_schedule=False``) would otherwise be dropped without a word.
        """
        entries = self.app.conf.beat_schedule or {}
        ignored = sorted(
            str(name) for name in entries if _job_name_or_none(str(name)) not in jobs.jobs
        )
        if ignored:
            logger.warning(
                "beat: beat_schedule entries %s are not installed as jobs, so beat never sends "
                "them: set beat_schedule before install_jobs (include_beat_schedule=True)",
                ", ".join(ignored),
            )

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """Handle every occurrence due now; return the seconds beat may sleep.

        Never raises: any exception out of ``tick`` would stop beat and every job with it.
        """
        try:
            return self._tick()
        except Exception:
            logger.exception("beat: a tick failed; trying again in %s ms", RETRY_MS)
            return min(RETRY_MS / 1000, self.max_interval)

    def close(self) -> None:
        """Stop: an occurrence still waiting its jitter is not sent by this beat, so ``missed``.

        The checkpoints of what this beat handled are written (an occurrence interrupted by the
        stop included, so a restart does not take it for a gap). A system job's pass in
        progress gets up to ``CLOSE_WAIT_S`` to end. Then Celery's own close (its publishing
        connection). Leases are kept: a beat started next must still find them taken. A tick
        after it sends nothing.
        """
        self._closed = True
        if self._frozen:
            self._frozen = False
            gc.unfreeze()
        try:
            if self._jobs is not None:
                self._drop_waiting(self._jobs)
                self._follow_up(self._jobs)
            self._system_jobs.stop()
            self.wait_for_system_jobs(CLOSE_WAIT_S)
            self._ahead.close()
        finally:
            super().close()

    def wait_for_system_jobs(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every system job's pass in progress to end;
        whether none is left. Beat itself never waits but at ``close``: a test ticking beat by
        hand waits here before reading what a pass did."""
        return self._system_jobs.wait(timeout)

    @property
    def info(self) -> str:
        """The banner's line; reads only what ``install_jobs`` put on the app."""
        try:
            jobs = jobs_of(self.app)
        except LookupError:
            return "    . ddd_celery -> no jobs installed (call install_jobs)"
        except ValueError as error:  # the configuration cannot run them; setup_schedule stops
            return f"    . ddd_celery -> cannot start: {error}"
        system = [job.name for job in jobs.jobs.values() if job.inline is not None]
        entries = sum(1 for job in jobs.jobs.values() if not job.declared and job.inline is None)
        counted = _count(len(jobs.jobs) - len(system), "job")
        if entries:
            counted += f" ({entries} from beat_schedule)"
        if system:
            counted += f", {_count(len(system), 'system job')} ({', '.join(sorted(system))})"
        running = "" if jobs.start else ", none run by time here (RUN_JOBS)"
        return f"    . ddd_celery -> {counted}, lock {type(jobs.lock).__name__}{running}"

    def _tick(self) -> float:
        if self._closed:  # a closed scheduler sends nothing, whoever ticks it
            return self.max_interval
        if self._jobs is None:
            self.setup_schedule()
        jobs, due = self._registry(), self._due
        now = jobs.clock.now()
        if due and due[0].at <= now:
            # this tick's decisions and next instants, by schedule and instant: a decision
            # depends on nothing else at one ``now``
            self._nexts, self._reaches = _BySchedule(), _BySchedule()
            with jobs.recorder.batch():  # a burst of misses is kept a batch at a time
                while due and due[0].at <= now:
                    self._handle(heapq.heappop(due), now)
            self._dispatch_ready(now)
            self._follow_up(jobs)
            now = jobs.clock.now()
        return self._seconds_until(now, due[0].at if due else None)

    def _seconds_until(self, now: datetime, wake_at: datetime | None) -> float:
        """The exact time left, so beat wakes on the instant rather than up to 1 ms after it.

        Never more than an hour (``sleep_ms``) nor ``max_interval``, never negative.
        """
        seconds = sleep_ms(now, wake_at) / 1000
        if wake_at is not None:
            seconds = min(seconds, max(0.0, (wake_at - now).total_seconds()))
        return min(seconds, self.max_interval)

    def _drop_waiting(self, jobs: CeleryJobs) -> None:
        waiting = [entry for entry in self._due if entry.kind is _Kind.WAITING]
        self._due = [entry for entry in self._due if entry.kind is not _Kind.WAITING]
        heapq.heapify(self._due)
        for entry in waiting:
            if entry.occurrence is not None:
                entry.occurrence.move(Event.DROPPED)
                jobs.recorder.record(
                    not_run(entry.job.name, entry.occurrence.scheduled_at, Outcome.MISSED)
                )

    def _registry(self) -> CeleryJobs:
        if self._jobs is None:
            raise LookupError("the scheduler is not set up: setup_schedule() reads the jobs")
        return self._jobs

    def _handle(self, entry: _Entry, now: datetime) -> None:
        """Handle one wake-up; an error is logged and costs this occurrence only."""
        try:
            if entry.kind is _Kind.DUE:
                self._reach(entry.job, entry.at, now)
            elif entry.kind is _Kind.WAITING:
                assert entry.occurrence is not None  # pushed with its occurrence
                self._ready.append((entry.job, entry.occurrence))
            else:
                self._resume(entry.job, entry.at, None)
        except Exception:
            logger.exception(
                "beat: could not handle %s of %s at %s",
                entry.kind.value,
                entry.job.name,
                iso_ms(entry.at),
            )

    def _resume(
        self,
        job: CeleryJob,
        now: datetime,
        checkpoint: datetime | None,
        plans: _BySchedule[StartPlan] | None = None,
        push: Callable[[_Entry], None] | None = None,
    ) -> None:
        """Push the job's first instant (recording the gap since its checkpoint), or retry later.

        ``plans``: the plans already made at this ``now``, by schedule and checkpoint (a plan
        depends on nothing else). ``push``: how the first instant joins the heap (the set-up
        appends, then heapifies once).
        """
        jobs = self._registry()
        plan = None if plans is None else plans.get(job.schedule, checkpoint)
        if plan is None:
            try:
                plan = plan_start(job.schedule, now, checkpoint, jobs.rules)
            except Exception:
                logger.exception("beat: cannot compute the next instant of %s", job.name)
                self._retry(job, now)
                return
            if plans is not None:
                plans.put(job.schedule, checkpoint, plan)
        if plan.missed is not None and plan.dropped_until is not None:
            self._mark_handled(job, plan.dropped_until)
            # A system job's gap is only the restart's: its next pass does what the missed
            # ones would have, so it is not worth a WARNING at each start.
            quiet = job.inline is not None
            jobs.recorder.record(not_run(job.name, plan.missed, Outcome.MISSED), quiet=quiet)
        if push is None:
            self._push(plan.first_due, _Kind.DUE, job)
        else:
            push(_Entry(plan.first_due, next(self._seq), _Kind.DUE, job, None))

    def _retry(self, job: CeleryJob, now: datetime) -> None:
        """Compute the job's next instant again later: a failing schedule stops only itself."""
        self._push(now + timedelta(milliseconds=RETRY_MS), _Kind.RESUME, job)

    def _reach(self, job: CeleryJob, due: datetime, now: datetime) -> None:
        """Decide what the instant ``due`` becomes, and push the job's next instant first."""
        jobs = self._registry()
        self._settle_leases(job, now)
        try:
            decision = self._reaches.get(job.schedule, due)
            if decision is None:
                decision = reach(job.schedule, due, now, jobs.rules)
                self._reaches.put(job.schedule, due, decision)
        except Exception:
            logger.exception(
                "beat: cannot decide the occurrence of %s at %s", job.name, iso_ms(due)
            )
            self._retry(job, now)
            return
        try:
            following = self._nexts.get(job.schedule, decision.resume_after)
            if following is None:
                following = next_occurrence(job.schedule, decision.resume_after)
                self._nexts.put(job.schedule, decision.resume_after, following)
            self._push(following, _Kind.DUE, job)
        except Exception:
            logger.exception("beat: cannot compute the next instant of %s", job.name)
            self._retry(job, now)
        if decision.missed is not None:
            self._mark_handled(job, decision.resume_after)
            jobs.recorder.record(not_run(job.name, decision.missed, Outcome.MISSED))
        if decision.run is None:
            return
        occurrence = Occurrence(job.name, decision.run, _REACHED_ON_TIME)
        delay = jitter_delay_ms(job.schedule.options, self._random)
        if delay:
            self._push(decision.run + timedelta(milliseconds=delay), _Kind.WAITING, job, occurrence)
        else:
            self._ready.append((job, occurrence))

    def _dispatch_ready(self, now: datetime) -> None:
        """Begin and publish every occurrence whose instant (and jitter) came this tick.

        ``DISPATCH_BATCH`` at a time: one call to the stores begins them all (``begin``: each
        its own lock, checkpoint and claim, and the leases no beat can still want released),
        then one held producer publishes them, a kombu publish batch where the broker has one;
        the records of what is not sent are kept together (``RunRecorder.batch``). The pauses
        are read first, once for them all (``BeatPauses``). While one batch is published, the
        next is begun on a thread (``beat_batches``).

        Every beat reaches the same occurrences in the same order: walked from the first, each
        batch would be raced for by every beat, and each would pay for a whole burst. So each
        walks the batches from a place of its own (``spread``), and past a batch mostly held by
        another beat, from another place among those it has left: the beats share the burst
        out. Every beat still begins every batch, so the locks alone decide who sends what.

        Beat stopped on the way (SIGTERM and Ctrl-C raise ``SystemExit`` or
        ``KeyboardInterrupt`` wherever beat is, a send to a broker that does not answer
        included) records each occurrence of a batch begun but not yet sent ``failed``,
        ``JOB_ABORTED``, and ends its claim in the run state, so no later occurrence is skipped
        behind a run that never comes. Then beat stops. The locks stay taken: a message may
        have left, so no other beat sends it.
        """
        ready, self._ready = self._ready, []
        if not ready:
            return
        paused = self._pauses.read(self._registry(), self._outages)
        recorder = self._registry().recorder
        starts = deque(range(0, len(ready), DISPATCH_BATCH))
        if len(starts) > 1:
            starts.rotate(-self._spread(len(starts)))

        def asked() -> Batch:
            start = starts.popleft()
            return self._asked(ready[start : start + DISPATCH_BATCH], paused, len(starts) + 1)

        pending: list[Batch] = []
        try:
            while starts or pending:
                if not pending:
                    pending.append(asked())
                    pending[0].released = self._begin(pending[0])
                batch = pending[0]
                self._ahead.wait(batch)
                if batch.held * 2 > len(batch.items) and len(starts) > 1:
                    starts.rotate(-self._spread(len(starts)))
                if starts:
                    pending.append(asked())
                    self._ahead.start(pending[1], self._begin)
                with recorder.batch():
                    self._conclude(batch, now, paused)
                pending.pop(0)
        except (KeyboardInterrupt, SystemExit) as stopping:
            for batch in pending:
                self._interrupted(batch, stopping)
            raise

    def _asked(
        self,
        items: list[tuple[CeleryJob, Occurrence]],
        paused: Mapping[str, Pause],
        batches_left: int,
    ) -> Batch:
        """What the stores are asked for ``items``. ``batches_left``: this batch and those
        after it this tick, which share the leases to release."""
        beginnings = [
            self._beginning(job, occurrence, job.name in paused) for job, occurrence in items
        ]
        # The leases to release ride on the batches, a share each: the minute after a burst,
        # its 100,000 leases in the first begin would make one script that holds Redis.
        share = -(-len(self._releasing) // batches_left)
        releasing, self._releasing = self._releasing[:share], self._releasing[share:]
        return Batch(items, beginnings, releasing)

    def _begin(self, batch: Batch) -> list[Exception | None] | None:
        """Ask the stores; None if they could not be asked at all (logged)."""
        try:
            return (
                self._registry()
                .occurrences()
                .begin(batch.beginnings, releasing=[lease for _, lease in batch.releasing])
            )
        except Exception:
            logger.exception("beat: could not begin %d occurrences", len(batch.items))
            return None

    def _conclude(self, batch: Batch, now: datetime, paused: Mapping[str, Pause]) -> None:
        """Move each occurrence of a begun batch on what the stores answered; send the tasks
        of those started. Each has its own outcome."""
        if batch.released is None:
            return
        jobs = self._registry()
        self._outages.note(jobs, batch.beginnings)
        for (name, _), error in zip(batch.releasing, batch.released, strict=True):
            if error is not None:
                self._outages.could_not_follow(jobs, name, error, IN_THE_LOCK, jobs.lock)
        sending: list[Sending] = []
        for (job, occurrence), beginning in zip(batch.items, batch.beginnings, strict=True):
            try:
                expires = self._begun(job, occurrence, beginning, now, job.name in paused)
            except Exception:
                logger.exception(
                    "beat: could not handle %s at %s", job.name, iso_ms(beginning.scheduled_at)
                )
                continue
            if expires is not None:
                sending.append(Sending(job, occurrence, beginning, expires))
        self._publish(sending, batch.sent)

    def _interrupted(self, batch: Batch, stopping: BaseException) -> None:
        """Record each occurrence of ``batch`` not sent before the stop, once its begin (which
        may run ahead) answered: only then are its claims known."""
        self._ahead.wait(batch)
        for (job, occurrence), beginning in zip(batch.items, batch.beginnings, strict=True):
            if id(occurrence) not in batch.sent:
                self._record_interrupted(job, occurrence, beginning, stopping)

    def _beginning(self, job: CeleryJob, occurrence: Occurrence, paused: bool) -> Beginning:
        """What the core decided for an occurrence, for the stores to carry out.

        A paused job's occurrence takes its lock and checkpoint but claims nothing: the beat
        that holds the lock records it ``skipped-paused``, the others ``skipped-locked``.
        """
        occurrence.move(Event.JITTER_ELAPSED)
        at = occurrence.scheduled_at
        fixed = self._beginnings.get(job.name)
        if fixed is None:
            rules, options = self._registry().rules, job.schedule.options
            fixed = self._beginnings[job.name] = (
                options.single_instance,
                lock_ttl_ms(options, rules),
                options.overlap is OverlapPolicy.QUEUE,
                run_ttl_ms(options, rules),
            )
        single_instance, lock_ttl, queue, run_ttl = fixed
        return Beginning(
            job=job.name,
            scheduled_at=at,
            lock_key=lock_key(job.name, at) if single_instance else None,
            lock_ttl_ms=lock_ttl,
            # A beat_schedule entry is not claimed: its task is the app's own and never
            # reports that a run ended, as under Celery's beat.
            claim=job.declared and not paused,
            queue=queue,
            run_ttl_ms=run_ttl,
        )

    def _record_interrupted(
        self, job: CeleryJob, occurrence: Occurrence, beginning: Beginning, stopping: BaseException
    ) -> None:
        """Give an occurrence cut short by beat's stop its outcome, and free what it claimed."""
        if occurrence.outcome is not None or occurrence.step is Step.QUEUED:
            return  # recorded before the stop arrived, or left to the run it waits behind
        at = occurrence.scheduled_at
        error = JobAbortedError(
            f"beat stopped ({type(stopping).__name__}) while it sent the occurrence", job=job.name
        )
        self._registry().recorder.record(not_run(job.name, at, Outcome.FAILED, error=error), error)
        if job.declared and beginning.may_have_claimed:
            free_run_state(self._registry(), job, beginning)

    def _begun(
        self,
        job: CeleryJob,
        occurrence: Occurrence,
        beginning: Beginning,
        now: datetime,
        paused: bool,
    ) -> datetime | None:
        """Move the occurrence on what the stores answered; the expiry of its message, if sent."""
        jobs, at = self._registry(), occurrence.scheduled_at
        if beginning.failed_in == IN_THE_LOCK:
            occurrence.move(Event.LOCK_UNAVAILABLE)
            self._mark_handled(job, at)
            self._record_unavailable(job, at, _error(beginning), "the lock")
            return None
        if beginning.lock_held:
            # The checkpoint is left to the holder of the lock: one write per occurrence.
            occurrence.move(Event.LOCK_HELD)
            if jobs.recorder.heard(Outcome.SKIPPED_LOCKED):
                jobs.recorder.record(not_run(job.name, at, Outcome.SKIPPED_LOCKED))
            return None
        lease = beginning.lease
        if lease is not None:
            occurrence.move(Event.LOCK_TAKEN)
            self._leases.setdefault(job.name, deque()).append((at, lease))
        else:
            occurrence.move(Event.LOCK_NOT_NEEDED)
        if beginning.checkpointed:
            self._checkpointed(job, at)
        else:
            self._mark_handled(job, at)
        if paused:
            occurrence.move(Event.PAUSED)
            jobs.recorder.record(not_run(job.name, at, Outcome.SKIPPED_PAUSED))
            return None
        if beginning.failed_in is not None:
            occurrence.move(Event.LOCK_UNAVAILABLE)
            self._record_unavailable(job, at, _error(beginning), "the run state")
            return None
        claim = beginning.claimed if job.declared else self._system_jobs.claim(job, at)
        if claim is Claim.BUSY:
            occurrence.move(Event.BUSY)
            jobs.recorder.record(not_run(job.name, at, Outcome.SKIPPED_OVERLAP))
            return None
        if claim is Claim.QUEUED:
            # Nothing to send now: the worker that ends the run in progress sends this one.
            occurrence.move(Event.QUEUED)
            return None
        occurrence.move(Event.STARTED)
        if lease is None:
            return now + timedelta(milliseconds=beginning.lock_ttl_ms)
        return lease.expires_at

    def _publish(self, sending: list[Sending], sent: set[int]) -> None:
        """Hand the system jobs (``inline``) to their thread, then publish the others' tasks.

        A system job never runs on the tick's path: its store may hang (``beat_system_jobs``).
        The tasks leave through one producer held for them all (``beat_publishing``). ``sent``
        receives each occurrence once handed over or once its message has left.
        """
        jobs, tasks = self._registry(), []
        for item in sending:
            if item.job.inline is not None:
                self._system_jobs.hand_over(jobs, item.job, item.job.inline, item.occurrence)
                sent.add(id(item.occurrence))
            else:
                tasks.append(item)
        self._publisher.publish(jobs, tasks, sent)

    def _record_unavailable(
        self, job: CeleryJob, at: datetime, cause: Exception, store: str
    ) -> None:
        error = JobLockUnavailableError(f"{store} could not be asked; nothing sent", job=job.name)
        error.__cause__ = cause
        self._registry().recorder.record(not_run(job.name, at, Outcome.FAILED, error=error), error)

    def _settle_leases(self, job: CeleryJob, now: datetime) -> None:
        """Plan the release of leases no beat can still want.

        A beat reaches an instant on time up to ``late_after_ms`` after it, then waits its
        jitter before asking the lock, so a lease is kept that long: released earlier, a beat
        that lags could take the same occurrence again. A lease that already expired is
        forgotten without a round trip.
        """
        held = self._leases.get(job.name)
        if not held:
            return
        rules, options = self._registry().rules, job.schedule.options
        while held and release_after(held[0][0], options, rules) < now:
            _, lease = held.popleft()
            if lease.expires_at > now:
                self._releasing.append((job.name, lease))

    def _mark_handled(self, job: CeleryJob, at: datetime) -> None:
        _keep_latest(self._handled, job.name, at)

    def _checkpointed(self, job: CeleryJob, at: datetime) -> None:
        _keep_latest(self._checkpoints_kept, job.name, at)

    def _follow_up(self, jobs: CeleryJobs) -> None:
        """Write checkpoints and release leases once the tick's tasks are sent.

        After the sends, so no occurrence of this tick waits behind these round trips. A store
        that fails is logged; the job goes on.
        """
        handled, self._handled = self._handled, {}
        kept, self._checkpoints_kept = self._checkpoints_kept, {}
        releasing, self._releasing = self._releasing, []
        if jobs.checkpoints is not None:
            for name, at in handled.items():
                if name in kept and kept[name] >= at:
                    continue  # written with the lock (``begin``)
                try:
                    jobs.checkpoints.write(name, at)
                except Exception as error:
                    self._outages.could_not_follow(jobs, name, error, CHECKPOINTS, jobs.checkpoints)
                else:
                    self._outages.up(jobs, CHECKPOINTS, jobs.checkpoints)
        for name, lease in releasing:
            try:
                jobs.lock.release(lease)
            except Exception as error:
                self._outages.could_not_follow(jobs, name, error, IN_THE_LOCK, jobs.lock)

    def _checkpoints(
        self, jobs: CeleryJobs, enabled: list[CeleryJob]
    ) -> dict[str, datetime | None]:
        """The checkpoints of ``enabled`` jobs, read in batches (``read_many``).

        A store that cannot be asked is logged for each job, which starts from now, and its
        outage begins (``StoreOutages.down``: where it is and why, once).
        """
        if jobs.checkpoints is None or not enabled:
            return {}
        try:
            return jobs.checkpoints.read_many(job.name for job in enabled)
        except Exception as error:
            self._outages.down(jobs, CHECKPOINTS, jobs.checkpoints, error)
            for job in enabled:
                jobs.recorder.could_not_follow(job.name, error, what="read the checkpoint")
            return {}

    def _push(
        self, at: datetime, kind: _Kind, job: CeleryJob, occurrence: Occurrence | None = None
    ) -> None:
        heapq.heappush(self._due, _Entry(at, next(self._seq), kind, job, occurrence))


def _keep_latest(instants: dict[str, datetime], name: str, at: datetime) -> None:
    """Keep ``at`` for ``name`` unless a later instant is kept."""
    current = instants.get(name)
    if current is None or at > current:
        instants[name] = at


def _log_overrides(jobs: CeleryJobs) -> None:
    """One INFO line per job whose settings change its declared schedule: the declared one and
    the one it runs on, each with the options that differ between them.

    Past ``LISTED_AT_START`` jobs, one line says how many more there are.
    """
    overridden = sorted(
        (job for job in jobs.jobs.values() if job.declared_schedule is not None),
        key=lambda job: job.name,
    )
    for job in overridden[:LISTED_AT_START]:
        assert job.declared_schedule is not None
        declared, effective = _compared(job.declared_schedule, job.schedule)
        logger.info(
            "beat: settings override the declared schedule of %s: declared %s, runs on %s",
            job.name,
            declared,
            effective,
            extra={"job": job.name, "declared": declared, "effective": effective},
        )
    if len(overridden) > LISTED_AT_START:
        logger.info(
            "beat: the settings of %d more jobs override their declared schedules",
            len(overridden) - LISTED_AT_START,
            extra={"jobs": len(overridden)},
        )


def _compared(declared: ParsedJobSchedule, effective: ParsedJobSchedule) -> tuple[str, str]:
    """Each schedule's description, followed by the options in which the two differ."""
    before, after = asdict(declared.options), asdict(effective.options)
    differ = [name for name in before if before[name] != after[name]]

    def described(schedule: ParsedJobSchedule, options: dict[str, Any]) -> str:
        if not differ:
            return schedule.description
        values = ", ".join(f"{name}={_option(options[name])}" for name in differ)
        return f"{schedule.description} ({values})"

    return described(declared, before), described(effective, after)


def _option(value: Any) -> str:
    return str(value.value if isinstance(value, Enum) else value).lower()


def _count(count: int, noun: str) -> str:
    """``1 job``, ``2 jobs``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _error(beginning: Beginning) -> Exception:
    """The error a store answered with (``failed_in`` is only set with one)."""
    assert beginning.error is not None
    return beginning.error


def _job_name_or_none(entry_name: str) -> str | None:
    try:
        return job_name_of(entry_name)
    except BeatScheduleEntryError:
        return None
