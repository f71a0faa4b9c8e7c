"""The relay: the system job beat runs to publish background jobs whose time has come.

A delayed job, a retry after its backoff and a wake-up that was never confirmed all wait in the
``JobStore``, not in the broker: a Celery ``eta``/``countdown`` lives in a worker's memory and,
on Redis, comes back only after the visibility timeout. So once a second (by default) beat runs
the relay in its own process, under the per-occurrence lock ``job:ddd_celery.relay:<instant>``
like any job, so that several beats relay each instant once:

1. ``expire_leases``: a running job whose worker died (its lease ran out) is handed back,
   failed and due now, or dead when its attempts are spent;
2. ``take_due``: the jobs due now that no message woke yet, or whose message was not followed
   by a claim within ``redispatch_after_ms``, marked dispatched by the same query;
3. each is published, the job id only, through one producer connection held for the tick, a
   batch at a time (one Redis pipeline where kombu batches publishes).

4. ``purge_finished``: the finished jobs older than their retention (``Retention``: succeeded
   and cancelled jobs a week by default, dead ones kept) are deleted, oldest first, in what is
   left of the pass's ``purge_budget_ms`` once the due jobs are published.

Each step goes batch by batch until a batch comes back short, at most ``max_batches`` a tick:
what is left waits for the next tick instead of holding beat. A publish that fails leaves the
rest of its batch marked dispatched: the relay publishes them again after
``redispatch_after_ms``, as it would a lost message. A purge that fails is said once and
tried again a minute later; it never stops a pass from publishing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ddd_celery.background.observability import DEFAULT_LOGGER, log_lease_expired
from ddd_celery.background.store import (
    FINISHED_STATUSES,
    JobStatus,
    JobStore,
    StoredJob,
    dropped_of,
)
from ddd_celery.celery.background.publisher import send_wakeups
from ddd_celery.celery.config import DEFAULT_PURGE_BATCH, JobsConfig, app_config
from ddd_celery.celery.registry import CeleryJob
from ddd_celery.declarations.schedule import parse_job_schedule
from ddd_celery.kernel.clock import Clock
from ddd_celery.kernel.instants import iso_ms
from ddd_celery.kernel.metrics import Metrics, NoMetrics

RELAY_JOB = "ddd_celery.relay"
"""The relay's job name: its lock key is ``job:ddd_celery.relay:<instant>``."""
DEFAULT_RELAY_EVERY_MS = 1_000
DEFAULT_RELAY_BATCH = 500
DEFAULT_RELAY_MAX_BATCHES = 20
DEFAULT_REDISPATCH_AFTER_MS = 30_000
"""Thirty seconds, about a lease: a wake-up a SIGKILLed worker had prefetched stays in kombu's
unacked set for the visibility timeout (an hour on Redis), so the job runs again only when the
relay re-sends it; five minutes here kept every such job waiting five minutes. A job waiting in
a healthy backlog longer than this is re-sent too, its extra wake-up finding it claimed; the
store spaces each further re-send of the same job (2x, 4x... capped at 8x), so a long backlog is
not flooded."""
RELAY_TICK = "Relay: %d expired leases handed back, %d background jobs published"
"""The relay's line for each tick: INFO when it handed back or published, DEBUG otherwise (a
line a second saying nothing was due would drown beat's log)."""
RELAY_TIMEOUT_MS = 30_000
"""The relay's ``timeout_ms``: it bounds how long its lock is kept, not the run itself."""
DEFAULT_PURGE_BUDGET_MS = DEFAULT_RELAY_EVERY_MS // 4
"""How far into a pass the relay purges (``install_background_jobs`` gives a quarter of its
period): the last batch started before it ends well before the next pass is due, so purging
never makes a pass overlap the next and its due jobs wait."""
PURGE_IDLE_MS = 60_000
"""After a purge that found nothing more to delete (or failed), the next is a minute later: a
job is purged within a minute of its retention, and an idle relay asks nothing more of the
store than it did before retention."""
PURGED_COUNTER = "background_jobs_purged_total"
"""Jobs the relay purged for their retention, labelled by ``status``."""
PURGED = "Relay: purged %d finished background jobs (%s)"
"""INFO, once per pass that purged something: by status, and the instant each was kept until."""
PURGE_FAILED = (
    "Relay: the purge of finished background jobs failed (%s); publishing goes on and the "
    "purge is tried again in %d s; the next that fail the same way are not said, until one "
    "succeeds"
)
"""ERROR, once per run of failures (again when the error's type changes), naming the error's
type and code only: its message may quote data."""
PURGE_RECOVERED = "Relay: the purge of finished background jobs succeeded again; %d failed since %s"
"""WARNING, when a purge succeeds after failures."""


