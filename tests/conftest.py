"""Fixtures on the real servers every tier shares: one Redis client, one PostgreSQL engine.

Tests fail, never skip, when a server cannot be reached (``scripts/services.sh`` starts both).
Other tests share the servers, so nothing here flushes or drops anything: each test keeps its
keys or tables under a prefix of its own and deletes them afterwards. The URLs are in
``tests/services.py``; ``tests/README.md`` says where each kind of test lives.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from services import DATABASE_URL, REDIS_URL

if TYPE_CHECKING:
    from redis import Redis
    from sqlalchemy import Engine


@pytest.fixture(scope="session")
def redis_url() -> str:
    return REDIS_URL


@pytest.fixture(scope="session")
def redis_client(redis_url: str) -> Iterator[Redis]:
    """A client of the real Redis, made by the library's own ``connect``; it pings first."""
    # imported when a test asks for it: the unit tests run without redis-py's import cost
    from ddd_celery.redis import connect  # noqa: PLC0415

    client = connect(redis_url)
    client.ping()
    yield client
    client.close()


@pytest.fixture(scope="session")
def engine() -> Iterator[Engine]:
    """An engine on the real PostgreSQL, shared by the session and disposed at its end."""
    from sqlalchemy import create_engine  # noqa: PLC0415

    engine = create_engine(DATABASE_URL, connect_args={"connect_timeout": 2})
    yield engine
    engine.dispose()
