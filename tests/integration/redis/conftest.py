"""Fixtures of the Redis-specific tests: the real Redis on REDIS_URL, and Redis made to fail.

No ``__init__.py`` here: a package named ``redis`` would shadow redis-py. Tests fail, never
skip, when Redis cannot be reached (CI starts one), keep their keys under a prefix of their own
and delete them afterwards: other tests share the server, so nothing here flushes it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
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


class RedisProxy:
    """A TCP relay to the real Redis that a test cuts and restores, as an outage would."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 6379)
        self._server = socket.create_server(("127.0.0.1", 0))
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@" if userinfo else ""
        netloc += f"127.0.0.1:{self._server.getsockname()[1]}"
        self.url = parts._replace(netloc=netloc).geturl()
        self._up = True
        self._open: list[socket.socket] = []
        self._mutex = threading.Lock()
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    def cut(self) -> None:
        """Close every relayed connection and refuse new ones until ``restore``."""
        with self._mutex:
            self._up = False
            for sock in self._open:
                _close(sock)
            self._open.clear()

    def restore(self) -> None:
        with self._mutex:
            self._up = True

    def close(self) -> None:
        self.cut()
        _close(self._server)
        self._acceptor.join()

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self._server.accept()
            except OSError:
                return
            with self._mutex:
                if not self._up:
                    _close(downstream)
                    continue
                upstream = socket.create_connection(self._upstream)
                self._open += [downstream, upstream]
            for source, sink in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
    finally:
        _close(source)
        _close(sink)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


@pytest.fixture
def redis_proxy() -> Iterator[RedisProxy]:
    proxy = RedisProxy(REDIS_URL)
    yield proxy
    proxy.close()
