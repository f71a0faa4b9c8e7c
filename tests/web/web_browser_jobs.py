"""The jobs of the browser tests' app, importable without its environment (the test enqueues).

``browser.heartbeat`` runs every 2 seconds; ``browser.charge`` fails while the Redis key
``<prefix>failing`` exists (one attempt: dead at once), and notes each attempt that succeeded in
``<prefix>charged``.
"""

from __future__ import annotations

from typing import Any

from redis import Redis

from ddd_celery.declarations import JobExecution, scheduled
from ddd_celery.declarations.background import BackgroundJobExecution, background

HEARTBEAT = "browser.heartbeat"
CHARGE = "browser.charge"
QUEUE = "browser"


class Switches:
    """What the test switches on and off for the jobs, in Redis under its prefix."""

    def __init__(self, client: Redis, prefix: str) -> None:
        self.client = client
        self.prefix = prefix

    def failing(self) -> bool:
        return bool(self.client.exists(f"{self.prefix}failing"))


@scheduled(HEARTBEAT, every="2s")
class HeartbeatJob:
    def run(self, execution: JobExecution) -> None:
        return None


@background(CHARGE, max_attempts=1)
class ChargeJob:
    def __init__(self, switches: Switches) -> None:
        self._switches = switches

    def run(self, payload: Any, execution: BackgroundJobExecution) -> None:
        if self._switches.failing():
            raise RuntimeError("the card was declined")
        self._switches.client.rpush(f"{self._switches.prefix}charged", execution.job_id)
