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
from typing import Any

from redis import BlockingConnectionPool, ConnectionPool, Redis
from redis.cluster import RedisCluster

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
        held: _Held | None = getattr(self._local, "held", None)
        if held is None or held.pid != os.getpid():
            pool = self._pool
            held = _Held(
                pool, pool.get_connection(args[0]) if self._named else pool.get_connection()
            )
            self._local.held = held
        connection = held.connection
        return connection.retry.call_with_retry(
            lambda: _send_and_read(connection, args), lambda _error: connection.disconnect()
        )


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
