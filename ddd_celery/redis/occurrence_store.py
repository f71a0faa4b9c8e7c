"""An occurrence's I/O on Redis in one round trip: beat's lock, checkpoint, claim and releases,
the worker's last run and end of run, each one Lua script on the keys the separate stores use.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from redis.cluster import RedisCluster

from ddd_celery.kernel.clock import Clock
from ddd_celery.kernel.instants import epoch_ms, from_epoch_ms, to_utc
from ddd_celery.kernel.lock import Lease, LockUnavailableError
from ddd_celery.redis.connection import RedisClient
from ddd_celery.redis.errors import StoreUnavailableError, unavailable_as
from ddd_celery.redis.scripts import register
from ddd_celery.redis.slots import require_one_slot
from ddd_celery.scheduling.last_runs import run_as_dict
from ddd_celery.scheduling.occurrence_store import (
    IN_THE_LOCK,
    Beginning,
    OccurrenceStore,
    RunEnd,
)
from ddd_celery.scheduling.outcomes import JobRun
from ddd_celery.scheduling.run_state import Claim

BEGIN_BATCH = 250
"""Occurrences one script begins at most: 10,000 due at once are forty scripts, none of which
holds Redis for long (about 3 ms)."""

_CLAIMS = {claim.value: claim for claim in Claim}

_UNUSED = "unused"
"""After the run states' prefix, the key name passed where a script reads no key (no lock, no
checkpoint): never touched, and in the prefixes' slot on a Redis Cluster."""


