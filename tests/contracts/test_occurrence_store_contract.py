"""The OccurrenceStore contract over the composed store (memory, Redis ports one by one) and the
Redis store that does each operation in one script: both must do the same (see conftest)."""

from __future__ import annotations

from datetime import datetime

import pytest

from ddd_celery.kernel.clock import FixedClock
from ddd_celery.kernel.lock import InMemoryLock
from ddd_celery.redis import (
    RedisJobCheckpoints,
    RedisJobLastRuns,
    RedisJobRunState,
    RedisLock,
    connect,
)
from ddd_celery.redis.occurrences import RedisOccurrenceStore
from ddd_celery.scheduling.last_runs import InMemoryJobLastRuns
from ddd_celery.scheduling.occurrence_store import ComposedOccurrenceStore, occurrence_store
from ddd_celery.scheduling.run_state import Claim, InMemoryJobRunState, JobRunState
from ddd_celery.testing.contracts.occurrence_store import (
    OccurrenceStoreContract,
    OccurrenceStoreSubject,
)
from tests.contracts.conftest import START, RedisNamespace

UNREACHABLE = "redis://127.0.0.1:1/0"
"""No Redis listens on port 1: every command fails at once."""


class UnreachableRunState(InMemoryJobRunState):
    """A run state whose store cannot be asked, after a lock that can."""

    def claim(self, job: str, scheduled_at: datetime, *, queue: bool, ttl_ms: int) -> Claim:
        raise ConnectionError("the run state's store is down")


@pytest.fixture(
    params=[
        "memory",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("redis, one port at a time", marks=pytest.mark.redis),
    ]
)
def occurrence_store_subject(request: pytest.FixtureRequest) -> OccurrenceStoreSubject:
    clock = FixedClock(START)
    if request.param == "memory":
        lock, run_state, last_runs = (
            InMemoryLock(clock),
            InMemoryJobRunState(clock),
            InMemoryJobLastRuns(),
        )
        store = occurrence_store(lock, run_state, None, last_runs)
        assert isinstance(store, ComposedOccurrenceStore)
        return OccurrenceStoreSubject(
            store=store,
            peer=ComposedOccurrenceStore(lock, run_state, last_runs),
            lock=lock,
            run_state=run_state,
            checkpoints=None,
            last_runs=last_runs,
            half_broken=ComposedOccurrenceStore(lock, UnreachableRunState(clock), last_runs),
        )
    redis: RedisNamespace = request.getfixturevalue("redis_namespace")

    def stores(
        client: object,
    ) -> tuple[RedisLock, RedisJobRunState, RedisJobCheckpoints, RedisJobLastRuns]:
        return (
            RedisLock(client, prefix=redis.prefix, clock=clock),  # type: ignore[arg-type]
            RedisJobRunState(client, prefix=f"{redis.prefix}run:"),  # type: ignore[arg-type]
            RedisJobCheckpoints(client, prefix=f"{redis.prefix}checkpoint:"),  # type: ignore[arg-type]
            RedisJobLastRuns(client, prefix=f"{redis.prefix}last-run:"),  # type: ignore[arg-type]
        )

    lock, run_state, checkpoints, last_runs = stores(redis.client)
    peer_lock, peer_run_state, peer_checkpoints, peer_last_runs = stores(redis.peer)
    down = connect(UNREACHABLE, timeout=0.2, retries=0)
    _, down_run_state, down_checkpoints, down_last_runs = stores(down)
    if request.param == "redis":
        store = occurrence_store(lock, run_state, checkpoints, last_runs)
        assert isinstance(store, RedisOccurrenceStore)
        peer = occurrence_store(peer_lock, peer_run_state, peer_checkpoints, peer_last_runs)
        broken = down_run_state.occurrence_store(
            RedisLock(down, prefix=redis.prefix, clock=clock), down_checkpoints, down_last_runs
        )
        assert broken is not None
        return OccurrenceStoreSubject(store, peer, lock, run_state, checkpoints, last_runs, broken)
    return OccurrenceStoreSubject(
        store=ComposedOccurrenceStore(lock, run_state, last_runs),
        peer=ComposedOccurrenceStore(peer_lock, peer_run_state, peer_last_runs),
        lock=lock,
        run_state=run_state,
        checkpoints=None,
        last_runs=last_runs,
        half_broken=ComposedOccurrenceStore(lock, down_run_state, last_runs),
    )


def test_stores_on_different_redis_servers_are_composed_not_combined(
    redis_namespace: RedisNamespace,
) -> None:
    down = connect(UNREACHABLE, timeout=0.2, retries=0)
    run_state: JobRunState = RedisJobRunState(redis_namespace.client, prefix=redis_namespace.prefix)

    store = occurrence_store(RedisLock(down), run_state, None, None)

    assert isinstance(store, ComposedOccurrenceStore)


class TestOccurrenceStore(OccurrenceStoreContract):
    pass
