"""The one place redis-py errors are caught, turned into the kernel's ``StoreUnavailableError``.

``StoreUnavailableError`` is the kernel's, raised by every store; it is importable from here as
before.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from redis.exceptions import RedisError

from ddd_celery.kernel.errors import StoreUnavailableError

__all__ = ["StoreUnavailableError", "unavailable_as"]


@contextmanager
def unavailable_as(error: type[ConnectionError], doing: str) -> Iterator[None]:
    """Turn any error of redis-py or of the socket into ``error``, saying what was being done."""
    try:
        yield
    except (RedisError, OSError) as cause:
        raise error(f"Redis could not be asked to {doing}: {cause}") from cause
