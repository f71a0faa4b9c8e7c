"""Beat's combined ``begin`` on Redis: the script builds each key from the batch's JSON, so it
must reach the keys the separate stores use for any job name, in one call of a few arguments."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from redis import Redis

from ddd_celery.kernel.clock import FixedClock
from ddd_celery.redis import RedisJobCheckpoints, RedisJobRunState, RedisLock
from ddd_celery.redis.occurrence_store import BEGIN_BATCH, RedisOccurrenceStore
from ddd_celery.scheduling.occurrence import lock_key
from ddd_celery.scheduling.occurrence_store import Beginning
from ddd_celery.scheduling.run_state import Claim

pytestmark = pytest.mark.redis

AT = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
NAMES = [
    "billing.plain",
    'beat.a "quoted" \\ name',
    "beat.line\nbreak\ttab",
    "beat.[1, 2]",
    "beat.été ⏰ 日本",
    "beat.",
]
"""Declared names are ``context.job``; a ``beat_schedule`` entry's is ``beat.`` and any key."""


def _stores(
    client: Redis, prefix: str
) -> tuple[RedisOccurrenceStore, RedisLock, RedisJobRunState, RedisJobCheckpoints]:
    clock = FixedClock(AT)
    lock = RedisLock(client, prefix=prefix, clock=clock)
    run_state = RedisJobRunState(client, prefix=f"{prefix}run:")
    checkpoints = RedisJobCheckpoints(client, prefix=f"{prefix}checkpoint:")
    store = run_state.occurrence_store(lock, checkpoints, None)
    assert isinstance(store, RedisOccurrenceStore)
    return store, lock, run_state, checkpoints


def _beginning(job: str) -> Beginning:
    return Beginning(job, AT, lock_key(job, AT), 60_000, True, False, 60_000)


def test_begin_reaches_the_keys_of_the_separate_stores_for_any_job_name(
    redis_client: Redis, prefix: str
) -> None:
    store, lock, run_state, checkpoints = _stores(redis_client, prefix)
    batch = [_beginning(name) for name in NAMES]

    store.begin(batch)

    assert [begun.claimed for begun in batch] == [Claim.STARTED] * len(NAMES)
    for name in NAMES:
        assert lock.acquire(lock_key(name, AT), 60_000) is None
        assert run_state.running(name) == AT
        assert checkpoints.read(name) == AT
    assert store.begin([], releasing=[begun.lease for begun in batch if begun.lease]) == [
        None
    ] * len(NAMES)
    assert all(lock.acquire(lock_key(name, AT), 60_000) is not None for name in NAMES)


def test_begin_sends_a_batch_as_one_call_per_chunk_its_locks_as_keys(
    recorded: tuple[Redis, list[tuple[str, ...]]], prefix: str
) -> None:
    client, commands = recorded
    store, *_ = _stores(client, prefix)
    store.begin([_beginning("billing.warm-up")])  # Redis loads the script once at most
    commands.clear()
    batch = [_beginning(f"billing.job-{number}") for number in range(2 * BEGIN_BATCH + 1)]

    store.begin(batch)

    assert [command[0] for command in commands] == ["EVALSHA"] * 3
    # the sha, the number of keys, the routing key and each occurrence's lock, 8 arguments
    sizes = [BEGIN_BATCH, BEGIN_BATCH, 1]
    assert [len(command) for command in commands] == [3 + 1 + size + 8 for size in sizes]
    assert commands[2][4] == f"{prefix}{lock_key('billing.job-500', AT)}"
    assert len({begun.token for begun in batch}) == len(batch)
    assert all(begun.claimed is Claim.STARTED for begun in batch)


def test_a_batch_another_store_began_is_all_held_and_one_free_lock_is_still_taken(
    redis_client: Redis, prefix: str
) -> None:
    """Answered from the locks alone when another owner holds every one; with one lock free
    (it expired, or the other began a different batch) each occurrence is asked as ever."""
    store, _, run_state, _ = _stores(redis_client, prefix)
    other, *_ = _stores(redis_client, prefix)
    names = [f"billing.job-{number}" for number in range(5)]
    store.begin([_beginning(name) for name in names])

    late = [_beginning(name) for name in names]
    other.begin(late)
    assert [begun.lock_held for begun in late] == [True] * 5
    assert all(begun.claimed is None and begun.lease is None for begun in late)

    redis_client.delete(f"{prefix}{lock_key(names[2], AT)}")
    run_state.finish(names[2], AT, ttl_ms=60_000)
    again = [_beginning(name) for name in names]
    other.begin(again)
    assert [begun.lock_held for begun in again] == [True, True, False, True, True]
    assert again[2].claimed is Claim.STARTED
