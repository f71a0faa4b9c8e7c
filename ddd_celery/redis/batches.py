"""Reading one key per job in batches: one command per ``BATCH`` jobs, not one per job."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from redis import Redis
from redis.commands.core import Script

BATCH = 1_000
"""Keys per command: 10,000 jobs cost ten round trips, and no reply holds Redis for long."""


def read_many(
    client: Redis, keys: Iterable[str], *, field: str | None = None, script: Script | None = None
) -> dict[str, Any]:
    """Each key's value (``MGET``) or the ``field`` of each hash (``script``, ``hget_many.lua``).

    Keyed by the key as given, duplicates read once. Raises what redis-py raises; the caller
    turns it into its store's error.
    """
    names = list(dict.fromkeys(keys))
    values: dict[str, Any] = {}
    for start in range(0, len(names), BATCH):
        batch = names[start : start + BATCH]
        if field is None:
            replies = client.mget(batch)
        else:
            assert script is not None  # a hash field is read by the script
            replies = script(keys=batch, args=[field])
        values.update(zip(batch, replies, strict=True))
    return values
