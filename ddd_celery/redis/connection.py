"""A Redis client for the scheduler: one that fails fast when Redis is down.

redis-py's defaults wait 5 s per socket operation and retry 10 times with backoff, so a Redis
that is down or unreachable holds a call for many seconds and with it every job of beat. The
client built here gives up within about ``timeout * (retries + 1)`` seconds, and the stores turn
that failure into their error (``LockUnavailableError``, ``StoreUnavailableError``): the
occurrence is recorded ``failed``, ``JOB_LOCK_UNAVAILABLE``, and beat keeps ticking.
"""

from __future__ import annotations

from redis import Redis, exceptions
from redis.backoff import NoBackoff
from redis.retry import Retry


def connect(url: str, *, timeout: float = 1.0, retries: int = 1) -> Redis:
    """A client for ``url`` (``redis://``, ``rediss://`` or ``unix://``) that fails fast.

    ``timeout`` bounds connecting and each reply, in seconds. ``retries`` retries a command at
    once, on a new connection, when one breaks or times out: a pooled connection that the
    network dropped without a word then costs one timeout instead of an error.
    """
    return Redis.from_url(
        url,
        socket_connect_timeout=timeout,
        socket_timeout=timeout,
        retry=Retry(NoBackoff(), retries),
        # what Retry retries anyway: redis-py 5 retries a client's command only on these
        retry_on_error=[exceptions.ConnectionError, exceptions.TimeoutError],
    )