@dataclass(frozen=True, slots=True)
class Retention:
    """How long the relay keeps finished jobs, by status; a status left out is kept until it is
    purged by hand (a dead one by default, for ``retry-dead``)."""

    keep_ms: Mapping[JobStatus, int]
    batch: int = DEFAULT_PURGE_BATCH
    """Jobs one ``purge_finished`` call deletes at most; 0 turns the relay's purge off."""

    def __post_init__(self) -> None:
        for status, keep_ms in self.keep_ms.items():
            if status not in FINISHED_STATUSES:
                raise ValueError(f"only finished jobs are purged, not {status.value!r} ones")
            if isinstance(keep_ms, bool) or not isinstance(keep_ms, int) or keep_ms <= 0:
                raise ValueError(f"a retention must be a positive int of ms, not {keep_ms!r}")
        batch = self.batch
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 0:
            raise ValueError(f"the purge's batch must be an int, 0 or more, not {batch!r}")

    @classmethod
    def of(cls, config: JobsConfig) -> Retention:
        """The retention ``ddd_celery_keep_*_ms`` and ``ddd_celery_purge_batch`` describe."""
        kept = {
            JobStatus.SUCCEEDED: config.keep_succeeded_ms,
            JobStatus.CANCELLED: config.keep_cancelled_ms,
            JobStatus.DEAD: config.keep_dead_ms,
        }
        return cls(
            {status: ms for status, ms in kept.items() if ms is not None},
            batch=config.purge_batch,
        )


@dataclass(frozen=True, slots=True)
class RelayTick:
    """What one run of the relay did."""

    expired: int
    published: int
    dropped: int = 0
    """Index entries the store dropped because their job's record was gone."""
    purged: Mapping[JobStatus, int] = field(default_factory=dict)
    """The finished jobs purged for their retention, by status (a status purging nothing
    this pass, or not purged, left out)."""


VANISHED = (
    "Relay: %d index entries named background jobs whose record is gone (evicted or deleted): "
    "dropped, those jobs are lost"
)
"""Said at WARNING: a Redis that evicts keys (``maxmemory-policy``) loses jobs; the pass goes on."""


