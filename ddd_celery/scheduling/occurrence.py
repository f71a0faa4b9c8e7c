"""The rules of an occurrence, in one place that does no I/O and never sleeps.

Every driver (the in-process scheduler, the manual one, Celery beat and its workers) hands this
module instants and answers, and gets decisions back: when an occurrence is late and what a gap
of missed ones becomes, how long the jitter waits, the lock key and its time to live, which moves
an occurrence may make. A behaviour proven on one driver therefore holds on the others.

An occurrence moves through the steps of ``MOVES``::

    scheduled --reached--> due --late--> missed
                            due --on_time--> waiting --jitter_elapsed--> locking
    waiting --dropped--> missed
    locking --lock_taken | lock_not_needed--> claiming    locking --lock_held--> skipped-locked
    locking --lock_unavailable--> failed    claiming --lock_unavailable--> failed
    claiming --started--> running   claiming --queued--> queued   claiming --busy--> skipped-overlap
    claiming --paused--> skipped-paused
    queued --promoted--> running    queued --dropped--> missed
    running --succeeded--> succeeded    running --failed--> failed
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from ddd_celery.declarations.cron_evaluator import latest_occurrence, next_occurrence
from ddd_celery.declarations.options import JobOptions, MissedPolicy
from ddd_celery.declarations.schedule import ParsedJobSchedule
from ddd_celery.kernel.errors import DddCeleryError
from ddd_celery.kernel.instants import iso_ms, require_aware
from ddd_celery.scheduling.outcomes import Outcome

DEFAULT_LATE_AFTER_MS = 60_000
DEFAULT_LOCK_TTL_MS = 15 * 60_000
DEFAULT_GRACE_MS = 30_000
MAX_SLEEP_MS = 60 * 60_000
"""A driver sleeps at most an hour, so a corrected clock or a suspended machine is noticed."""

_TICK = timedelta(microseconds=1)


class Step(StrEnum):
    """Where an occurrence is; the terminal steps are the outcomes."""

    SCHEDULED = "scheduled"
    DUE = "due"
    WAITING = "waiting"
    LOCKING = "locking"
    CLAIMING = "claiming"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = Outcome.SUCCEEDED.value
    FAILED = Outcome.FAILED.value
    SKIPPED_OVERLAP = Outcome.SKIPPED_OVERLAP.value
    SKIPPED_LOCKED = Outcome.SKIPPED_LOCKED.value
    MISSED = Outcome.MISSED.value
    SKIPPED_PAUSED = Outcome.SKIPPED_PAUSED.value

    @property
    def outcome(self) -> Outcome | None:
        """The outcome of a terminal step, None while the occurrence is in flight."""
        return Outcome(self.value) if self.value in _OUTCOMES else None


_OUTCOMES = frozenset(outcome.value for outcome in Outcome)


class Event(StrEnum):
    """What a driver learned about an occurrence."""

    REACHED = "reached"
    ON_TIME = "on_time"
    LATE = "late"
    JITTER_ELAPSED = "jitter_elapsed"
    LOCK_TAKEN = "lock_taken"
    LOCK_NOT_NEEDED = "lock_not_needed"
    LOCK_HELD = "lock_held"
    LOCK_UNAVAILABLE = "lock_unavailable"
    STARTED = "started"
    QUEUED = "queued"
    BUSY = "busy"
    PAUSED = "paused"
    PROMOTED = "promoted"
    DROPPED = "dropped"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


MOVES: dict[tuple[Step, Event], Step] = {
    (Step.SCHEDULED, Event.REACHED): Step.DUE,
    (Step.DUE, Event.LATE): Step.MISSED,
    (Step.DUE, Event.ON_TIME): Step.WAITING,
    (Step.WAITING, Event.JITTER_ELAPSED): Step.LOCKING,
    (Step.WAITING, Event.DROPPED): Step.MISSED,
    (Step.LOCKING, Event.LOCK_TAKEN): Step.CLAIMING,
    (Step.LOCKING, Event.LOCK_NOT_NEEDED): Step.CLAIMING,
    (Step.LOCKING, Event.LOCK_HELD): Step.SKIPPED_LOCKED,
    (Step.LOCKING, Event.LOCK_UNAVAILABLE): Step.FAILED,
    (Step.CLAIMING, Event.LOCK_UNAVAILABLE): Step.FAILED,
    (Step.CLAIMING, Event.STARTED): Step.RUNNING,
    (Step.CLAIMING, Event.QUEUED): Step.QUEUED,
    (Step.CLAIMING, Event.BUSY): Step.SKIPPED_OVERLAP,
    (Step.CLAIMING, Event.PAUSED): Step.SKIPPED_PAUSED,
    (Step.QUEUED, Event.PROMOTED): Step.RUNNING,
    (Step.QUEUED, Event.DROPPED): Step.MISSED,
    (Step.RUNNING, Event.SUCCEEDED): Step.SUCCEEDED,
    (Step.RUNNING, Event.FAILED): Step.FAILED,
}
"""Every legal move of an occurrence; the diagram in the docs is drawn from this table."""


class IllegalMoveError(DddCeleryError, RuntimeError):
    """A driver asked for a move the table does not have; the occurrence did not change."""


@dataclass(slots=True)
class Occurrence:
    """One instant of one job on its way to an outcome."""

    job: str
    scheduled_at: datetime
    step: Step = Step.SCHEDULED

    def move(self, event: Event) -> Step:
        """Apply ``event``; raise ``IllegalMoveError`` and change nothing if it is not allowed."""
        target = MOVES.get((self.step, event))
        if target is None:
            raise IllegalMoveError(
                f"{self.job} at {iso_ms(self.scheduled_at)}: {event} in {self.step}"
            )
        self.step = target
        return target

    @property
    def outcome(self) -> Outcome | None:
        return self.step.outcome


@dataclass(frozen=True, slots=True)
class SchedulerRules:
    """The options of a scheduler that the occurrence rules read."""

    late_after_ms: int = DEFAULT_LATE_AFTER_MS
    lock_ttl_ms: int = DEFAULT_LOCK_TTL_MS

    def __post_init__(self) -> None:
        for name in ("late_after_ms", "lock_ttl_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int of milliseconds, not {value!r}")


def lock_key(job: str, scheduled_at: datetime) -> str:
    """``job:<name>:<instant>``, the instant in ISO 8601 UTC with milliseconds and ``Z``."""
    if scheduled_at.tzinfo is UTC:
        return f"job:{job}:{_utc_iso_ms(scheduled_at)}"
    return f"job:{job}:{iso_ms(scheduled_at)}"


@functools.lru_cache(maxsize=256)
def _utc_iso_ms(instant: datetime) -> str:
    """``iso_ms`` of UTC instants many jobs share: a burst's 100,000 lock keys name one instant.

    UTC only: two instants of a zone's repeated hour (``fold``) compare and hash equal.
    """
    return iso_ms(instant)


def lock_ttl_ms(options: JobOptions, rules: SchedulerRules) -> int:
    """How long the lock of an occurrence lives: the run's bound plus jitter and lateness.

    It is not released when the run ends: an instance whose timer fires a little later must
    still find it taken.
    """
    return (options.timeout_ms or rules.lock_ttl_ms) + options.jitter_ms + rules.late_after_ms


def release_after(scheduled_at: datetime, options: JobOptions, rules: SchedulerRules) -> datetime:
    """When the lock of an occurrence may be released: once no instance can still run it.

    An instance reaches an instant on time up to ``late_after_ms`` after it, then waits its
    jitter before asking the lock. Released earlier (at the next occurrence of a job of every
    second, say), the lock would let an instance that lags run the occurrence again. A driver
    releases the leases it holds past this instant when it handles the job's next occurrence.
    """
    return scheduled_at + timedelta(milliseconds=rules.late_after_ms + options.jitter_ms)


def run_ttl_ms(options: JobOptions, rules: SchedulerRules) -> int:
    """How long a run counts as in progress when its end is never reported (a dead worker).

    Its bound plus ``late_after_ms``: a run freed at the instant of its timeout must still be
    found in progress, so that finishing it promotes the occurrence queued behind it.
    """
    return (options.timeout_ms or rules.lock_ttl_ms) + rules.late_after_ms


def jitter_delay_ms(options: JobOptions, random: Callable[[], float]) -> int:
    """A delay in [0, jitter_ms) drawn with ``random`` (a float in [0, 1))."""
    if options.jitter_ms <= 0:
        return 0
    return min(options.jitter_ms - 1, math.floor(random() * options.jitter_ms))


def is_late(scheduled_at: datetime, now: datetime, rules: SchedulerRules) -> bool:
    """Reached later than ``late_after_ms`` after its instant (jitter aside)."""
    return now - scheduled_at > timedelta(milliseconds=rules.late_after_ms)


@dataclass(frozen=True, slots=True)
class StartPlan:
    """What a driver does with a job as it starts: the gap to record, the instant to wait for."""

    missed: datetime | None
    """The first instant of a gap that passed while no driver ran, to record ``missed`` once."""
    dropped_until: datetime | None
    """The last instant of that gap: the checkpoint to write, so the gap is recorded once."""
    first_due: datetime
    """The first instant to reach: the latest one due if it still runs, else the next one."""


def plan_start(
    schedule: ParsedJobSchedule, now: datetime, checkpoint: datetime | None, rules: SchedulerRules
) -> StartPlan:
    """Decide what a start makes of the instants that passed since the last one handled.

    Without a checkpoint a start forgets the past: it waits for the first instant after ``now``.
    With one, the instants after it up to ``now`` are one gap, however short the stop was: only
    the latest of them can still run, never the whole gap one after the other. That latest
    instant is reached by the usual rule (``reach``): on time, it runs; late, it runs with
    ``run-once`` (the catch-up) and is part of the gap otherwise. The older instants are one
    ``missed`` record, or nothing with ``run-once``, whose catch-up covers them. The first
    instant after the start then runs on its time.
    """
    require_aware(now, "now")
    if checkpoint is None:
        return StartPlan(None, None, next_occurrence(schedule, now))
    first = next_occurrence(schedule, checkpoint)
    if first > now:
        return StartPlan(None, None, first)
    latest = latest_occurrence(schedule, after=checkpoint, not_after=now) or first
    runs = not is_late(latest, now, rules) or schedule.options.missed is MissedPolicy.RUN_ONCE
    if runs:
        if first == latest or schedule.options.missed is MissedPolicy.RUN_ONCE:
            return StartPlan(None, None, latest)
        before = latest_occurrence(schedule, after=checkpoint, not_after=latest - _TICK)
        return StartPlan(first, before, latest)
    return StartPlan(first, latest, next_occurrence(schedule, now))


@dataclass(frozen=True, slots=True)
class Reach:
    """What a driver does with the occurrences it reached at once."""

    run: datetime | None
    """The occurrence to carry on with (on time, or the latest of a gap with ``run-once``)."""
    missed: datetime | None
    """The first instant of a gap, to record ``missed`` once; None when nothing is dropped."""
    resume_after: datetime
    """The next instant to wait for is the first one strictly after this."""


def reach(
    schedule: ParsedJobSchedule, due: datetime, now: datetime, rules: SchedulerRules
) -> Reach:
    """Decide what ``due`` (an instant at or before ``now``) becomes.

    On time, it runs. Late, it opens a gap made of every late instant from ``due`` on: dropped
    as one ``missed`` record, or with ``run-once`` the latest of them runs instead. Instants
    after the gap that are still on time are reached one by one afterwards.
    """
    if not is_late(due, now, rules):
        return Reach(run=due, missed=None, resume_after=due)
    threshold = now - timedelta(milliseconds=rules.late_after_ms) - _TICK
    last_late = latest_occurrence(schedule, after=due, not_after=threshold) or due
    if schedule.options.missed is MissedPolicy.RUN_ONCE:
        return Reach(run=last_late, missed=None, resume_after=last_late)
    return Reach(run=None, missed=due, resume_after=last_late)


def sleep_ms(now: datetime, wake_at: datetime | None) -> int:
    """How long a driver sleeps before ``wake_at``: never negative, never more than an hour.

    Rounded up, so a driver that wakes is at or past ``wake_at`` and never spins on zero sleeps.
    """
    if wake_at is None:
        return MAX_SLEEP_MS
    remaining = -((now - wake_at) // timedelta(milliseconds=1))
    return max(0, min(MAX_SLEEP_MS, remaining))
