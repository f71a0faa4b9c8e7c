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

Both steps go batch by batch until a batch comes back short, at most ``max_batches`` a tick:
what is left waits for the next tick instead of holding beat. A publish that fails leaves the
rest of its batch marked dispatched: the relay publishes them again after
``redispatch_after_ms``, as it would a lost message.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ddd_celery.background.observability import DEFAULT_LOGGER, log_lease_expired
from ddd_celery.background.store import JobStore, StoredJob, dropped_of
from ddd_celery.celery.background.publisher import send_wakeup
from ddd_celery.celery.publish_batch import publish_batch
from ddd_celery.celery.registry import CeleryJob
from ddd_celery.declarations.schedule import parse_job_schedule
from ddd_celery.kernel.clock import Clock

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


@dataclass(frozen=True, slots=True)
class RelayTick:
    """What one run of the relay did."""

    expired: int
    published: int
    dropped: int = 0
    """Index entries the store dropped because their job's record was gone."""


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
    ) -> None:
        for name, value in (
            ("batch", batch),
            ("max_batches", max_batches),
            ("redispatch_after_ms", redispatch_after_ms),
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

    def run(self) -> RelayTick:
        """One tick at the clock's ``now``; raises what the store or the broker raised."""
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
                with publish_batch(producer, len(due)):
                    for dispatch in due:
                        send_wakeup(
                            self._app, dispatch.name, dispatch.queue, dispatch.job_id, producer
                        )
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
        return RelayTick(expired=expired, published=published, dropped=dropped)

    def _expired(self, job: StoredJob) -> None:
        """Log a job whose worker was lost: ``failed`` (to run again) or ``dead``."""
        log_lease_expired(self._logger, job)


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
