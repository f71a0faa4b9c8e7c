"""Reading one key per job in pipelined batches: one round trip per ``BATCH`` jobs, not per job."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from redis import Redis
from redis.client import Pipeline

BATCH = 1_000
"""Commands per pipeline: large enough that 10,000 jobs cost ten round trips, small enough that
no reply holds Redis (or this process's memory) for long."""


def pipelined(
    client: Redis, names: Iterable[str], command: Callable[[Pipeline, str], object]
) -> dict[str, Any]:
    """Send ``command(pipeline, name)`` for each name, ``BATCH`` per round trip; the replies.

    Raises what redis-py raises; the caller turns it into its store's error.
    """
    replies: dict[str, Any] = {}
    batch: list[str] = []
    for name in dict.fromkeys(names):
        batch.append(name)
        if len(batch) == BATCH:
            replies.update(_send(client, batch, command))
            batch = []
    if batch:
        replies.update(_send(client, batch, command))
    return replies


def _send(
    client: Redis, names: list[str], command: Callable[[Pipeline, str], object]
) -> dict[str, Any]:
    with client.pipeline(transaction=False) as pipeline:
        for name in names:
            command(pipeline, name)
        return dict(zip(names, pipeline.execute(), strict=True))
