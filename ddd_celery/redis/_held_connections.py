"""Commands sent on a connection the calling thread holds: the stores' scripts.

For each command redis-py takes a connection from its pool, gives it back, and runs its
observability hooks around it, on the hot round trips of beat and the workers (what that costs
is in docs/benchmarks.md, "What the private rebuilds save"). Here each thread takes one
connection from the client's own pool at its first script and keeps it, with the client's
timeouts, its retries (``Retry``, on a new connection), its encoding and its health checks: only
the per-command bookkeeping is skipped. ``HELD`` is the one switch back to redis-py's own path.

A thread holds its connection until it ends (it goes back to the pool then), beside the one
the client's own commands take from the pool, and a forked child never uses its parent's. A
client whose connections redis-py routes itself (a single-connection client, Sentinel, a
cluster, anything but the plain pools) is sent its commands as usual.

redis-py's pools before 5.3 require the command's name to give a connection (and ignore it);
from 5.3 on, a name given is deprecated. What the pool asks for is read once, from its signature.
"""

from __future__ import annotations

import inspect
import os
import threading
from collections.abc import Iterable
from typing import Any

from redis import BlockingConnectionPool, ConnectionPool, Redis
from redis.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

_PLAIN_POOLS = (ConnectionPool, BlockingConnectionPool)

HELD = True
"""The one switch: False runs every script through redis-py's own ``Script`` and pool."""


class HeldConnections:
    """Runs commands of ``client`` on the connection this thread holds (see the module)."""

    def __init__(self, client: Redis | RedisCluster) -> None:
        self._client: Any = client
        pool = getattr(client, "connection_pool", None)
        plain = (
            type(pool) in _PLAIN_POOLS
            and getattr(client, "connection", None) is None
            and type(client).execute_command is Redis.execute_command
        )
        self._pool: Any = pool if plain else None
        self._named = plain and _requires_command_name(pool)
        self._local = threading.local()

    def execute(self, *args: Any) -> Any:
        """``client.execute_command(*args)``, on this thread's connection where it can be.

        The reply is Redis's, unparsed: meant for commands redis-py returns as they come
        (``EVALSHA``), not for those it converts (``PING`` to True).
        """
        if self._pool is None:
            return self._client.execute_command(*args)
        connection = self._connection(args[0])
        return connection.retry.call_with_retry(
            lambda: _send_and_read(connection, args), lambda _error: connection.disconnect()
        )

    def execute_each(self, commands: Iterable[tuple[Any, ...]]) -> list[Any]:
        """Each of ``commands`` in turn, its replies in order: each is sent as soon as the
        iterable makes it, before any reply is read, so Redis runs one while the caller makes
        the next (a batch's script calls: the work of both sides overlaps).

        Retried as ``execute`` is, on a new connection: the commands sent so far are sent
        again, then the rest (safe for commands that are, as every store's script is). An error
        reply raises once every reply is read, the first; what making a command raises is
        raised once the replies of those sent are read. Without a held connection, each is
        ``execute``'s in turn.
        """
        if self._pool is None:
            return [self._client.execute_command(*args) for args in commands]
        pending = iter(commands)
        sent: list[tuple[Any, ...]] = []
        first = next(pending, None)
        if first is None:
            return []
        sent.append(first)
        connection = self._connection(first[0])

        def send_all_then_read() -> list[Any]:
            for args in sent:
                connection.send_command(*args)
            failure: BaseException | None = None
            try:
                for args in pending:
                    sent.append(args)
                    connection.send_command(*args)
            except (RedisConnectionError, RedisTimeoutError):  # retried, on a new connection
                raise
            except BaseException as error:  # making a command failed: read what was sent
                failure = error
            replies: list[Any] = []
            refused: ResponseError | None = None
            for _ in sent:
                try:
                    replies.append(connection.read_response())
                except ResponseError as error:
                    refused = refused or error
                    replies.append(None)
            if failure is not None:
                raise failure
            if refused is not None:
                raise refused
            return replies

        replies: list[Any] = connection.retry.call_with_retry(
            send_all_then_read, lambda _error: connection.disconnect()
        )
        return replies

    def _connection(self, command: str) -> Any:
        """This thread's connection, taken from the pool at its first command."""
        held: _Held | None = getattr(self._local, "held", None)
        if held is None or held.pid != os.getpid():
            pool = self._pool
            held = _Held(
                pool, pool.get_connection(command) if self._named else pool.get_connection()
            )
            self._local.held = held
        return held.connection


def _requires_command_name(pool: Any) -> bool:
    """Whether ``pool.get_connection`` must be given a command's name (redis-py before 5.3)."""
    parameter = inspect.signature(pool.get_connection).parameters.get("command_name")
    return parameter is not None and parameter.default is inspect.Parameter.empty


class _Held:
    """One thread's connection, given back to its pool when the thread's locals go."""

    def __init__(self, pool: Any, connection: Any) -> None:
        self.pid = os.getpid()
        self.pool = pool
        self.connection = connection

    def __del__(self) -> None:
        if self.pid == os.getpid():  # a child's copy is its parent's: the pool resets it
            self.pool.release(self.connection)


def _send_and_read(connection: Any, args: tuple[Any, ...]) -> Any:
    connection.send_command(*args)
    return connection.read_response()
