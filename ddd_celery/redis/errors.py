"""The error of a Redis store that cannot be asked, and the one place redis-py errors are caught."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from redis.exceptions import RedisError


class StoreUnavailableError(ConnectionError):
    """Redis could not be asked, so what the store holds is unknown; ``__cause__`` says why.

    Raised by the checkpoints, the run state and the last runs (the lock raises the kernel's
    ``LockUnavailableError``). A ``ConnectionError``, so a caller that treats any unreachable
    store alike catches both.
    """


@contextmanager
def unavailable_as(error: type[ConnectionError], doing: str) -> Iterator[None]:
    """Turn any error of redis-py or of the socket into ``error``, saying what was being done."""
    try:
        yield
    except (RedisError, OSError) as cause:
        raise error(f"Redis could not be asked to {doing}: {cause}") from cause