class RedisOccurrenceStore(OccurrenceStore):
    """``RedisLock``, ``RedisJobRunState``, ``RedisJobCheckpoints`` and ``RedisJobLastRuns`` on
    one Redis, their keys and prefixes unchanged, each operation one EVALSHA.

    ``begin`` is ``lua/occurrence_begin.lua`` per ``BEGIN_BATCH`` occurrences (the releases
    ride with the first), ``free`` is ``lua/occurrence_free.lua``, ``end`` is
    ``lua/run_end.lua``; each starts with ``lua/occurrence_lib.lua``, the rules the separate
    stores' scripts apply too, each written once. Built by ``RedisJobRunState.occurrence_store``.
    A script that cannot be run fails every occurrence it held in the lock
    (``LockUnavailableError``): what it did is unknown, and Redis runs a script whole or not at
    all.
    """

    keeps_tokens = True

    def __init__(
        self,
        client: RedisClient,
        *,
        clock: Clock,
        lock_prefix: str,
        run_prefix: str,
        checkpoint_prefix: str | None,
        last_run_prefix: str | None,
        history: tuple[str, int] | None = None,
    ) -> None:
        """``history``: the prefix of the last runs' history lists and their bound, for the
        record ``end`` keeps (``RedisJobLastRuns.history_prefix`` and ``history_limit``)."""
        history_prefix = None if history is None else history[0]
        require_one_slot(
            client,
            "RedisOccurrenceStore",
            **{
                f"{store} prefix": prefix
                for store, prefix in (
                    ("lock", lock_prefix),
                    ("run state", run_prefix),
                    ("checkpoint", checkpoint_prefix),
                    ("last run", last_run_prefix),
                    ("history", history_prefix),
                )
                if prefix is not None
            },
        )
        self._client = client
        self._unused = run_prefix + _UNUSED
        self._clock = clock
        self._lock_prefix = lock_prefix
        self._run_prefix = run_prefix
        self._checkpoint_prefix = checkpoint_prefix
        self._last_run_prefix = last_run_prefix
        self._history = history
        self._begin_script = register(client, "occurrence_begin.lua", after="occurrence_lib.lua")
        self._free_script = register(client, "occurrence_free.lua", after="occurrence_lib.lua")
        self._end_script = register(client, "run_end.lua", after="occurrence_lib.lua")

    def begin(
        self, beginnings: Sequence[Beginning], *, releasing: Sequence[Lease] = ()
    ) -> list[Exception | None]:
        """One script per ``BEGIN_BATCH`` occurrences, all sent before any reply is read
        (``LuaScript.each``): Redis runs one while the next is on its way, and the caller
        waits once for the batch, not once per script."""
        if not beginnings and not releasing:
            return []
        chunks = [
            beginnings[start : start + BEGIN_BATCH]
            for start in range(0, max(len(beginnings), 1), BEGIN_BATCH)
        ]
        calls = [
            self._call(chunk, list(releasing) if index == 0 else [])
            for index, chunk in enumerate(chunks)
        ]
        asked_at = self._clock.now()
        try:
            with unavailable_as(LockUnavailableError, "begin the occurrences due"):
                replies = self._begin_script.each(calls)
        except LockUnavailableError as error:
            for beginning in beginnings:
                beginning.error, beginning.failed_in = error, IN_THE_LOCK
            return [error for _ in releasing]
        for chunk, reply in zip(chunks, replies, strict=True):
            self._answered(chunk, json.loads(reply), asked_at)
        return [None for _ in releasing]

    def _call(
        self, batch: Sequence[Beginning], releasing: list[Lease]
    ) -> tuple[list[str], list[str | int]]:
        """One script's keys and arguments for ``batch``: each occurrence a short JSON array,
        the batch one argument.

        Beat's occurrences due together share their instant and options, so what is computed
        from them (the epoch ms) is computed once per distinct value. Each occurrence's owner
        token is the script's stem and its index, or the one the caller set (a begin
        repeated), so the script sent again answers as it did the first time.
        """
        stem = uuid.uuid4().hex + ":"
        instants: dict[datetime, str] = {}
        occurrences: list[tuple[str | int, ...]] = []
        for index, beginning in enumerate(batch, 1):
            lock_key, lock_ttl, run_ttl = (
                beginning.lock_key,
                beginning.lock_ttl_ms,
                beginning.run_ttl_ms,
            )
            if lock_key is not None and lock_ttl <= 0:
                raise ValueError(
                    f"a lock's time to live is a positive number of ms, not {lock_ttl}"
                )
            if beginning.claim and run_ttl <= 0:
                raise ValueError(f"a run's time to live is a positive number of ms, not {run_ttl}")
            at = beginning.scheduled_at
            epoch = instants.get(at)
            if epoch is None:
                epoch = instants[at] = str(epoch_ms(to_utc(at, "scheduled_at")))
            occurrence: tuple[str | int, ...] = (
                beginning.job,
                lock_key or "",
                lock_ttl if lock_key is not None else 0,
                1 if beginning.claim else 0,
                epoch,
                1 if beginning.queue else 0,
                run_ttl,
            )
            if beginning.token is None:
                beginning.token = f"{stem}{index}"  # the script's own: ARGV stem, then index
            else:
                occurrence += (beginning.token,)
            occurrences.append(occurrence)
            beginning.may_have_claimed = beginning.claim
        # Where every occurrence takes a lock with the script's own token, the locks go as
        # keys too: a batch another beat began is then answered from them alone.
        keys = [self._run_prefix]
        if all(len(occurrence) == 7 and occurrence[1] for occurrence in occurrences):
            prefix = self._lock_prefix
            keys += [prefix + str(occurrence[1]) for occurrence in occurrences]
        args: list[str | int] = [
            self._lock_prefix,
            self._run_prefix,
            self._checkpoint_prefix or "",
            "0" if self._checkpoint_prefix is None else "1",
            stem,
            _json(occurrences),
            _json([(lease.key, lease.token) for lease in releasing]),
            "1" if len(keys) > 1 else "0",
        ]
        return keys, args

    def _answered(self, batch: Sequence[Beginning], answers: list[str], asked_at: datetime) -> None:
        checkpointed = self._checkpoint_prefix is not None
        expiries: dict[int, datetime] = {}
        for beginning, answer in zip(batch, answers, strict=False):
            if answer == "held":
                beginning.lock_held = True
                beginning.may_have_claimed = False
                continue
            lock_key = beginning.lock_key
            if lock_key is not None:
                ttl = beginning.lock_ttl_ms
                expires = expiries.get(ttl)
                if expires is None:
                    expires = expiries[ttl] = asked_at + timedelta(milliseconds=ttl)
                beginning.lease = Lease(lock_key, beginning.token or "", expires)
            beginning.checkpointed = checkpointed
            if answer != "taken":
                beginning.claimed = _CLAIMS[answer]

    def free(self, beginning: Beginning) -> datetime | None:
        key, token = beginning.lock_key, beginning.token
        if beginning.lease is not None:
            token = beginning.lease.token
        if key is not None and token is None:
            return None  # never asked for the lock: no claim of this beat's to end
        keys = [
            self._unused if key is None else self._lock_prefix + key,
            self._run_prefix + beginning.job,
        ]
        at = epoch_ms(to_utc(beginning.scheduled_at, "scheduled_at"))
        args: list[str | int] = [token or "", int(key is not None), at]
        with unavailable_as(StoreUnavailableError, f"free the run state of {beginning.job!r}"):
            dropped = self._free_script(keys=keys, args=args)
        return None if dropped is None else from_epoch_ms(dropped)

    def end(
        self, job: str, scheduled_at: datetime, *, ttl_ms: int, last_run: JobRun | None
    ) -> RunEnd:
        if ttl_ms <= 0:
            raise ValueError(f"a run's time to live is a positive number of ms, not {ttl_ms}")
        keep = last_run is not None and self._last_run_prefix is not None
        record = (
            json.dumps(run_as_dict(last_run), separators=(",", ":")) if keep and last_run else ""
        )
        history_prefix, history_limit = self._history or (None, 0)
        keys = [
            self._run_prefix + job,
            self._unused if self._last_run_prefix is None else self._last_run_prefix + job,
            self._unused if history_prefix is None else history_prefix + job,
        ]
        args: list[str | int] = [
            epoch_ms(to_utc(scheduled_at, "scheduled_at")),
            ttl_ms,
            int(keep),
            record,
            history_limit,
        ]
        try:
            with unavailable_as(StoreUnavailableError, f"end the run of {job!r}"):
                promoted = self._end_script(keys=keys, args=args)
        except StoreUnavailableError as error:
            return RunEnd(None, error if keep else None, error)
        return RunEnd(None if promoted is None else from_epoch_ms(promoted))


def same_server(one: RedisClient, other: RedisClient) -> bool:
    """Whether two clients reach the same Redis database, so one script may touch both's keys
    (two cluster clients: one that knows a node the other knows)."""
    if one is other:
        return True
    if isinstance(one, RedisCluster) and isinstance(other, RedisCluster):
        nodes: Any = one.get_nodes()  # type: ignore[no-untyped-call]
        others: Any = other.get_nodes()  # type: ignore[no-untyped-call]
        return not {node.name for node in nodes}.isdisjoint(node.name for node in others)
    if isinstance(one, RedisCluster) or isinstance(other, RedisCluster):
        return False
    if one.connection_pool is other.connection_pool:
        return True
    fields = ("host", "port", "db", "path", "username")
    mine, theirs = one.connection_pool.connection_kwargs, other.connection_pool.connection_kwargs
    return all(mine.get(name) == theirs.get(name) for name in fields)


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
