"""HeldConnections on the real Redis: one connection per thread, the client's retries and
timeouts kept, nothing shared with another thread or a forked child, a stale reply never read.
"""

from __future__ import annotations

import gc
import multiprocessing
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from redis import ConnectionPool, Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ddd_celery.redis import connect
from ddd_celery.redis._held_connections import HeldConnections

pytestmark = pytest.mark.redis


@pytest.fixture
def client(redis_url: str) -> Iterator[Redis]:
    client = connect(redis_url)
    yield client
    client.close()


def taken(pool: Any) -> Any:
    """A connection of ``pool``, given the command's name redis-py wanted before 5.3."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # a name is deprecated from 5.3 on
        return pool.get_connection("CLIENT")


def client_id(connections: HeldConnections) -> int:
    return int(connections.execute("CLIENT", "ID"))


def in_thread(connections: HeldConnections) -> int:
    found: list[int] = []
    thread = threading.Thread(target=lambda: found.append(client_id(connections)))
    thread.start()
    thread.join()
    return found[0]


def test_a_thread_sends_every_command_on_the_one_connection_it_took(client: Redis) -> None:
    connections = HeldConnections(client)

    first = client_id(connections)

    assert [client_id(connections) for _ in range(5)] == [first] * 5
    assert client.connection_pool._in_use_connections  # type: ignore[attr-defined]


def test_two_threads_hold_two_connections(client: Redis) -> None:
    connections = HeldConnections(client)
    ready, done = threading.Barrier(2), threading.Event()
    ids: list[int] = []

    def hold() -> None:
        ids.append(client_id(connections))
        ready.wait()
        done.wait()

    thread = threading.Thread(target=hold)
    thread.start()
    ready.wait()
    mine = client_id(connections)
    done.set()
    thread.join()

    assert ids[0] != mine


def test_a_thread_that_ends_gives_its_connection_back_to_the_pool(client: Redis) -> None:
    with warnings.catch_warnings():  # what earlier tests left to the collector is theirs
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    connections = HeldConnections(client)

    held = in_thread(connections)
    gc.collect()

    reused = taken(client.connection_pool)
    try:
        reused.send_command("CLIENT", "ID")
        assert int(reused.read_response()) == held
    finally:
        client.connection_pool.release(reused)


def _child_client_id(connections: HeldConnections, sent: Any) -> None:
    sent.send(client_id(connections))


def test_a_forked_child_never_uses_its_parents_connection(client: Redis) -> None:
    connections = HeldConnections(client)
    parents = client_id(connections)
    context = multiprocessing.get_context("fork")
    received, sent = context.Pipe(duplex=False)

    child = context.Process(target=_child_client_id, args=(connections, sent))
    child.start()
    child.join(10)

    assert child.exitcode == 0
    assert received.recv() != parents
    assert client_id(connections) == parents  # the parent's connection still answers its own


def test_a_connection_the_server_dropped_is_replaced_by_the_clients_retry(
    client: Redis, redis_client: Redis
) -> None:
    connections = HeldConnections(client)
    dropped = client_id(connections)

    redis_client.client_kill_filter(_id=str(dropped))

    assert connections.execute("PING") in (True, b"PONG", "PONG")
    assert client_id(connections) != dropped


def test_without_retries_a_dropped_connection_is_the_callers_error(
    redis_url: str, redis_client: Redis
) -> None:
    client = connect(redis_url, retries=0)
    connections = HeldConnections(client)
    redis_client.client_kill_filter(_id=str(client_id(connections)))

    with pytest.raises(RedisConnectionError):
        connections.execute("PING")

    assert connections.execute("PING") in (True, b"PONG", "PONG")  # connected again
    client.close()


def test_a_reply_cut_short_by_a_timeout_is_never_read_as_the_next_commands(
    redis_url: str, prefix: str
) -> None:
    client = connect(redis_url, timeout=0.2, retries=0)
    connections = HeldConnections(client)
    connections.execute("PING")

    with pytest.raises(RedisTimeoutError):
        connections.execute("BLPOP", f"{prefix}empty", 1)  # answers after 1 s, read for 0.2 s

    connections.execute("SET", f"{prefix}k", "v")
    assert connections.execute("GET", f"{prefix}k") == b"v"
    client.close()


def test_an_error_reply_leaves_the_connection_in_step(client: Redis) -> None:
    connections = HeldConnections(client)
    held = client_id(connections)

    with pytest.raises(NoScriptError):
        connections.execute("EVALSHA", "0" * 40, 0)

    assert client_id(connections) == held


def test_a_single_connection_client_keeps_its_own_connection(redis_url: str) -> None:
    client = Redis.from_url(redis_url, single_connection_client=True)
    connections = HeldConnections(client)

    assert client_id(connections) == client.client_id()
    assert in_thread(connections) == client.client_id()
    client.close()


def test_a_pool_that_requires_the_command_name_is_given_it(
    client: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis-py's pools before 5.3 give a connection only for a command's name (issue 18.8):
    without it every script call raised ``TypeError``."""
    real, names = ConnectionPool.get_connection, []

    def get_connection(pool: Any, command_name: str, *keys: Any, **options: Any) -> Any:
        names.append(command_name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return real(pool, command_name, *keys, **options)

    monkeypatch.setattr(ConnectionPool, "get_connection", get_connection)
    connections = HeldConnections(client)

    held = client_id(connections)

    assert names == ["CLIENT"]
    assert client_id(connections) == held  # taken once, then held
    assert names == ["CLIENT"]


# -- execute_each: a batch's commands, each sent as it is made ---------------------------------


def test_commands_sent_each_as_it_is_made_answer_in_order_on_the_held_connection(
    client: Redis, prefix: str
) -> None:
    connections = HeldConnections(client)
    held = client_id(connections)
    made: list[int] = []

    def commands() -> Iterator[tuple[Any, ...]]:
        for n in range(3):
            made.append(n)
            yield ("RPUSH", f"{prefix}list", n)
        yield ("CLIENT", "ID")

    assert connections.execute_each(commands()) == [1, 2, 3, held]
    assert made == [0, 1, 2]
    assert connections.execute_each(iter(())) == []
    assert client.lrange(f"{prefix}list", 0, -1) == [b"0", b"1", b"2"]


def test_an_error_reply_among_them_is_raised_once_every_reply_is_read(
    client: Redis, prefix: str
) -> None:
    connections = HeldConnections(client)
    held = client_id(connections)

    with pytest.raises(NoScriptError):
        connections.execute_each(
            [("SET", f"{prefix}a", "1"), ("EVALSHA", "0" * 40, 0), ("SET", f"{prefix}b", "2")]
        )

    assert client.mget(f"{prefix}a", f"{prefix}b") == [b"1", b"2"]  # the ones after it ran too
    assert client_id(connections) == held  # in step: no reply left unread


def test_a_command_that_cannot_be_made_is_raised_once_those_sent_are_answered(
    client: Redis, prefix: str
) -> None:
    connections = HeldConnections(client)
    held = client_id(connections)

    def commands() -> Iterator[tuple[Any, ...]]:
        yield ("SET", f"{prefix}a", "1")
        raise ValueError("a naive instant")

    with pytest.raises(ValueError, match="naive"):
        connections.execute_each(commands())

    assert client.get(f"{prefix}a") == b"1"
    assert client_id(connections) == held


def test_commands_on_a_dropped_connection_are_sent_again_by_the_clients_retry(
    client: Redis, redis_client: Redis, prefix: str
) -> None:
    connections = HeldConnections(client)
    dropped = client_id(connections)
    redis_client.client_kill_filter(_id=str(dropped))

    replies = connections.execute_each(
        [("SET", f"{prefix}a", "1"), ("SET", f"{prefix}b", "2"), ("CLIENT", "ID")]
    )

    assert all(reply in (True, b"OK", "OK") for reply in replies[:2])
    assert replies[2] != dropped
    assert client.mget(f"{prefix}a", f"{prefix}b") == [b"1", b"2"]
