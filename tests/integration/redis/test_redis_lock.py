"""RedisLock on the real Redis: its key, its one round trip, Redis's clock, and outages."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from fault_proxy import FaultProxy
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from services import REDIS_URL

from ddd_celery.kernel.lock import Lease, LockUnavailableError
from ddd_celery.redis import RedisLock, connect

pytestmark = pytest.mark.redis

KEY = "job:billing.send-payment-reminders:2026-03-02T06:00:00.000Z"


def test_the_key_is_the_scheduler_key_holding_the_owner_token(redis_client: Redis) -> None:
    lock = RedisLock(redis_client)
    lease = lock.acquire(KEY, 60_000)
    assert lease is not None
    try:
        assert redis_client.get(KEY) == lease.token.encode()
        assert 59_000 < redis_client.pttl(KEY) <= 60_000
    finally:
        lock.release(lease)


def test_the_prefix_leads_the_key(redis_client: Redis, prefix: str) -> None:
    lease = RedisLock(redis_client, prefix=prefix).acquire(KEY, 60_000)

    assert lease is not None
    assert lease.key == KEY
    assert redis_client.get(f"{prefix}{KEY}") == lease.token.encode()


def test_acquiring_is_one_set_nx_px(
    recorded: tuple[Redis, list[tuple[str, ...]]], prefix: str
) -> None:
    client, commands = recorded
    lock = RedisLock(client, prefix=prefix)

    lease = lock.acquire(KEY, 60_000)
    refused = lock.acquire(KEY, 60_000)

    assert lease is not None
    assert refused is None
    assert [(command[:3], set_options(command)) for command in commands[:2]] == [
        (("SET", f"{prefix}{KEY}", lease.token), {"NX", "PX 60000"}),
        (("SET", f"{prefix}{KEY}", commands[1][2]), {"NX", "PX 60000"}),
    ]
    assert commands[2:] == [("GET", f"{prefix}{KEY}")]  # a refused acquire reads its key once


def test_an_acquire_whose_reply_is_late_and_sent_again_holds_its_lock(prefix: str) -> None:
    """redis-py sends the SET again after its timeout: the second send must not read the first
    one's lock as another owner's (the occurrence would run nowhere)."""
    with FaultProxy.to_url(REDIS_URL) as proxy:
        client = connect(proxy.url(REDIS_URL))  # 1 s timeout, one retry: the defaults
        lock = RedisLock(client, prefix=prefix)
        client.ping()
        proxy.delay_replies(1.5, matching=b"SET", count=1)

        lease = lock.acquire(KEY, 60_000)

        assert proxy.delayed == 1
        assert lease is not None
        assert RedisLock(connect(REDIS_URL), prefix=prefix).acquire(KEY, 60_000) is None
        assert lock.release(lease) is True


def set_options(command: tuple[str, ...]) -> set[str]:
    """SET's options, PX with its value, in any order (redis-py 6.4 writes PX first, 8.1 NX)."""
    words = iter(command[3:])
    return {f"{word} {next(words)}" if word == "PX" else word for word in words}


def test_releasing_is_one_evalsha_once_redis_knows_the_script(
    recorded: tuple[Redis, list[tuple[str, ...]]], prefix: str
) -> None:
    client, commands = recorded
    lock = RedisLock(client, prefix=prefix)
    first = lock.acquire(KEY, 60_000)
    assert first is not None
    lock.release(first)
    second = lock.acquire(KEY, 60_000)
    assert second is not None
    commands.clear()

    assert lock.release(second) is True
    assert [command[0] for command in commands] == ["EVALSHA"]


def test_a_lease_expires_on_redis_own_clock(redis_client: Redis, prefix: str) -> None:
    lock = RedisLock(redis_client, prefix=prefix)
    assert lock.acquire(KEY, 50) is not None
    refused_at = time.monotonic()

    while lock.acquire(KEY, 60_000) is None:
        assert time.monotonic() - refused_at < 2, "Redis did not expire the lease"
        time.sleep(0.01)


def test_a_redis_that_refuses_connections_makes_acquire_unavailable_at_once(
    closed_port_url: str,
) -> None:
    lock = RedisLock(connect(closed_port_url))
    started = time.monotonic()

    with pytest.raises(LockUnavailableError, match="acquire the lock") as raised:
        lock.acquire(KEY, 60_000)

    assert isinstance(raised.value.__cause__, RedisConnectionError)
    assert time.monotonic() - started < 0.5


def test_a_redis_that_never_answers_makes_acquire_unavailable_within_the_timeouts(
    silent_url: str,
) -> None:
    lock = RedisLock(connect(silent_url, timeout=0.1, retries=1))
    started = time.monotonic()

    with pytest.raises(LockUnavailableError) as raised:
        lock.acquire(KEY, 60_000)

    assert isinstance(raised.value.__cause__, RedisTimeoutError)
    assert time.monotonic() - started < 0.5


def test_an_unreachable_redis_makes_release_unavailable(
    redis_client: Redis, closed_port_url: str, prefix: str
) -> None:
    lease = RedisLock(redis_client, prefix=prefix).acquire(KEY, 60_000)
    assert lease is not None

    with pytest.raises(LockUnavailableError, match="release the lock") as raised:
        RedisLock(connect(closed_port_url), prefix=prefix).release(lease)
    assert isinstance(raised.value.__cause__, RedisConnectionError)


def test_any_error_of_redis_makes_the_lock_unavailable(redis_client: Redis, prefix: str) -> None:
    redis_client.hset(f"{prefix}{KEY}", "not", "a lock")
    lock = RedisLock(redis_client, prefix=prefix)

    assert lock.acquire(KEY, 60_000) is None
    with pytest.raises(LockUnavailableError) as raised:
        lock.release(_lease_on(KEY))
    assert isinstance(raised.value.__cause__, ResponseError)


def test_the_lock_works_again_when_redis_comes_back(redis_proxy: FaultProxy, prefix: str) -> None:
    lock = RedisLock(connect(redis_proxy.url(REDIS_URL), timeout=0.2), prefix=prefix)
    assert lock.acquire(f"{KEY}:before", 60_000) is not None

    redis_proxy.cut()
    with pytest.raises(LockUnavailableError):
        lock.acquire(f"{KEY}:during", 60_000)
    redis_proxy.restore()

    assert lock.acquire(f"{KEY}:after", 60_000) is not None
    assert lock.acquire(f"{KEY}:during", 60_000) is not None


def test_a_connection_redis_closed_is_replaced_without_an_error(
    redis_client: Redis, redis_url: str, prefix: str
) -> None:
    client = connect(redis_url)
    lock = RedisLock(client, prefix=prefix)
    redis_client.client_kill_filter(_id=str(client.client_id()))

    assert lock.acquire(KEY, 60_000) is not None
    client.close()


def _lease_on(key: str) -> Lease:
    return Lease(key, "a token", datetime(2026, 3, 2, 6, 1, tzinfo=UTC))
