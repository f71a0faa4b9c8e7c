"""Beat's bookkeeping of the stores it cannot ask: one line when an outage starts, one when it ends.

Each occurrence a store fails is recorded on its own (``failed``, ``JOB_LOCK_UNAVAILABLE``),
without saying where the store is or why it failed: that is said here, once per outage, with
the store's address and the driver's cause, so a beat on a wrong port writes two lines, not one
a second. The lines are beat's, on the ``ddd_celery.celery.beat`` logger.
"""

from __future__ import annotations

import logging
from datetime import datetime

from ddd_celery.celery.registry import CeleryJobs
from ddd_celery.scheduling.occurrence_store import IN_THE_LOCK, IN_THE_RUN_STATE, Beginning

logger = logging.getLogger("ddd_celery.celery.beat")

CHECKPOINTS = "the checkpoints"
"""The checkpoints' store, as beat names it in the line of an outage."""
PAUSES = "the pauses"
"""The pauses' store (``celery/pauses.py``), as beat names it in the line of an outage."""
_WHAT_AN_OUTAGE_COSTS = {
    IN_THE_LOCK: "each occurrence that needs it is recorded failed (JOB_LOCK_UNAVAILABLE)",
    IN_THE_RUN_STATE: "each occurrence that needs it is recorded failed (JOB_LOCK_UNAVAILABLE)",
    CHECKPOINTS: "no checkpoint is written (a restart meanwhile starts from the last one)",
    PAUSES: "beat keeps the pauses it last read (a pause or resume meanwhile is not seen)",
}


class _Outage:
    """A store beat cannot ask: said once at ERROR when it starts, once when it ends."""

    __slots__ = ("failed", "follow_ups", "noted", "since")

    def __init__(self, since: datetime) -> None:
        self.since = since
        self.failed = 0
        """Occurrences it failed."""
        self.follow_ups = 0
        """Follow-ups it failed (a checkpoint, a lease's release)."""
        self.noted: set[str] = set()
        """The follow-ups whose own line was written: once each per outage."""


class StoreOutages:
    """The stores that stopped answering (``IN_THE_LOCK``, ``IN_THE_RUN_STATE``,
    ``CHECKPOINTS``), since when and what they failed."""

    def __init__(self) -> None:
        self._outages: dict[str, _Outage] = {}

    def note(self, jobs: CeleryJobs, beginnings: list[Beginning]) -> None:
        """Note which stores a begin found down or answering (``down``, ``up``)."""
        if not self._outages and all(b.failed_in is None for b in beginnings):
            return  # the usual tick: every store answered, none was down
        failed: dict[str, Exception] = {}
        answered: set[str] = set()
        for beginning in beginnings:
            if beginning.failed_in is not None and beginning.error is not None:
                failed.setdefault(beginning.failed_in, beginning.error)
            if beginning.lock_key is not None and beginning.failed_in != IN_THE_LOCK:
                answered.add(IN_THE_LOCK)
            if beginning.claimed is not None:
                answered.add(IN_THE_RUN_STATE)
        stores = {IN_THE_LOCK: jobs.lock, IN_THE_RUN_STATE: jobs.run_state}
        for name, error in failed.items():
            count = sum(1 for b in beginnings if b.failed_in == name)
            self.down(jobs, name, stores[name], error, count)
        for name in answered - failed.keys():
            self.up(jobs, name, stores[name])

    def down(
        self, jobs: CeleryJobs, name: str, store: object, error: Exception, count: int = 0
    ) -> _Outage:
        """Say once at ERROR that a store stopped answering, with its address and the cause:
        each occurrence it fails (``count``) is recorded on its own, without saying where or
        why. The outage, new or in progress."""
        outage = self._outages.get(name)
        if outage is None:
            outage = self._outages[name] = _Outage(jobs.clock.now())
            logger.error(
                "beat: %s store (%s) cannot be asked: %s; %s until it answers again",
                name,
                _address(store),
                _cause(error),
                _WHAT_AN_OUTAGE_COSTS.get(name, "what needs it is not done"),
                extra={"store": name, "address": _address(store)},
            )
        outage.failed += count
        return outage

    def up(self, jobs: CeleryJobs, name: str, store: object) -> None:
        """Say once at WARNING that a store in outage answers again."""
        ended = self._outages.pop(name, None)
        if ended is not None:
            logger.warning(
                "beat: %s store (%s) answers again after %.1f s; %d occurrences and %d "
                "follow-ups failed meanwhile",
                name,
                _address(store),
                (jobs.clock.now() - ended.since).total_seconds(),
                ended.failed,
                ended.follow_ups,
                extra={"store": name, "address": _address(store)},
            )

    def could_not_follow(
        self, jobs: CeleryJobs, job: str, error: Exception, name: str, store: object
    ) -> None:
        """A follow-up (a checkpoint, a lease's release) the store failed: its line is written
        for the first of its kind in an outage, then counted in it (``down``), not a line a
        second."""
        outage = self.down(jobs, name, store, error)
        outage.follow_ups += 1
        what = "write the checkpoint" if name == CHECKPOINTS else "release the lock"
        if what not in outage.noted:
            outage.noted.add(what)
            jobs.recorder.could_not_follow(job, error, what=what)


def _address(store: object) -> str:
    """Where a store is: host and port, never a password (``address`` of the locks, else the
    Redis client or the SQL engine a store is built on), else its type."""
    address = getattr(store, "address", None)
    if isinstance(address, str):
        return address
    try:
        client = getattr(store, "client", None)
        if client is not None:
            from ddd_celery.redis.lock import redis_address  # noqa: PLC0415 (a Redis store's)

            return redis_address(client)
        engine = getattr(store, "engine", None)
        if engine is not None:
            from ddd_celery.sql.lock import sql_address  # noqa: PLC0415 (a SQL store's)

            return sql_address(engine)
    except Exception:  # not a client or an engine after all
        pass
    return type(store).__name__


def _cause(error: BaseException) -> str:
    """The first cause of ``error`` (the driver's, "connection refused"...), on one line."""
    root = error
    while root.__cause__ is not None:
        root = root.__cause__
    return one_line(root)


def one_line(error: BaseException) -> str:
    """``error``'s type and the first line of its message, at most 300 characters."""
    lines = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    return text[:300]
