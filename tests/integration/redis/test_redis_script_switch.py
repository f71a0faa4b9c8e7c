"""The one switch of the held connections: ``HELD`` false runs every script through redis-py's
own ``Script`` and pool, with the same answers; true holds one connection per thread."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from redis import Redis

from ddd_celery.redis import RedisLock, _held_connections, connect
from ddd_celery.redis.scripts import LuaScript

pytestmark = pytest.mark.redis

ECHO = "return {KEYS[1], ARGV[1]}"


@pytest.fixture
def client(redis_url: str) -> Iterator[Redis]:
    client = connect(redis_url)
    yield client
    client.close()


def count_checkouts(client: Redis, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts each connection taken from ``client``'s pool from now on."""
    pool: Any = client.connection_pool
    taken = pool.get_connection
    checkouts = [0]

    def counted(*args: Any, **kwargs: Any) -> Any:
        checkouts[0] += 1
        return taken(*args, **kwargs)

    monkeypatch.setattr(pool, "get_connection", counted)
    return checkouts


def test_held_scripts_take_one_connection_for_the_thread_and_keep_it(
    client: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _held_connections.HELD is True
    script = LuaScript(client, ECHO)
    script(keys=["k"], args=["v"])  # the first call takes the thread's connection
    checkouts = count_checkouts(client, monkeypatch)

    answers = [script(keys=["k"], args=[str(n)]) for n in range(3)]

    assert checkouts == [0]
    assert answers == [[b"k", b"0"], [b"k", b"1"], [b"k", b"2"]]
    assert client.connection_pool._in_use_connections  # type: ignore[attr-defined]


def test_with_the_switch_off_each_script_is_redis_pys_own_with_the_same_answers(
    client: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_held_connections, "HELD", False)
    script = LuaScript(client, ECHO)
    script(keys=["k"], args=["v"])  # loads it where Redis did not have it
    checkouts = count_checkouts(client, monkeypatch)

    answers = [script(keys=["k"], args=[str(n)]) for n in range(3)]

    assert checkouts == [3]
    assert answers == [[b"k", b"0"], [b"k", b"1"], [b"k", b"2"]]
    assert not client.connection_pool._in_use_connections  # type: ignore[attr-defined]


@pytest.mark.parametrize("held", [True, False], ids=["held", "redis-py's path"])
def test_a_store_answers_the_same_on_either_path(
    client: Redis, monkeypatch: pytest.MonkeyPatch, held: bool
) -> None:
    monkeypatch.setattr(_held_connections, "HELD", held)
    prefix = f"test:switch:{uuid.uuid4().hex}:"
    lock = RedisLock(client, prefix=prefix)
    try:
        lease = lock.acquire("job", 10_000)
        assert lease is not None
        assert lock.acquire("job", 10_000) is None
        lock.release(lease)
        assert client.get(f"{prefix}job") is None
    finally:
        client.delete(f"{prefix}job")


@pytest.mark.parametrize("held", [True, False], ids=["held", "redis-py's path"])
def test_a_script_run_for_each_of_many_calls_answers_each_in_order_loaded_where_missing(
    client: Redis, monkeypatch: pytest.MonkeyPatch, held: bool
) -> None:
    """``each``, a batch's calls: a script Redis does not have yet is loaded, then every call
    is sent again; the answers are those of the calls one by one."""
    monkeypatch.setattr(_held_connections, "HELD", held)
    script = LuaScript(client, f"-- {uuid.uuid4().hex}, so that Redis has it not\n{ECHO}")

    answers = script.each((["k"], [str(n)]) for n in range(3))

    assert answers == [[b"k", b"0"], [b"k", b"1"], [b"k", b"2"]]
    assert script.each(iter(())) == []


def test_a_script_run_for_each_on_a_client_sent_each_in_turn_runs_every_call_once_loaded(
    redis_url: str,
) -> None:
    """A client whose connections redis-py routes itself gets each call in turn: the first
    finds the script missing, and once it is loaded every call runs, the rest included."""
    client = Redis.from_url(redis_url, single_connection_client=True)
    script = LuaScript(client, f"-- {uuid.uuid4().hex}, so that Redis has it not\n{ECHO}")

    answers = script.each((["k"], [str(n)]) for n in range(3))

    assert answers == [[b"k", b"0"], [b"k", b"1"], [b"k", b"2"]]
    client.close()
