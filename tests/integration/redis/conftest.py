"""Fixtures of the Redis-specific tests: the real Redis on REDIS_URL, and Redis made to fail.

No ``__init__.py`` here: a package named ``redis`` would shadow redis-py. Tests fail, never
skip, when Redis cannot be reached (CI starts one), keep their keys under a prefix of their own
and delete them afterwards: other tests share the server, so nothing here flushes it.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fault_proxy import FaultProxy
from redis import ConnectionPool, Redis
from redis.connection import Connection
from services import REDIS_URL


@pytest.fixture
def prefix(redis_client: Redis) -> Iterator[str]:
    """A key prefix of this test's own; its keys are deleted afterwards."""
    prefix = f"test:redis:{uuid.uuid4().hex}:"
    yield prefix
    for key in redis_client.scan_iter(match=f"{prefix}*"):
        redis_client.delete(key)


class RecordingConnection(Connection):
    """A connection that notes every command it sends: one command is one round trip."""

    def __init__(self, *, commands: list[tuple[str, ...]], **kwargs: Any) -> None:
        super().__init__(**kwargs)  # type: ignore[no-untyped-call]
        self.commands = commands

    def send_command(self, *args: Any, **kwargs: Any) -> None:
        self.commands.append(tuple(_text(arg) for arg in args))
        super().send_command(*args, **kwargs)  # type: ignore[no-untyped-call]


def _text(arg: object) -> str:
    return arg.decode() if isinstance(arg, bytes) else str(arg)


@pytest.fixture
def recorded() -> Iterator[tuple[Redis, list[tuple[str, ...]]]]:
    """A client on the real Redis, connected, and the list of commands it sends from now on."""
    commands: list[tuple[str, ...]] = []
    pool = ConnectionPool.from_url(
        REDIS_URL, connection_class=RecordingConnection, commands=commands
    )
    client = Redis(connection_pool=pool)
    client.ping()
    commands.clear()
    yield client, commands
    client.close()
    pool.disconnect()


@pytest.fixture
def closed_port_url() -> str:
    """The URL of a port nothing listens on: connecting is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"


@pytest.fixture
def silent_url() -> Iterator[str]:
    """The URL of a server that accepts connections and never answers, like a hung Redis."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield f"redis://127.0.0.1:{server.getsockname()[1]}/0"


@pytest.fixture
def redis_proxy() -> Iterator[FaultProxy]:
    """The suite's fault proxy in front of the real Redis, to cut and restore as an outage."""
    with FaultProxy.to_url(REDIS_URL) as proxy:
        yield proxy
