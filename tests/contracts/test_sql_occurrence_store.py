"""What the SQL occurrence store adds to its contract (which runs with every other adapter's,
see conftest), on the real PostgreSQL and on a SQLite file: when the SQL run state offers it,
each operation is one transaction, and a transaction which fails leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, event

from ddd_celery.kernel.clock import FixedClock
from ddd_celery.kernel.lock import InMemoryLock, Lease, LockUnavailableError
from ddd_celery.scheduling.last_runs import InMemoryJobLastRuns
from ddd_celery.scheduling.occurrence import lock_key
from ddd_celery.scheduling.occurrence_store import (
    IN_THE_LOCK,
    ComposedOccurrenceStore,
    occurrence_store,
)
from ddd_celery.scheduling.run_state import Claim
from ddd_celery.sql import (
    SqlJobCheckpoints,
    SqlJobLastRuns,
    SqlJobRunState,
    SqlLock,
    StoreUnavailableError,
    sqlite_engine,
)
from ddd_celery.sql.occurrence_store import SqlOccurrenceStore
from ddd_celery.testing.contracts.occurrence_store import (
    JOB,
    LOCK_TTL_MS,
    RUN_TTL_MS,
    T0,
    T1,
    beginning,
    succeeded,
)
from tests.contracts.conftest import Database, sql_occurrence_store

UNREACHABLE = "postgresql+psycopg://postgres@127.0.0.1:1/test"
"""No PostgreSQL listens on port 1: every connection fails at once."""


@pytest.fixture
def other_file(tmp_path: Path) -> Iterator[Engine]:
    engine = sqlite_engine(tmp_path / "other.sqlite3")
    yield engine
    engine.dispose()


def test_stores_on_the_same_database_are_combined_any_other_mix_composed(
    database: Database, clock: FixedClock, other_file: Engine
) -> None:
    engine, prefix = database.engine, database.prefix
    lock, run_state = SqlLock(engine, clock, prefix=prefix), SqlJobRunState(engine, clock)
    checkpoints, last_runs = SqlJobCheckpoints(engine), SqlJobLastRuns(engine)

    assert isinstance(occurrence_store(lock, run_state, checkpoints, last_runs), SqlOccurrenceStore)
    assert isinstance(occurrence_store(lock, run_state, None, None), SqlOccurrenceStore)
    assert isinstance(
        occurrence_store(SqlLock(database.peer, clock), run_state, None, None), SqlOccurrenceStore
    )
    mixes = [
        (InMemoryLock(clock), checkpoints, last_runs),
        (SqlLock(other_file, clock), checkpoints, last_runs),
        (lock, SqlJobCheckpoints(other_file), last_runs),
        (lock, checkpoints, InMemoryJobLastRuns()),
    ]
    for mixed_lock, mixed_checkpoints, mixed_last_runs in mixes:
        store = occurrence_store(mixed_lock, run_state, mixed_checkpoints, mixed_last_runs)
        assert isinstance(store, ComposedOccurrenceStore)


def test_each_operation_is_one_transaction_whatever_the_batch(
    database: Database, clock: FixedClock
) -> None:
    store = sql_occurrence_store(database.engine, clock, database.prefix)
    transactions: list[object] = []

    def began(connection: object) -> None:
        transactions.append(connection)

    event.listen(database.engine, "begin", began)
    try:
        first = [beginning(job=f"{JOB}:{index}") for index in range(10)]
        store.begin(first)
        assert len(transactions) == 1
        released = [begun.lease for begun in first if begun.lease is not None]
        store.begin(
            [beginning(T1, job=f"{JOB}:{index}") for index in range(10)], releasing=released
        )
        assert len(transactions) == 2
        store.end(JOB, T0, ttl_ms=RUN_TTL_MS, last_run=succeeded(T0))
        assert len(transactions) == 3
        store.free(first[1])
        assert len(transactions) == 4
    finally:
        event.remove(database.engine, "begin", began)


def test_a_batch_failing_half_way_is_rolled_back_whole(
    database: Database, clock: FixedClock
) -> None:
    broken = sql_occurrence_store(
        database.engine, clock, database.prefix, run_prefix="missing_tables_"
    )
    lock = SqlLock(database.engine, clock, prefix=database.prefix)
    checkpoints = SqlJobCheckpoints(database.engine, prefix=database.prefix)
    batch = [beginning(job=f"{JOB}:{index}") for index in range(3)]

    broken.begin(batch)

    for begun in batch:
        assert begun.failed_in == IN_THE_LOCK
        assert begun.lease is None
        assert lock.acquire(lock_key(begun.job, T0), LOCK_TTL_MS) is not None
        assert checkpoints.read(begun.job) is None


def test_a_database_that_cannot_be_asked_fails_every_occurrence_and_never_raises_from_begin(
    clock: FixedClock,
) -> None:
    engine = create_engine(UNREACHABLE, connect_args={"connect_timeout": 1})
    store = sql_occurrence_store(engine, clock, "ddd_")
    batch = [beginning(job=f"{JOB}:{index}") for index in range(2)]
    old = Lease(lock_key(JOB, T0 - timedelta(minutes=15)), "an-old-token", T0)

    released = store.begin(batch, releasing=[old])

    assert len(released) == 1
    assert isinstance(released[0], LockUnavailableError)
    for begun in batch:
        assert begun.error is released[0]
        assert begun.failed_in == IN_THE_LOCK
        assert begun.may_have_claimed is True  # a COMMIT that failed may have been written
        assert begun.token is not None  # so free can still end it, once the lock is asked
    ended = store.end(JOB, T0, ttl_ms=RUN_TTL_MS, last_run=succeeded(T0))
    assert isinstance(ended.finish_error, StoreUnavailableError)
    assert ended.last_run_error is ended.finish_error
    with pytest.raises(StoreUnavailableError):
        store.free(batch[0])
    engine.dispose()


def test_the_expired_locks_are_swept_on_the_lock_s_count_of_acquires(
    database: Database, clock: FixedClock
) -> None:
    store = sql_occurrence_store(database.engine, clock, database.prefix)  # sweeps every 3

    def rows() -> int:
        with database.engine.connect() as connection:
            held = connection.exec_driver_sql(f"SELECT key FROM {database.prefix}locks")
            return len(held.all())

    store.begin([beginning(T0, job=f"{JOB}:{index}") for index in range(2)])
    clock.advance(LOCK_TTL_MS)
    store.begin([beginning(T1, job=f"{JOB}:{index}") for index in range(2)])

    assert rows() == 2  # T0's two, expired, swept when the count passed 3


def test_free_of_a_lease_that_has_expired_ends_nothing(
    database: Database, clock: FixedClock
) -> None:
    store = sql_occurrence_store(database.engine, clock, database.prefix)
    run_state = SqlJobRunState(database.engine, clock, prefix=database.prefix)
    begun = replace(beginning(T0), lock_ttl_ms=1_000)
    store.begin([begun])
    assert begun.claimed is Claim.STARTED
    clock.advance(1_000)

    assert store.free(begun) is None  # another beat may hold the lock again: not this lease's

    assert run_state.running(JOB) == T0
