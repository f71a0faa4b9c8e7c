"""Reading one value per job in batches: one script call per ``BATCH`` jobs, not one per job."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ddd_celery.redis.scripts import LuaScript

BATCH = 1_000
"""Jobs per call: 10,000 jobs cost ten round trips, and no reply holds Redis for long."""


def read_many(
    script: LuaScript, prefix: str, jobs: Iterable[str], *, field: str | None = None
) -> dict[str, Any]:
    """The value of each job's key ``<prefix><job>``, or the ``field`` of each job's hash,
    decoded from JSON; None where it is missing.

    ``script`` is ``lua/json_many.lua``. A batch is three arguments, the names as one JSON
    array, and its answer one JSON array: a thousand jobs are one reply decoded in C, not a key
    packed, a reply parsed and a value decoded in Python for each. Keyed by job, duplicates
    read once. Raises what redis-py raises (the caller turns it into its store's error) and
    ``ValueError`` for a value that is not JSON, which the stores never write.
    """
    names = list(dict.fromkeys(jobs))
    values: dict[str, Any] = {}
    for start in range(0, len(names), BATCH):
        batch = names[start : start + BATCH]
        reply = script(
            keys=[prefix], args=[prefix, field or "", json.dumps(batch, ensure_ascii=False)]
        )
        values.update(zip(batch, json.loads(reply), strict=True))
    return values