class Relay:
    """Hands back expired leases and publishes the due jobs' wake-ups, batch by batch."""

    def __init__(
        self,
        app: Any,
        store: JobStore,
        clock: Clock,
        *,
        batch: int = DEFAULT_RELAY_BATCH,
        max_batches: int = DEFAULT_RELAY_MAX_BATCHES,
        redispatch_after_ms: int = DEFAULT_REDISPATCH_AFTER_MS,
        logger: logging.Logger | None = None,
        retention: Retention | None = None,
        purge_budget_ms: int = DEFAULT_PURGE_BUDGET_MS,
        metrics: Metrics | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``retention`` None: the app's ``ddd_celery_*`` settings, read at the first purge
        (settings may be given after the wiring). ``monotonic`` is how the pass's time is
        measured against ``purge_budget_ms``."""
        for name, value in (
            ("batch", batch),
            ("max_batches", max_batches),
            ("redispatch_after_ms", redispatch_after_ms),
            ("purge_budget_ms", purge_budget_ms),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"the relay's {name} must be a positive int, not {value!r}")
        self._app = app
        self._store = store
        self._clock = clock
        self._batch = batch
        self._max_batches = max_batches
        self._redispatch_after_ms = redispatch_after_ms
        self._logger = logger or logging.getLogger(DEFAULT_LOGGER)
        self._retention = retention
        self._purge_budget_s = purge_budget_ms / 1000
        self._metrics = metrics or NoMetrics()
        self._monotonic = monotonic
        self._next_purge: datetime | None = None
        self._purge_failures = 0
        self._purge_failing: tuple[datetime, str] | None = None
        """Since when the purges fail, and the type of the last error."""

    def run(self) -> RelayTick:
        """One tick at the clock's ``now``; raises what the store or the broker raised, but
        never what the purge did (said, and tried again later)."""
        started = self._monotonic()
        now = self._clock.now()
        expired = dropped = 0
        for _ in range(self._max_batches):
            handed_back = self._store.expire_leases(now=now, limit=self._batch)
            expired += len(handed_back)
            dropped += dropped_of(handed_back)
            for job in handed_back:
                self._expired(job)
            if len(handed_back) < self._batch:
                break
        published = 0
        with self._app.producer_or_acquire() as producer:
            for _ in range(self._max_batches):
                due = self._store.take_due(
                    now=now, limit=self._batch, redispatch_after_ms=self._redispatch_after_ms
                )
                send_wakeups(self._app, due, producer)
                published += len(due)
                dropped += dropped_of(due)
                if len(due) < self._batch:
                    break
        if dropped:
            self._logger.warning(VANISHED, dropped, extra={"job": RELAY_JOB, "dropped": dropped})
        self._logger.log(
            logging.INFO if expired or published else logging.DEBUG,
            RELAY_TICK,
            expired,
            published,
            extra={"job": RELAY_JOB, "expired": expired, "published": published},
        )
        purged = self._purge(now, started) if self._purge_due(now) else {}
        return RelayTick(expired=expired, published=published, dropped=dropped, purged=purged)

    def _expired(self, job: StoredJob) -> None:
        """Log a job whose worker was lost: ``failed`` (to run again) or ``dead``."""
        log_lease_expired(self._logger, job)

    def _purge_due(self, now: datetime) -> bool:
        return self._next_purge is None or now >= self._next_purge

    def _purge(self, now: datetime, started: float) -> dict[JobStatus, int]:
        """Purge what the retention asks; a pass that left some status full purges again at
        the next pass, otherwise (or after a failure) ``PURGE_IDLE_MS`` later."""
        purged: dict[JobStatus, int] = {}
        before: dict[JobStatus, datetime] = {}
        full = False
        try:
            before, batch = self._cutoffs(now)
            full = self._purge_batches(before, batch, started, purged)
        except Exception as error:  # the purge's own: publishing went on, the pass succeeds
            self._purge_failed(now, error)
        else:
            self._purge_recovered(now)
        self._next_purge = now if full else now + timedelta(milliseconds=PURGE_IDLE_MS)
        if purged:
            self._said_purged(purged, before)
        return purged

    def _cutoffs(self, now: datetime) -> tuple[dict[JobStatus, datetime], int]:
        """The instant before which each status with a retention is purged (none when the
        purge is off), and the batch."""
        if self._retention is None:
            self._retention = Retention.of(app_config(self._app))
        retention = self._retention
        if retention.batch == 0:
            return {}, 0
        keep_ms = retention.keep_ms
        return {s: now - timedelta(milliseconds=ms) for s, ms in keep_ms.items()}, retention.batch

    def _purge_batches(
        self,
        before: Mapping[JobStatus, datetime],
        batch: int,
        started: float,
        purged: dict[JobStatus, int],
    ) -> bool:
        """Batch by batch, each status in turn, adding to ``purged``, until every status came
        back short (False), or ``max_batches`` calls were made or the budget is spent while
        some status may hold more (True)."""
        left, calls = list(before), 0
        while left:
            for status in list(left):
                if calls >= self._max_batches or not self._within_budget(started):
                    return True
                deleted = self._store.purge_finished(
                    before=before[status], statuses=(status,), limit=batch
                )
                calls += 1
                if deleted:
                    purged[status] = purged.get(status, 0) + deleted
                if deleted < batch:
                    left.remove(status)
        return False

    def _within_budget(self, started: float) -> bool:
        return self._monotonic() - started < self._purge_budget_s

    def _said_purged(
        self, purged: Mapping[JobStatus, int], before: Mapping[JobStatus, datetime]
    ) -> None:
        """One INFO line for the pass and the counter, by status."""
        by_instant: dict[datetime, list[str]] = {}
        for status, count in purged.items():
            by_instant.setdefault(before[status], []).append(f"{status.value} {count}")
            self._metrics.increment(PURGED_COUNTER, {"status": status.value}, count)
        parts = "; ".join(
            f"{', '.join(counts)} finished before {iso_ms(at)}" for at, counts in by_instant.items()
        )
        total = sum(purged.values())
        self._logger.info(
            PURGED,
            total,
            parts,
            extra={
                "job": RELAY_JOB,
                "purged": total,
                "purged_by_status": {status.value: count for status, count in purged.items()},
            },
        )

    def _purge_failed(self, now: datetime, error: Exception) -> None:
        self._purge_failures += 1
        kind = type(error).__name__
        if self._purge_failing is None or self._purge_failing[1] != kind:
            code = getattr(error, "code", None)
            self._logger.error(
                PURGE_FAILED,
                kind if not isinstance(code, str) else f"{kind}, {code}",
                PURGE_IDLE_MS // 1000,
                extra={"job": RELAY_JOB, "error_type": kind, "error_code": code},
            )
        self._purge_failing = (self._purge_failing[0] if self._purge_failing else now, kind)

    def _purge_recovered(self, now: datetime) -> None:
        if self._purge_failing is not None:
            self._logger.warning(
                PURGE_RECOVERED,
                self._purge_failures,
                iso_ms(self._purge_failing[0]),
                extra={"job": RELAY_JOB, "failed": self._purge_failures},
            )
        self._purge_failures, self._purge_failing = 0, None


def relay_job(relay: Relay, *, every_ms: int = DEFAULT_RELAY_EVERY_MS) -> CeleryJob:
    """The relay as a job beat runs in its own process (``inline``) instead of sending a task.

    Every ``every_ms``, under its lock; an occurrence beat reaches too late is ``missed``, as
    any job's: the next one publishes what it would have. Beat logs its success at DEBUG: the
    relay's own line says what it did.
    """

    def run_relay(scheduled_at: datetime) -> bool:
        relay.run()
        return False  # the relay logged its tick: INFO when it did something, DEBUG otherwise

    return CeleryJob(
        name=RELAY_JOB,
        schedule=parse_job_schedule({"every": every_ms, "timeout_ms": RELAY_TIMEOUT_MS}),
        task_name=RELAY_JOB,
        queue=None,
        inline=run_relay,
    )
