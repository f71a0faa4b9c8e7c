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


def test_begin_sends_a_batch_as_one_call_of_a_few_arguments(
    recorded: tuple[Redis, list[tuple[str, ...]]], prefix: str
) -> None:
    client, commands = recorded
    store, *_ = _stores(client, prefix)
    store.begin([_beginning("billing.warm-up")])  # Redis loads the script once at most
    commands.clear()
    batch = [_beginning(f"billing.job-{number}") for number in range(2 * BEGIN_BATCH + 1)]

    store.begin(batch)

    assert [command[0] for command in commands] == ["EVALSHA"] * 3
    assert {len(command) for command in commands} == {11}  # sha, the routing key, 7 arguments
    assert len({begun.token for begun in batch}) == len(batch)
    assert all(begun.claimed is Claim.STARTED for begun in batch)
