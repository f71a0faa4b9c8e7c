"""RedisJobRunState on the real Redis: its hash per job, its round trips, and outages."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from ddd_celery.redis import RedisJobRunState, StoreUnavailableError, connect
from ddd_celery.scheduling.run_state import Claim

pytestmark = pytest.mark.redis

T0 = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=15)
T0_MS, T1_MS = 1_772_431_200_000, 1_772_432_100_000
JOB = "billing.send-payment-reminders"


@pytest.fixture
def job(redis_client: Redis) -> Iterator[str]:
    """A job of this test's own, whose run state under the default prefix is deleted after."""
    job = f"test.run-state-{uuid.uuid4().hex}"
    yield job
    redis_client.delete(f"ddd_celery:run:{job}")


def test_a_run_in_progress_is_a_hash_under_the_job_name_expiring_with_it(
    redis_client: Redis, job: str
) -> None:
    state = RedisJobRunState(redis_client)
    key = f"ddd_celery:run:{job}"

    state.claim(job, T0, queue=True, ttl_ms=60_000)
    assert redis_client.hgetall(key) == {b"running": str(T0_MS).encode()}
    assert 59_000 < redis_client.pttl(key) <= 60_000

    state.claim(job, T1, queue=True, ttl_ms=60_000)
    assert redis_client.hgetall(key) == {
        b"running": str(T0_MS).encode(),
        b"queued": str(T1_MS).encode(),
    }

    state.finish(job, T0, ttl_ms=60_000)
    state.finish(job, T1, ttl_ms=60_000)
    assert redis_client.exists(key) == 0


def test_each_operation_is_one_round_trip(
    recorded: tuple[Redis, list[tuple[str, ...]]], prefix: str
) -> None:
    client, commands = recorded
    state = RedisJobRunState(client, prefix=prefix)
    for _ in range(2):  # the first pass lets Redis learn the scripts
        commands.clear()
        state.claim(JOB, T0, queue=True, ttl_ms=60_000)
        state.claim(JOB, T1, queue=True, ttl_ms=60_000)
        state.running(JOB)
        state.drop_queued(JOB)
        state.finish(JOB, T0, ttl_ms=60_000)

    assert [command[0] for command in commands] == [
        "EVALSHA",
        "EVALSHA",
        "HGET",
        "EVALSHA",
        "EVALSHA",
    ]
    assert commands[0][2:] == ("1", f"{prefix}{JOB}", str(T0_MS), "1", "60000")


def test_a_run_expires_on_redis_own_clock(redis_client: Redis, prefix: str) -> None:
    state = RedisJobRunState(redis_client, prefix=prefix)
    assert state.claim(JOB, T0, queue=False, ttl_ms=50) is Claim.STARTED
    claimed_at = time.monotonic()

    while state.claim(JOB, T1, queue=False, ttl_ms=60_000) is Claim.BUSY:
        assert time.monotonic() - claimed_at < 2, "Redis did not expire the run"
        time.sleep(0.01)
    assert state.running(JOB) == T1


def test_a_client_that_decodes_responses_reads_the_same_state(redis_url: str, prefix: str) -> None:
    client = Redis.from_url(redis_url, decode_responses=True)
    state = RedisJobRunState(client, prefix=prefix)

    assert state.claim(JOB, T0, queue=True, ttl_ms=60_000) is Claim.STARTED
    assert state.claim(JOB, T1, queue=True, ttl_ms=60_000) is Claim.QUEUED
    assert state.running(JOB) == T0
    assert state.finish(JOB, T0, ttl_ms=60_000) == T1
    client.close()


@pytest.mark.parametrize("action", ["claim", "finish", "drop the queued", "read the run"])
def test_an_unreachable_redis_makes_the_run_state_unavailable_at_once(
    closed_port_url: str, action: str
) -> None:
    state = RedisJobRunState(connect(closed_port_url))
    operations: dict[str, Callable[[], object]] = {
        "claim": lambda: state.claim(JOB, T0, queue=True, ttl_ms=60_000),
        "finish": lambda: state.finish(JOB, T0, ttl_ms=60_000),
        "drop the queued": lambda: state.drop_queued(JOB),
        "read the run": lambda: state.running(JOB),
    }
    started = time.monotonic()

    with pytest.raises(StoreUnavailableError, match=action) as raised:
        operations[action]()

    assert isinstance(raised.value.__cause__, RedisConnectionError)
    assert time.monotonic() - started < 0.5
