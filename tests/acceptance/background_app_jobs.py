"""The background jobs of ``background_app``, importable without its environment.

The test process imports them to enqueue (a ``StoredJobQueue`` needs the declarations); the
worker processes run them. Each writes what it did as JSON lines to Redis lists through the
``Records`` port the app provides: ``<prefix>bg:runs`` (every attempt's start and end, with the
worker's pid) and ``<prefix>bg:seen`` (what a job noticed: its signal aborted, its instant).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from redis import Redis

from ddd_celery.declarations.background import BackgroundJobExecution, background

NOOP = "procbg.noop"
FLAKY = "procbg.flaky"
SLOW = "procbg.slow"
RECORD = "procbg.record"
OUTLIVE = "procbg.outlive"
ONCE = "procbg.once"


class Records:
    """Where the jobs write what they did: Redis lists under the test's prefix."""

    def __init__(self, client: Redis, prefix: str) -> None:
        self.client = client
        self.prefix = prefix

    def push(self, name: str, **line: Any) -> None:
        self.client.rpush(f"{self.prefix}bg:{name}", json.dumps(line))

    def read(self, name: str) -> list[dict[str, Any]]:
        return [json.loads(item) for item in self.client.lrange(f"{self.prefix}bg:{name}", 0, -1)]


def note_run(records: Records, job: str, execution: BackgroundJobExecution, sleep_s: float) -> None:
    """Note the attempt's start, take ``sleep_s``, note its end: overlaps show in the records."""
    common = {"job": job, "job_id": execution.job_id, "attempt": execution.attempt}
    records.push("runs", edge="start", at=time.time(), pid=os.getpid(), sleep_s=sleep_s, **common)
    time.sleep(sleep_s)
    records.push("runs", edge="end", at=time.time(), pid=os.getpid(), sleep_s=sleep_s, **common)


@background(NOOP, max_attempts=5)
class NoopJob:
    """Nothing but noting its start and end, after ``payload["sleep_s"]`` (0 by default)."""

    def __init__(self, records: Records) -> None:
        self._records = records

    def run(self, payload: Any, execution: BackgroundJobExecution) -> None:
        note_run(self._records, NOOP, execution, float(payload.get("sleep_s", 0)))


@background(FLAKY, max_attempts=2, backoff_ms=300, max_backoff_ms=300)
class FlakyJob:
    """Fails every attempt."""

    def __init__(self, records: Records) -> None:
        self._records = records

    def run(self, payload: Any, execution: BackgroundJobExecution) -> None:
        note_run(self._records, FLAKY, execution, 0)
        raise RuntimeError("failing on purpose")


@background(SLOW)
class SlowJob:
    """Waits on its signal (at most 20 s) and notes when it started, when and why it stopped."""

    def __init__(self, records: Records) -> None:
        self._records = records

    def run(self, payload: Any, execution: BackgroundJobExecution) -> None:
        common = {"job": SLOW, "job_id": execution.job_id, "attempt": execution.attempt}
        self._records.push("seen", what="started", at=time.time(), **common)
        aborted = execution.signal.wait(20)
        reason = type(execution.signal.reason).__name__ if aborted else None
        self._records.push("seen", what="stopped", why=reason, at=time.time(), **common)


@background(RECORD)
class RecordJob:
    """Notes when it ran and what it was given."""

    def __init__(self, records: Records) -> None:
        self._records = records

    def run(self, payload: Any, execution: BackgroundJobExecution) -> None:
        self._records.push(
            "seen",
            job=RECORD,
            job_id=execution.job_id,
            what="ran",
            at=time.time(),
            payload=payload,
            tenant=execution.tenant_id,
        )


@background(OUTLIVE, timeout_ms=1_000, max_attempts=1)
class OutliveJob:
    """Sleeps 5 s, ignoring its signal, past its 1 s timeout; notes how long it really ran."""

    def __init__(self, records: Records) -> None:
        self._records = records

    def run(self, payload: Any, execution: BackgroundJobExecution) -> None:
        began = time.time()
        try:
            time.sleep(5)
        finally:
            self._records.push(
                "seen", job=OUTLIVE, job_id=execution.job_id, what="ran", for_s=time.time() - began
            )


@background(ONCE, max_attempts=1)
class OnceJob:
    """Notes its start and end; one attempt only: an attempt lost is a job dead."""

    def __init__(self, records: Records) -> None:
        self._records = records

    def run(self, payload: Any, execution: BackgroundJobExecution) -> None:
        note_run(self._records, ONCE, execution, 0)


JOBS = [NoopJob, FlakyJob, SlowJob, RecordJob, OutliveJob, OnceJob]
