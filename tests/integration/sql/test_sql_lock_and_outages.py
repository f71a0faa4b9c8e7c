"""SqlLock on the real PostgreSQL (one statement, expired keys swept), and every SQL adapter's
answer when the database cannot be reached.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, create_engine, event, select

from ddd_celery.kernel import FixedClock, LockUnavailableError
from ddd_celery.sql import (
    MissingTablesError,
    SqlJobCheckpoints,
    SqlJobLastRuns,
    SqlJobRunState,
    SqlJobStore,
    SqlLock,
    StoreUnavailableError,
    create_tables,
    drop_tables,
)

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
KEY = "job:billing.send-payment-reminders:2026-03-02T06:00:00.000Z"


@pytest.fixture(scope="module")
def prefix(engine: Engine) -> Iterator[str]:
    prefix = f"test_{uuid.uuid4().hex[:12]}_"
    create_tables(engine, prefix)
    yield prefix
    drop_tables(engine, prefix)


@pytest.fixture(autouse=True)
def empty_locks(engine: Engine, prefix: str) -> Iterator[None]:
    yield
    with engine.begin() as connection:
        connection.execute(create_tables(engine, prefix).locks.delete())


@pytest.fixture
def down() -> Iterator[Engine]:
    """An engine on a port nothing listens on: connecting is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    engine = create_engine(f"postgresql+psycopg://postgres@127.0.0.1:{port}/test")
    yield engine
    engine.dispose()


def test_an_acquire_is_one_statement_committed_without_waiting_for_the_disk(
    engine: Engine, prefix: str
) -> None:
    statements: list[str] = []
    listener = lambda *args: statements.append(args[2])  # noqa: E731
    event.listen(engine, "before_cursor_execute", listener)
    try:
        lease = SqlLock(engine, FixedClock(T0), prefix=prefix).acquire(KEY, 10_000)
    finally:
        event.remove(engine, "before_cursor_execute", listener)

    assert lease is not None
    assert len(statements) == 1
    assert "ON CONFLICT" in statements[0]
    assert "set_config" in statements[0]


def test_expired_keys_are_swept_every_so_many_acquires(engine: Engine, prefix: str) -> None:
    clock = FixedClock(T0)
    lock = SqlLock(engine, clock, prefix=prefix, sweep_every=5)
    for minute in range(4):
        assert lock.acquire(f"job:a.b:{minute}", 1_000) is not None
    clock.advance(1_000)
    assert lock.acquire(KEY, 1_000) is not None

    locks = create_tables(engine, prefix).locks
    with engine.connect() as connection:
        keys = list(connection.scalars(select(locks.c.key)))
    assert keys == [KEY]


def test_a_sweep_every_that_is_not_positive_is_refused(engine: Engine) -> None:
    with pytest.raises(ValueError, match="sweep_every"):
        SqlLock(engine, FixedClock(T0), sweep_every=0)


def test_a_database_that_cannot_be_reached_makes_every_adapter_unavailable(down: Engine) -> None:
    clock = FixedClock(T0)

    with pytest.raises(LockUnavailableError, match="acquire the lock") as raised:
        SqlLock(down, clock).acquire(KEY, 1_000)
    assert raised.value.__cause__ is not None
    with pytest.raises(StoreUnavailableError, match="write the checkpoint"):
        SqlJobCheckpoints(down).write("billing.x", T0)
    with pytest.raises(StoreUnavailableError, match="claim"):
        SqlJobRunState(down, clock).claim("billing.x", T0, queue=False, ttl_ms=1_000)
    with pytest.raises(StoreUnavailableError, match="read the last run"):
        SqlJobLastRuns(down).read("billing.x")
    with pytest.raises(StoreUnavailableError, match="take the due jobs"):
        SqlJobStore(down).take_due(now=T0, limit=10, redispatch_after_ms=1_000)
    assert isinstance(StoreUnavailableError("x"), ConnectionError)


def test_a_table_prefix_that_could_inject_sql_is_refused(engine: Engine) -> None:
    with pytest.raises(ValueError, match="table prefix"):
        SqlJobStore(engine, prefix="ddd; drop table x; --")


def test_tables_that_were_never_created_are_named_as_missing_not_as_an_outage(
    engine: Engine,
) -> None:
    prefix = f"test_{uuid.uuid4().hex[:12]}_"
    clock = FixedClock(T0)

    with pytest.raises(MissingTablesError, match="create_tables"):
        SqlJobStore(engine, prefix=prefix).find("job-1", tenant_id=None)
    with pytest.raises(MissingTablesError, match="acquire the lock"):
        SqlLock(engine, clock, prefix=prefix).acquire(KEY, 1_000)
    assert issubclass(MissingTablesError, LookupError)


@pytest.mark.parametrize("grace_ms", [0, -1])
def test_an_outbox_grace_that_is_not_positive_is_refused(engine: Engine, grace_ms: int) -> None:
    with pytest.raises(ValueError, match="outbox_grace_ms"):
        SqlJobStore(engine, outbox_grace_ms=grace_ms)
