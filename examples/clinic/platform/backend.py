"""Where the clinic's processes meet: Redis when there is one, else files on this machine.

Chosen once by the demo and passed to the worker and beat in ``DDD_CELERY_EXAMPLE_BACKEND``,
so both processes always agree. Without it: Redis when ``REDIS_URL`` is set or a Redis answers
on localhost, otherwise the embedded default, which needs no server.

On Redis, everything the example writes (the broker's queues, the lock, run state, checkpoints
and last runs) is under a key prefix of its own, ``ddd_celery_example:`` by default, and on a
local Redis in a database of its own (15). The demo gives each run a prefix and a data folder
of its own, so two runs on one machine never meet, and deletes that run's keys, and only
those, at its end.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import redis

from ddd_celery.kernel import Clock, Lock
from ddd_celery.scheduling.checkpoints import JobCheckpoints
from ddd_celery.scheduling.last_runs import JobLastRuns
from ddd_celery.scheduling.run_state import JobRunState
from ddd_celery.sql import (
    SqlJobCheckpoints,
    SqlJobLastRuns,
    SqlJobRunState,
    SqlLock,
    sqlite_engine,
)

BACKEND = "DDD_CELERY_EXAMPLE_BACKEND"
"""``redis`` or ``embedded``: forces the backend instead of looking for a Redis."""
DATA = "DDD_CELERY_EXAMPLE_DATA"
"""The folder of the example's files; ``.example/`` at the root of the repository by default."""
PREFIX = "DDD_CELERY_EXAMPLE_PREFIX"
"""The key prefix of the example on Redis; ``ddd_celery_example:`` by default."""
LOCAL_REDIS = "redis://127.0.0.1:6379/15"
"""A database of its own on a local Redis, which the example never shares with an app of yours."""
DEFAULT_PREFIX = "ddd_celery_example:"
DEFAULT_DATA = Path(__file__).resolve().parents[3] / ".example"


@dataclass(frozen=True, slots=True)
class JobStores:
    """What ``install_jobs`` takes for beat and the workers to agree across processes."""

    lock: Lock
    checkpoints: JobCheckpoints
    run_state: JobRunState
    last_runs: JobLastRuns
    """Each job's latest outcome, so ``celery -A examples.clinic.app jobs list`` shows it."""

    def arguments(self) -> dict[str, Any]:
        """As ``install_jobs`` takes them."""
        return {
            "lock": self.lock,
            "checkpoints": self.checkpoints,
            "run_state": self.run_state,
            "last_runs": self.last_runs,
        }


@dataclass(frozen=True, slots=True)
class Backend:
    """The broker and the job stores the worker and beat share, and the example's data folder."""

    name: Literal["redis", "embedded"]
    data: Path
    redis_url: str | None = None
    key_prefix: str = DEFAULT_PREFIX
    """Before every key the example writes on Redis, the broker's included."""

    def describe(self) -> str:
        if self.redis_url is not None:
            return (
                f"Redis at {self.redis_url}, keys under {self.key_prefix} (broker, lock, "
                "checkpoints, run state, last runs)"
            )
        return (
            f"the embedded default, no server: kombu's filesystem transport and SQLite files "
            f"in {self.data}"
        )

    @property
    def clinic_database(self) -> Path:
        """The clinic's own data (reminders, closed months), whatever the backend."""
        return self.data / "clinic.sqlite3"

    def celery_settings(self) -> dict[str, Any]:
        """The app's configuration; on Redis, ddd_celery builds its stores from it."""
        if self.redis_url is not None:
            return {
                "broker_url": self.redis_url,
                "broker_transport_options": {"global_keyprefix": self.key_prefix},
                "ddd_celery_key_prefix": self.key_prefix,
            }
        broker = self.data / "broker"
        return {
            "broker_url": "filesystem://",
            "broker_transport_options": {
                "data_folder_in": str(broker / "queue"),
                "data_folder_out": str(broker / "queue"),
                "processed_folder": str(broker / "processed"),
                "control_folder": str(broker / "control"),
            },
        }

    def prepare(self) -> None:
        """Create the folders the files live in (kombu's filesystem transport needs them)."""
        self.data.mkdir(parents=True, exist_ok=True)
        if self.redis_url is None:
            for folder in ("queue", "processed", "control"):
                (self.data / "broker" / folder).mkdir(parents=True, exist_ok=True)

    def stores(self, clock: Clock) -> JobStores | None:
        """The stores of the embedded default; None on Redis, where app.conf describes them."""
        if self.redis_url is not None:
            return None
        jobs = sqlite_engine(self.data / "jobs.sqlite3")  # the SQL family, on one file
        return JobStores(
            lock=SqlLock(jobs, clock),
            checkpoints=SqlJobCheckpoints(jobs),
            run_state=SqlJobRunState(jobs, clock),
            last_runs=SqlJobLastRuns(jobs),
        )

    def start_clean(self) -> int:
        """Forget what an earlier run left: its messages, runs in progress, checkpoints.

        Deletes the example's files, or on Redis every key under its prefix and no other;
        returns how many Redis keys went. Without it, a run on a folder or a prefix that an
        earlier run used would start with the queued messages and the claims of that run (a
        burst of old occurrences, skipped overlaps).
        """
        stale = [self.clinic_database]
        if self.redis_url is None:
            stale.append(self.data / "jobs.sqlite3")
            shutil.rmtree(self.data / "broker", ignore_errors=True)
        for database in stale:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{database}{suffix}").unlink(missing_ok=True)
        self.prepare()
        return self.delete_keys()

    def delete_keys(self) -> int:
        """Delete every Redis key under the prefix, and no other; how many went (0 off Redis)."""
        if self.redis_url is None:
            return 0
        client = redis.Redis.from_url(self.redis_url)
        try:
            deleted = 0
            for keys in _batches(client.scan_iter(match=f"{_glob(self.key_prefix)}*", count=1000)):
                deleted += client.delete(*keys)
            return deleted
        finally:
            client.close()


def choose_backend(environ: Mapping[str, str]) -> Backend:
    """The backend ``environ`` asks for, or the one this machine offers."""
    data = Path(environ.get(DATA) or DEFAULT_DATA)
    forced = environ.get(BACKEND, "")
    url = environ.get("REDIS_URL")
    if forced == "embedded":
        return Backend("embedded", data)
    prefix = environ.get(PREFIX) or DEFAULT_PREFIX
    if forced == "redis" or (not forced and (url or _answers(LOCAL_REDIS))):
        return Backend("redis", data, url or LOCAL_REDIS, prefix)
    if forced:
        raise ValueError(f"{BACKEND}={forced!r}: expected 'redis' or 'embedded'")
    return Backend("embedded", data)


def _glob(text: str) -> str:
    """``text`` as a literal in a Redis ``MATCH`` pattern."""
    return "".join(f"\\{char}" if char in "*?[]\\" else char for char in text)


def _batches(keys: Iterable[bytes], size: int = 500) -> Iterator[list[bytes]]:
    batch: list[bytes] = []
    for key in keys:
        batch.append(key)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=0.3).ping())
    except (redis.RedisError, OSError):
        return False
