"""Each contract runs against the in-memory adapter and the Redis adapter (on REDIS_URL).

The Redis cases fail, never skip, when Redis cannot be reached: CI starts one. They keep their
keys under a prefix of their own and delete them afterwards, since other tests share the server.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from redis import Redis

from ddd_celery.kernel.clock import FixedClock
from ddd_celery.kernel.lock import InMemoryLock
from ddd_celery.redis import (
    RedisJobCheckpoints,
    RedisJobLastRuns,
    RedisJobRunState,
    RedisLock,
    connect,
)
from ddd_celery.scheduling.checkpoints import InMemoryJobCheckpoints
from ddd_celery.scheduling.last_runs import InMemoryJobLastRuns
from ddd_celery.scheduling.run_state import InMemoryJobRunState
from ddd_celery.testing.contracts.checkpoints import JobCheckpointsSubject
from ddd_celery.testing.contracts.last_runs import JobLastRunsSubject
from ddd_celery.testing.contracts.lock import LockSubject
from ddd_celery.testing.contracts.run_state import JobRunStateSubject

ADAPTERS = ["memory", pytest.param("redis", marks=pytest.mark.redis)]
START = datetime(2026, 3, 2, 5, 59, 58, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class RedisNamespace:
    """Two clients of the same Redis, as two processes hold them, and the prefix of a test."""

    client: Redis
    peer: Redis
    prefix: str

    def elapse(self, ms: int) -> None:
        """Let ``ms`` pass for every key of the test, exactly as Redis's clock would.

        Shortening each time to live keeps the contract deterministic without sleeping.
        """
        for key in self.client.scan_iter(match=f"{self.prefix}*"):
            left = self.client.pttl(key)
            if left > ms:
                self.client.pexpire(key, left - ms)
            elif left >= 0:
                self.client.delete(key)


@pytest.fixture(scope="session")
def redis_clients() -> Iterator[tuple[Redis, Redis]]:
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    client, peer = connect(url), connect(url)
    client.ping()
    yield client, peer
    client.close()
    peer.close()


@pytest.fixture
def redis_namespace(redis_clients: tuple[Redis, Redis]) -> Iterator[RedisNamespace]:
    client, peer = redis_clients
    namespace = RedisNamespace(client, peer, f"test:contracts:{uuid.uuid4().hex}:")
    yield namespace
    for key in client.scan_iter(match=f"{namespace.prefix}*"):
        client.delete(key)


@pytest.fixture(params=ADAPTERS)
def lock_subject(request: pytest.FixtureRequest) -> LockSubject:
    clock = FixedClock(START)
    if request.param == "memory":
        lock = InMemoryLock(clock)
        return LockSubject(lock=lock, peer=lock, clock=clock, elapse=clock.advance)
    redis: RedisNamespace = request.getfixturevalue("redis_namespace")

    def elapse(ms: int) -> None:
        redis.elapse(ms)
        clock.advance(ms)

    return LockSubject(
        lock=RedisLock(redis.client, prefix=redis.prefix, clock=clock),
        peer=RedisLock(redis.peer, prefix=redis.prefix, clock=clock),
        clock=clock,
        elapse=elapse,
    )


@pytest.fixture(params=ADAPTERS)
def checkpoints_subject(request: pytest.FixtureRequest) -> JobCheckpointsSubject:
    if request.param == "memory":
        checkpoints = InMemoryJobCheckpoints()
        return JobCheckpointsSubject(checkpoints=checkpoints, peer=checkpoints)
    redis: RedisNamespace = request.getfixturevalue("redis_namespace")
    prefix = f"{redis.prefix}checkpoint:"
    return JobCheckpointsSubject(
        checkpoints=RedisJobCheckpoints(redis.client, prefix=prefix),
        peer=RedisJobCheckpoints(redis.peer, prefix=prefix),
    )


@pytest.fixture(params=ADAPTERS)
def run_state_subject(request: pytest.FixtureRequest) -> JobRunStateSubject:
    if request.param == "memory":
        clock = FixedClock(START)
        state = InMemoryJobRunState(clock)
        return JobRunStateSubject(state=state, peer=state, elapse=clock.advance)
    redis: RedisNamespace = request.getfixturevalue("redis_namespace")
    prefix = f"{redis.prefix}run:"
    return JobRunStateSubject(
        state=RedisJobRunState(redis.client, prefix=prefix),
        peer=RedisJobRunState(redis.peer, prefix=prefix),
        elapse=redis.elapse,
    )


@pytest.fixture(params=ADAPTERS)
def last_runs_subject(request: pytest.FixtureRequest) -> JobLastRunsSubject:
    if request.param == "memory":
        last_runs = InMemoryJobLastRuns()
        return JobLastRunsSubject(last_runs=last_runs, peer=last_runs)
    redis: RedisNamespace = request.getfixturevalue("redis_namespace")
    prefix = f"{redis.prefix}last-run:"
    return JobLastRunsSubject(
        last_runs=RedisJobLastRuns(redis.client, prefix=prefix),
        peer=RedisJobLastRuns(redis.peer, prefix=prefix),
    )
