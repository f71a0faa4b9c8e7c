"""A lock store beat cannot reach is named once per outage, with its cause, and once it answers.

The real ``JobBeatScheduler`` ticked in-process (``test_beat``'s ``Instance``) on a lock whose
store is on a closed port or behind the suite's fault proxy. Each occurrence is still recorded
``failed`` (``JOB_LOCK_UNAVAILABLE``); beat's own log says where the store is and why it cannot
be asked, once, not at every occurrence.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from datetime import timedelta

import pytest
from fault_proxy import FaultProxy
from services import DATABASE_URL, REDIS_URL
from sqlalchemy import create_engine
from test_beat import START, Instance, declared, run_until

from ddd_celery.kernel.clock import FixedClock
from ddd_celery.kernel.lock import InMemoryLock, Lock
from ddd_celery.redis import RedisJobCheckpoints, RedisLock, connect
from ddd_celery.scheduling.observability import COULD_NOT_FOLLOW
from ddd_celery.sql import SqlLock, create_tables, drop_tables

BEAT = "ddd_celery.celery.beat"


def beat_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == BEAT]


def ten_seconds_on(lock: Lock) -> Instance:
    clock = FixedClock(START)
    instance = Instance(clock, [declared("billing.every-second", every="1s")], lock)
    run_until(clock, START + timedelta(seconds=10), instance.beat())
    return instance


def failed_unavailable(instance: Instance) -> int:
    return sum(
        1
        for run in instance.runs
        if (run.outcome.value, run.error_code) == ("failed", "JOB_LOCK_UNAVAILABLE")
    )


@pytest.mark.parametrize(
    ("lock", "address"),
    [
        pytest.param(
            lambda: RedisLock(connect("redis://:s3cret@127.0.0.1:1/0", timeout=0.2, retries=0)),
            "Redis at 127.0.0.1:1 db 0",
            id="redis",
        ),
        pytest.param(
            lambda: SqlLock(
                create_engine(
                    "postgresql+psycopg://postgres:s3cret@127.0.0.1:1/test",
                    connect_args={"connect_timeout": 2},
                ),
                FixedClock(START),
            ),
            "postgresql at 127.0.0.1:1 database test",
            id="postgresql",
        ),
    ],
)
def test_a_lock_store_on_a_closed_port_is_named_once_with_its_cause(
    lock: object, address: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)

    instance = ten_seconds_on(lock())  # type: ignore[operator]

    assert failed_unavailable(instance) == 10, "each occurrence is still recorded failed"
    errors = [message for level, message in beat_lines(caplog) if level == "ERROR"]
    assert len(errors) == 1, errors
    assert address in errors[0]
    assert "connection refused" in errors[0].lower()
    assert "s3cret" not in caplog.text


@pytest.mark.redis
def test_a_redis_lock_store_cut_off_then_back_says_so_once_each_way(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    with FaultProxy.to_url(REDIS_URL) as proxy:
        client = connect(proxy.url(REDIS_URL), timeout=0.5, retries=0)
        clock = FixedClock(START)
        instance = Instance(
            clock, [declared("billing.every-second", every="1s")], RedisLock(client, prefix="t:")
        )
        beat = instance.beat()
        run_until(clock, START + timedelta(seconds=3), beat)
        proxy.cut()
        run_until(clock, START + timedelta(seconds=8), beat)
        proxy.restore()
        run_until(clock, START + timedelta(seconds=12), beat)
        client.close()

    outage = [(level, m) for level, m in beat_lines(caplog) if "lock store" in m]
    assert [level for level, _ in outage] == ["ERROR", "WARNING"], outage
    assert f"Redis at 127.0.0.1:{proxy.port} db 0" in outage[0][1]
    assert "answers again after 5.0 s; 5 occurrences and 0 follow-ups failed" in outage[1][1]
    assert failed_unavailable(instance) == 5


@pytest.fixture
def sql_prefix() -> Iterator[str]:
    engine = create_engine(DATABASE_URL)
    prefix = f"t_{os.urandom(6).hex()}_"
    create_tables(engine, prefix)
    yield prefix
    drop_tables(engine, prefix)
    engine.dispose()


@pytest.mark.postgres
def test_a_postgresql_lock_store_cut_off_then_back_says_so_once_each_way(
    sql_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    with FaultProxy.to_url(DATABASE_URL) as proxy:
        engine = create_engine(proxy.url(DATABASE_URL), connect_args={"connect_timeout": 2})
        clock = FixedClock(START)
        lock = SqlLock(engine, clock, prefix=sql_prefix)
        instance = Instance(clock, [declared("billing.every-second", every="1s")], lock)
        beat = instance.beat()
        run_until(clock, START + timedelta(seconds=3), beat)
        proxy.cut()
        run_until(clock, START + timedelta(seconds=8), beat)
        proxy.restore()
        run_until(clock, START + timedelta(seconds=12), beat)
        engine.dispose()

    outage = [(level, m) for level, m in beat_lines(caplog) if "lock store" in m]
    assert [level for level, _ in outage] == ["ERROR", "WARNING"], outage
    assert f"postgresql at 127.0.0.1:{proxy.port} database test" in outage[0][1]
    assert "answers again after 5.0 s; 5 occurrences and 0 follow-ups failed" in outage[1][1]
    assert failed_unavailable(instance) == 5


@pytest.mark.redis
def test_a_checkpoint_store_on_a_closed_port_is_named_once_not_at_every_occurrence(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    clock = FixedClock(START)
    down = connect("redis://127.0.0.1:1/0", timeout=0.2, retries=0)
    instance = Instance(
        clock,
        [declared("billing.every-second", every="1s")],
        InMemoryLock(clock),
        checkpoints=RedisJobCheckpoints(down, prefix="t:"),
    )

    run_until(clock, START + timedelta(seconds=10), instance.beat())

    assert len(instance.sent) == 10, "the occurrences are sent: only their checkpoints fail"
    errors = [message for level, message in beat_lines(caplog) if level == "ERROR"]
    assert len(errors) == 1, errors
    assert errors[0].startswith("beat: the checkpoints store (Redis at 127.0.0.1:1 db 0)")
    assert "connection refused" in errors[0].lower()
    followed = [r for r in caplog.records if r.getMessage() == COULD_NOT_FOLLOW]
    assert [getattr(r, "operation", None) for r in followed] == [
        "read the checkpoint",
        "write the checkpoint",
    ]
