"""Fixtures of the Celery tests: the real Redis, Celery apps on it, and helpers to wait.

No ``__init__.py`` here: a package named ``celery`` would shadow Celery itself. Tests fail,
never skip, when Redis cannot be reached. Other tests share the server, so nothing is flushed:
each test keeps its keys under a prefix of its own, Celery's included (kombu's
``global_keyprefix``), and deletes them afterwards. Queues are unique per test, so an in-process
worker never takes another test's messages.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from celery_support import AppFactory, Runs
from redis import Redis
from services import REDIS_URL


@pytest.fixture
def redis_prefix(redis_client: Redis) -> Iterator[str]:
    """A key prefix of this test's own; every key under it is deleted afterwards."""
    prefix = f"test:celery:{uuid.uuid4().hex}:"
    yield prefix
    for key in redis_client.scan_iter(match=f"{prefix}*"):
        redis_client.delete(key)


@pytest.fixture
def make_app(redis_prefix: str) -> Iterator[AppFactory]:
    """Build Celery apps on the real Redis broker, keyed under the test's prefix.

    Each app has a name and a default queue of its own; settings given override the defaults.
    Apps are closed afterwards.
    """
    apps: list[Celery] = []

    def make(**settings: Any) -> Celery:
        name = f"test-{uuid.uuid4().hex[:12]}"
        app = Celery(name, broker=REDIS_URL, set_as_current=False)
        app.conf.update(
            broker_transport_options={"global_keyprefix": redis_prefix},
            broker_connection_retry_on_startup=True,
            task_default_queue=f"{name}-default",
            worker_hijack_root_logger=False,
            # the stores a test does not give are in memory, as on a broker that is not Redis;
            # the tests of the ddd_celery_* settings give their own
            ddd_celery_redis_url=None,
        )
        app.conf.update(settings)
        apps.append(app)
        return app

    yield make
    for app in apps:
        close_result_backend(app)
        app.close()


def close_result_backend(app: Celery) -> None:
    """Disconnect a Redis result backend's connections, which ``app.close`` leaves open.

    Celery's Redis backend and its result consumer hold each other, so a backend left to the
    garbage collector goes with its connections in one cycle, whose finalizers run in any order:
    a socket finalized before its connection closed it is an unraisable ``ResourceWarning`` in
    whatever test runs then. An app with a result backend shares one across threads
    (``result_backend_thread_safe``), the worker's thread's included, so this one is all.
    """
    if app.conf.result_backend and app.conf.get("result_backend_thread_safe"):
        pool = getattr(getattr(app.backend, "client", None), "connection_pool", None)
        if pool is not None:
            pool.disconnect()


@pytest.fixture
def runs() -> Runs:
    return Runs()


@pytest.fixture
def closed_port_url() -> str:
    """The URL of a port nothing listens on: connecting there is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"
