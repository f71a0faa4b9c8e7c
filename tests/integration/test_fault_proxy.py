"""The fault proxy does what the fault tests take it to do, against the real Redis."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from fault_proxy import FaultProxy
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from services import REDIS_URL

pytestmark = pytest.mark.redis


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    with FaultProxy.to_url(REDIS_URL) as running:
        yield running


def client(proxy: FaultProxy, timeout: float = 2.0) -> Redis:
    return Redis.from_url(proxy.url(REDIS_URL), socket_timeout=timeout)


def timed(call: Callable[[], object]) -> float:
    start = time.monotonic()
    call()
    return time.monotonic() - start


def test_it_relays_commands_and_keeps_the_database_of_the_url(proxy: FaultProxy) -> None:
    url = proxy.url("redis://user:secret@127.0.0.1:6379/3")
    assert url == f"redis://user:secret@127.0.0.1:{proxy.port}/3"
    assert client(proxy).ping() is True
    assert proxy.connections == 1


def test_a_delayed_reply_arrives_late_and_only_the_counted_ones(proxy: FaultProxy) -> None:
    redis = client(proxy)
    redis.ping()
    proxy.delay_replies(0.4, count=1)
    assert timed(redis.ping) >= 0.4
    assert timed(redis.ping) < 0.3
    assert proxy.delayed == 1


def test_every_nth_request_and_matching_requests_are_delayed(proxy: FaultProxy) -> None:
    redis = client(proxy)
    redis.ping()
    proxy.delay_replies(0.3, every=3)
    late = [timed(redis.ping) >= 0.3 for _ in range(6)]
    assert late == [False, False, True, False, False, True]
    proxy.delay_replies(0.3, matching=b"ECHO")
    assert timed(redis.ping) < 0.25
    assert timed(lambda: redis.echo("x")) >= 0.3


def test_a_reply_later_than_the_client_timeout_is_a_timeout(proxy: FaultProxy) -> None:
    redis = client(proxy, timeout=0.2)
    redis.ping()
    proxy.delay_replies(0.5, count=1)
    with pytest.raises(RedisTimeoutError):
        redis.ping()


def test_a_hang_answers_nothing_until_resumed(proxy: FaultProxy) -> None:
    redis = client(proxy, timeout=0.3)
    redis.ping()
    proxy.hang()
    with pytest.raises(RedisTimeoutError):
        redis.ping()
    proxy.resume()
    assert client(proxy).ping() is True


def test_a_cut_closes_connections_and_refuses_new_ones_until_restored(proxy: FaultProxy) -> None:
    redis = client(proxy)
    redis.ping()
    proxy.cut()
    with pytest.raises(RedisConnectionError):
        Redis.from_url(proxy.url(REDIS_URL), socket_timeout=1, retry_on_timeout=False).ping()
    proxy.restore()
    assert client(proxy).ping() is True
