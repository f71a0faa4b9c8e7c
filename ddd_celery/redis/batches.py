"""Reading one value per job in batches: one script call per ``BATCH`` jobs, not one per job."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from redis.commands.core import Script

BATCH = 1_000
"""Keys per call: 10,000 jobs cost ten round trips, and no reply holds Redis for long."""


def read_many(script: Script, keys: Iterable[str], *, field: str | None = None) -> dict[str, Any]:
    """Each key's value, or the ``field`` of each hash, decoded from JSON; None where missing.

    ``script`` is ``lua/json_many.lua``: it answers a batch as one JSON array, so a thousand
    values are one reply and one decode in C, not a reply parsed and a value decoded in Python
    for each key. Keyed by the key as given, duplicates read once. Raises what redis-py raises
    (the caller turns it into its store's error) and ``ValueError`` for a value that is not
    JSON, which the stores never write.
    """
    names = list(dict.fromkeys(keys))
    args = [] if field is None else [field]
    values: dict[str, Any] = {}
    for start in range(0, len(names), BATCH):
        batch = names[start : start + BATCH]
        values.update(zip(batch, json.loads(script(keys=batch, args=args)), strict=True))
    return values
