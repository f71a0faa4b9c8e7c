"""The background jobs' store of each backend: Redis under the example's prefix, or SQLite."""

from __future__ import annotations

from ddd_celery.background import JobStore
from ddd_celery.redis import RedisJobStore, connect
from ddd_celery.sql import SqlJobStore, sqlite_engine
from examples.clinic.platform.backend import Backend


def job_store(backend: Backend) -> JobStore:
    """Where every process finds the jobs: the same Redis as the broker, or the jobs' file."""
    if backend.redis_url is not None:
        return RedisJobStore(connect(backend.redis_url), prefix=f"{backend.key_prefix}bg:")
    return SqlJobStore(sqlite_engine(backend.data / "jobs.sqlite3"))
