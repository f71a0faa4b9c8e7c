"""The kernel Lock between processes, on Redis."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from redis.cluster import RedisCluster
from redis.exceptions import ResponseError

from ddd_celery.kernel.clock import Clock, SystemClock
from ddd_celery.kernel.lock import Lease, Lock, LockUnavailableError
from ddd_celery.redis.connection import RedisClient
from ddd_celery.redis.errors import unavailable_as
from ddd_celery.redis.scripts import register


class RedisLock(Lock):
    """One ``SET <prefix><key> <token> NX PX <ttl_ms>`` per acquire (a refused one reads the key
    once more); release by owner token.

    With the default empty prefix a key reads in Redis exactly as the scheduler names it,
    ``job:<name>:<instant>``; its value is the owner token, and Redis expires it on its own
    clock, so a holder that dies frees the key after its time to live. Release is one EVALSHA
    of ``lua/release.lua``, which deletes the key only while it holds the lease's token.

    ``clock`` only dates ``Lease.expires_at``: it is read before the request is sent, so the
    lease never claims more than Redis grants (clocks agreeing).
    """

    def __init__(
        self, client: RedisClient, *, prefix: str = "", clock: Clock | None = None
    ) -> None:
        self._client = client
        self._prefix = prefix
        self._clock = clock or SystemClock()
        self._release = register(client, "release.lua", after="occurrence_lib.lua")

    @property
    def client(self) -> RedisClient:
        """The client this store asks, for a store that joins its keys in one script."""
        return self._client

    @property
    def address(self) -> str:
        """Where the lock is, for a line that says it cannot be reached: host and port (or
        socket) and database, never a password."""
        return redis_address(self._client)

    @property
    def prefix(self) -> str:
        """What this store puts before each key name."""
        return self._prefix

    @property
    def clock(self) -> Clock:
        """The clock that dates ``Lease.expires_at``."""
        return self._clock

    def acquire(self, key: str, ttl_ms: int) -> Lease | None:
        if ttl_ms <= 0:
            raise ValueError(f"a lock's time to live is a positive number of ms, not {ttl_ms}")
        token = uuid.uuid4().hex
        asked_at = self._clock.now()
        with unavailable_as(LockUnavailableError, f"acquire the lock {key!r}"):
            taken = self._client.set(self._prefix + key, token, nx=True, px=ttl_ms)
            if not taken:
                taken = self._resent_and_taken(key, token)
        if not taken:
            return None
        return Lease(key, token, asked_at + timedelta(milliseconds=ttl_ms))

    def _resent_and_taken(self, key: str, token: str) -> bool:
        """Whether a refused SET was this acquire's own, sent again by the client's retry.

        redis-py sends a command again on a new connection when its reply is late: the first
        send may have set the key, and the second then reads it as held by another owner,
        which would record ``skipped-locked`` and run the occurrence nowhere. The key holding
        this acquire's token says the first send took it. Only a refused acquire pays this
        read; a taken one stays one ``SET``.
        """
        try:
            return bool(self._client.get(self._prefix + key) == token.encode())
        except ResponseError:  # a value that is no lock's: held, as the SET said
            return False

    def release(self, lease: Lease) -> bool:
        with unavailable_as(LockUnavailableError, f"release the lock {lease.key!r}"):
            released = self._release(keys=[self._prefix + lease.key], args=[lease.token])
        return bool(released)


def redis_address(client: RedisClient) -> str:
    """``Redis at host:port db N`` (or its socket path) of a client, ``Redis Cluster at
    host:port`` (a node it started from) of a cluster's; never a password."""
    if isinstance(client, RedisCluster):
        node: Any = client.get_default_node()  # type: ignore[no-untyped-call]
        return f"Redis Cluster at {node.host}:{node.port}" if node else "Redis Cluster"
    kwargs = client.connection_pool.connection_kwargs
    where = kwargs.get("path") or f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"
    return f"Redis at {where} db {kwargs.get('db', 0)}"
