"""An occurrence's I/O on SQL in one transaction: beat's locks, checkpoints, claims and releases
for a whole batch, a freed claim, the worker's last run with the end of its run.

The statements are the separate stores' own (``LockRows``, ``CheckpointRows``, ``RunRows``,
``LastRunRows``), run on one connection: one BEGIN and one COMMIT (one fsync) per call instead of
one per store asked. Built by ``SqlJobRunState.occurrence_store``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy import Connection, Engine

from ddd_celery.kernel.clock import Clock
from ddd_celery.kernel.lock import Lease, LockUnavailableError
from ddd_celery.scheduling.occurrence_store import IN_THE_LOCK, Beginning, OccurrenceStore, RunEnd
from ddd_celery.scheduling.outcomes import JobRun
from ddd_celery.scheduling.run_state import Claim
from ddd_celery.sql.connection import Connector, to_micros
from ddd_celery.sql.errors import StoreUnavailableError
from ddd_celery.sql.rows import CheckpointRows, LastRunRows, LockRows, RunRows, run_window


class SqlOccurrenceStore(OccurrenceStore):
    """``SqlLock``, ``SqlJobRunState`` and, when given, ``SqlJobCheckpoints`` and
    ``SqlJobLastRuns`` on one database, their tables unchanged, each operation one transaction.

    ``begin`` sweeps the expired locks when due, takes every lock of the batch and releases the
    old leases (one pass, a lease's release after any acquire of its key), then writes the
    checkpoints of the occurrences that go on, then claims their runs. Each row sees the same
    operations in the same order as asking the ports occurrence by occurrence would (a lock held
    elsewhere stops its occurrence there), and each table's rows are taken in key order, so two
    beats beginning overlapping batches on PostgreSQL wait for each other instead of
    deadlocking. The transaction commits whole or not at all: one that fails fails every
    occurrence of the batch in the lock (``failed_in``), the token each would have had kept,
    since a failed COMMIT may still have been written. The lock's expiries are on the lock's
    clock, the runs' on the run state's, as with the separate stores.
    """

    keeps_tokens = True

    def __init__(
        self,
        engine: Engine,
        *,
        lock_clock: Clock,
        run_clock: Clock,
        locks: LockRows,
        runs: RunRows,
        checkpoints: CheckpointRows | None,
        last_runs: LastRunRows | None,
    ) -> None:
        self._locked = Connector(engine, unavailable=LockUnavailableError)
        self._stored = Connector(engine, unavailable=StoreUnavailableError)
        self._lock_clock = lock_clock
        self._run_clock = run_clock
        self._locks = locks
        self._runs = runs
        self._checkpoints = checkpoints
        self._last_runs = last_runs

    def begin(
        self, beginnings: Sequence[Beginning], *, releasing: Sequence[Lease] = ()
    ) -> list[Exception | None]:
        if not beginnings and not releasing:
            return []
        for beginning in beginnings:
            _check(beginning)
        instants = [to_micros(b.scheduled_at, "scheduled_at") for b in beginnings]
        asked_at = self._lock_clock.now()
        lock_now = to_micros(asked_at)
        run_now = to_micros(self._run_clock.now())
        repeated = {index for index, b in enumerate(beginnings) if b.token is not None}
        tokens = [b.token or uuid.uuid4().hex for b in beginnings]
        for beginning, token in zip(beginnings, tokens, strict=True):
            beginning.token = token
            beginning.may_have_claimed = beginning.claim
        try:
            with self._locked.transaction("begin the occurrences due") as connection:
                taken = self._lock(connection, beginnings, tokens, releasing, lock_now)
                claims = self._claim(
                    connection, beginnings, instants, taken, run_now, repeated=repeated
                )
        except Exception as error:
            for beginning in beginnings:
                beginning.error, beginning.failed_in = error, IN_THE_LOCK
            return [error for _ in releasing]
        for index, (beginning, token) in enumerate(zip(beginnings, tokens, strict=True)):
            self._answered(beginning, token, index in taken, claims.get(index), asked_at)
        return [None for _ in releasing]

    def _lock(
        self,
        connection: Connection,
        beginnings: Sequence[Beginning],
        tokens: list[str],
        releasing: Sequence[Lease],
        now: int,
    ) -> set[int]:
        """Acquire the locks, then release the leases, in key order: the occurrences able to go
        on (taken, or asking no lock)."""
        steps: list[tuple[str, int, int]] = [
            (b.lock_key, 0, index) for index, b in enumerate(beginnings) if b.lock_key is not None
        ]
        steps += [(lease.key, 1, index) for index, lease in enumerate(releasing)]
        if self._locks.sweep_due(sum(b.lock_key is not None for b in beginnings)):
            self._locks.sweep(connection, now)
        free = {index for index, b in enumerate(beginnings) if b.lock_key is None}
        for key, released, index in sorted(steps):
            if released:
                self._locks.release(connection, key, releasing[index].token)
                continue
            expires_at = now + beginnings[index].lock_ttl_ms * 1000
            if self._locks.acquire(connection, key, tokens[index], expires_at, now):
                free.add(index)
        return free

    def _claim(
        self,
        connection: Connection,
        beginnings: Sequence[Beginning],
        instants: list[int],
        going_on: set[int],
        now: int,
        *,
        repeated: set[int],
    ) -> dict[int, Claim]:
        """Checkpoint, then claim, the occurrences going on, each table in job order.

        An occurrence whose token the caller chose (``repeated``: a begin it repeats) and whose
        lock that token holds finds its own claim, if the first begin made one: the run of its
        instant in progress answers ``STARTED``, the instant queued ``QUEUED``. (The table keeps
        no token: an instant it queued and a worker promoted since answers ``STARTED``.)
        """
        by_job = sorted(going_on, key=lambda index: (beginnings[index].job, index))
        if self._checkpoints is not None:
            for index in by_job:
                self._checkpoints.write(connection, beginnings[index].job, instants[index])
        claims: dict[int, Claim] = {}
        for index in by_job:
            beginning = beginnings[index]
            if not beginning.claim:
                continue
            own = None
            if index in repeated and beginning.lock_key is not None:
                own = self._runs.claimed(connection, beginning.job, instants[index], now=now)
            if own is not None:
                claims[index] = own
            else:
                claims[index] = self._runs.claim(
                    connection,
                    beginning.job,
                    instants[index],
                    queue=beginning.queue,
                    now=now,
                    expires_at=now + beginning.run_ttl_ms * 1000,
                )
        return claims

    def _answered(
        self,
        beginning: Beginning,
        token: str,
        going_on: bool,
        claimed: Claim | None,
        asked_at: datetime,
    ) -> None:
        if not going_on:
            beginning.lock_held = True
            beginning.may_have_claimed = False
            return
        if beginning.lock_key is not None:
            expires = asked_at + timedelta(milliseconds=beginning.lock_ttl_ms)
            beginning.lease = Lease(beginning.lock_key, token, expires)
        beginning.checkpointed = self._checkpoints is not None
        beginning.claimed = claimed

    def free(self, beginning: Beginning) -> datetime | None:
        key, token = beginning.lock_key, beginning.token
        if beginning.lease is not None:
            token = beginning.lease.token
        if key is not None and token is None:
            return None  # never asked for the lock: no claim of this beat's to end
        at = to_micros(beginning.scheduled_at, "scheduled_at")
        now, expires_at = run_window(self._run_clock, beginning.run_ttl_ms)
        lock_now = to_micros(self._lock_clock.now())
        doing = f"free the run state of {beginning.job!r}"
        with self._stored.transaction(doing) as connection:
            if (
                key is not None
                and token is not None
                and not self._locks.holds(connection, key, token, lock_now)
            ):
                return None  # the lock is not (or no longer) this lease's
            dropped = self._runs.drop_queued(connection, beginning.job, now=now)
            self._runs.finish(connection, beginning.job, at, now=now, expires_at=expires_at)
        return dropped

    def end(
        self, job: str, scheduled_at: datetime, *, ttl_ms: int, last_run: JobRun | None
    ) -> RunEnd:
        at = to_micros(scheduled_at, "scheduled_at")
        now, expires_at = run_window(self._run_clock, ttl_ms)
        keep = last_run is not None and self._last_runs is not None
        try:
            with self._stored.transaction(f"end the run of {job!r}") as connection:
                if last_run is not None and self._last_runs is not None:
                    self._last_runs.write(connection, last_run)
                promoted = self._runs.finish(connection, job, at, now=now, expires_at=expires_at)
        except Exception as error:
            return RunEnd(None, error if keep else None, error)
        return RunEnd(promoted)


def same_database(one: Engine, other: Engine) -> bool:
    """Whether two engines reach the same database, so one transaction may touch both's tables."""
    return one is other or one.url == other.url


def _check(beginning: Beginning) -> None:
    if beginning.lock_key is not None and beginning.lock_ttl_ms <= 0:
        raise ValueError(
            f"a lock's time to live is a positive number of ms, not {beginning.lock_ttl_ms}"
        )
    if beginning.claim and beginning.run_ttl_ms <= 0:
        raise ValueError(
            f"a run's time to live is a positive number of ms, not {beginning.run_ttl_ms}"
        )
