"""The adapters of each port, in one matrix: every contract runs once, on every adapter.

Each port has one fixture, ``<port>_subject``, whose params are its adapters
(``adapter(service)``); a new adapter of a port is one line in its list, a new SQL dialect one
more database fixture. The services are the real ones (tests/services.py): Redis on REDIS_URL,
PostgreSQL on DATABASE_URL, a SQLite file per test. A case whose service cannot be reached
fails, never skips (CI starts them), and keeps its data apart: Redis keys under a prefix of the
test's own, deleted afterwards; PostgreSQL tables under a prefix of this run's own, emptied
after each test and dropped at the end, since other tests share the servers. Each subject's peer
is an adapter on a second client or engine, as another process holds it. Stores that compare
instants on the Clock they are given let time pass by advancing it: nothing sleeps.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from redis import Redis
from redis_servers import redis_cluster
from services import DATABASE_URL, REDIS_URL
from sqlalchemy import Engine, create_engine, delete, update
from sqlalchemy.orm import sessionmaker

from ddd_celery.background import InMemoryJobStore
from ddd_celery.kernel.clock import FixedClock
from ddd_celery.kernel.lock import InMemoryLock
from ddd_celery.kernel.unit_of_work import InMemoryUnitOfWork
from ddd_celery.processes import InMemoryProcessStore, StoredProcess
from ddd_celery.redis import (
    RedisJobCheckpoints,
    RedisJobLastRuns,
    RedisJobRunState,
    RedisJobStore,
    RedisLock,
    connect,
)
from ddd_celery.redis.connection import RedisClient
from ddd_celery.redis.occurrence_store import RedisOccurrenceStore
from ddd_celery.redis.pauses import RedisJobPauses
from ddd_celery.scheduling.checkpoints import InMemoryJobCheckpoints
from ddd_celery.scheduling.last_runs import InMemoryJobLastRuns
from ddd_celery.scheduling.occurrence_store import (
    ComposedOccurrenceStore,
    OccurrenceStore,
    occurrence_store,
)
from ddd_celery.scheduling.pauses import InMemoryJobPauses
from ddd_celery.scheduling.run_state import Claim, InMemoryJobRunState
from ddd_celery.sql import (
    SqlAlchemyUnitOfWork,
    SqlJobCheckpoints,
    SqlJobLastRuns,
    SqlJobRunState,
    SqlJobStore,
    SqlLock,
    create_tables,
    drop_tables,
    sqlite_engine,
)
from ddd_celery.sql.occurrence_store import SqlOccurrenceStore
from ddd_celery.sql.pauses import SqlJobPauses
from ddd_celery.sql.process_store import (
    SqlProcessStore,
    create_process_tables,
    drop_process_tables,
    process_table,
)
from ddd_celery.testing.contracts.checkpoints import JobCheckpointsSubject
from ddd_celery.testing.contracts.job_store import JobStoreSubject
from ddd_celery.testing.contracts.last_runs import JobLastRunsSubject
from ddd_celery.testing.contracts.lock import LockSubject
from ddd_celery.testing.contracts.occurrence_store import OccurrenceStoreSubject
from ddd_celery.testing.contracts.pauses import JobPausesSubject
from ddd_celery.testing.contracts.process_store import ProcessStoreSubject
from ddd_celery.testing.contracts.run_state import JobRunStateSubject

START = datetime(2026, 3, 2, 5, 59, 58, tzinfo=UTC)
UNREACHABLE_REDIS = "redis://127.0.0.1:1/0"
"""No Redis listens on port 1: every command fails at once."""

# -- the matrix ---------------------------------------------------------------------------

IN_A_UNIT_OF_WORK = "in a unit of work"
ONE_PORT_AT_A_TIME = "one port at a time"
MARKS = {
    "redis": pytest.mark.redis,
    "redis-cluster": pytest.mark.cluster,
    "postgresql": pytest.mark.postgres,
}
"""The marker of each service a case needs: ``-m 'not redis'`` leaves its cases out."""


@dataclass(frozen=True, slots=True)
class Adapter:
    """One adapter of a port: the service it keeps its data in, and how it is used there."""

    service: str
    """``memory``, ``redis``, or the name of a ``<name>_database`` fixture."""
    variant: str | None = None


def adapter(service: str, variant: str | None = None) -> Any:
    """A param of a port's fixture, marked with the service it needs, named after both."""
    name = service if variant is None else f"{service}, {variant}"
    return pytest.param(Adapter(service, variant), marks=MARKS.get(service, ()), id=name)


EVERY_FAMILY = [
    adapter("memory"),
    adapter("redis"),
    adapter("redis-cluster"),
    adapter("postgresql"),
    adapter("sqlite"),
]
LOCKS = CHECKPOINTS = RUN_STATES = LAST_RUNS = PAUSES = EVERY_FAMILY
OCCURRENCE_STORES = [
    adapter("memory"),
    adapter("redis"),
    adapter("redis", ONE_PORT_AT_A_TIME),
    adapter("redis-cluster"),
    adapter("redis-cluster", ONE_PORT_AT_A_TIME),
    adapter("postgresql"),
    adapter("sqlite"),
]
JOB_STORES = [
    adapter("memory"),
    adapter("memory", IN_A_UNIT_OF_WORK),
    adapter("redis"),
    adapter("redis-cluster"),
    adapter("postgresql"),
    adapter("postgresql", IN_A_UNIT_OF_WORK),
    adapter("sqlite"),
    adapter("sqlite", IN_A_UNIT_OF_WORK),
]
PROCESS_STORES = [
    adapter("memory"),
    adapter("postgresql"),
    adapter("postgresql", IN_A_UNIT_OF_WORK),
    adapter("sqlite"),
    adapter("sqlite", IN_A_UNIT_OF_WORK),
]


def service_of(request: pytest.FixtureRequest) -> RedisNamespace | Database | None:
    """The service the adapter of ``request.param`` is built on; None for memory."""
    service = request.param.service
    if service == "memory":
        return None
    if service in ("redis", "redis-cluster"):
        namespace: RedisNamespace = request.getfixturevalue(
            f"{service.replace('-', '_')}_namespace"
        )
        return namespace
    database: Database = request.getfixturevalue(f"{service}_database")
    return database


# -- the services -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RedisNamespace:
    """Two clients of the same Redis (or Redis Cluster), as two processes hold them, and the
    prefix of a test (with a hash tag on a cluster: its keys in one slot)."""

    client: RedisClient
    peer: RedisClient
    prefix: str

    def elapse(self, ms: int) -> None:
        """Let ``ms`` pass for every key of the test, exactly as Redis's clock would.

        Shortening each time to live keeps the contract deterministic without sleeping.
        """
        for key in self.client.scan_iter(match=f"{self.prefix}*"):
            left = self.client.pttl(key)
            if left > ms:
                self.client.pexpire(key, left - ms)
            elif left >= 0:
                self.client.delete(key)


@pytest.fixture(scope="session")
def redis_clients() -> Iterator[tuple[Redis, Redis]]:
    client, peer = connect(REDIS_URL), connect(REDIS_URL)
    client.ping()
    yield client, peer
    client.close()
    peer.close()


@pytest.fixture
def redis_namespace(redis_clients: tuple[Redis, Redis]) -> Iterator[RedisNamespace]:
    client, peer = redis_clients
    namespace = RedisNamespace(client, peer, f"test:contracts:{uuid.uuid4().hex}:")
    yield namespace
    for key in client.scan_iter(match=f"{namespace.prefix}*"):
        client.delete(key)


@pytest.fixture(scope="session")
def redis_cluster_clients() -> Iterator[tuple[RedisClient, RedisClient]]:
    """A three-master Redis Cluster of this run's own, on free local ports."""
    with redis_cluster() as cluster:
        client, peer = connect(cluster.url), connect(cluster.url)
        yield client, peer
        client.close()
        peer.close()


@pytest.fixture
def redis_cluster_namespace(
    redis_cluster_clients: tuple[RedisClient, RedisClient],
) -> Iterator[RedisNamespace]:
    client, peer = redis_cluster_clients
    namespace = RedisNamespace(client, peer, f"test:{{contracts:{uuid.uuid4().hex}}}:")
    yield namespace
    for key in client.scan_iter(match=f"{namespace.prefix}*"):
        client.delete(key)


@dataclass(frozen=True, slots=True)
class Database:
    """Two engines on the same database, as two processes hold it, and the tables' prefix."""

    engine: Engine
    peer: Engine
    prefix: str


@pytest.fixture(scope="session")
def postgresql() -> Iterator[Database]:
    engine = create_engine(DATABASE_URL, connect_args={"connect_timeout": 2})
    peer = create_engine(DATABASE_URL, connect_args={"connect_timeout": 2})
    prefix = f"test_{uuid.uuid4().hex[:12]}_"
    create_tables(engine, prefix)
    create_process_tables(engine, prefix)
    yield Database(engine, peer, prefix)
    drop_process_tables(engine, prefix)
    drop_tables(engine, prefix)
    engine.dispose()
    peer.dispose()


@pytest.fixture
def postgresql_database(postgresql: Database) -> Iterator[Database]:
    """The run's PostgreSQL tables, emptied after the test."""
    yield postgresql
    with postgresql.engine.begin() as connection:
        made = create_tables(postgresql.engine, postgresql.prefix).metadata.sorted_tables
        for table in [*made, process_table(postgresql.prefix)]:
            connection.execute(delete(table))


@pytest.fixture
def sqlite_database(tmp_path: Path) -> Iterator[Database]:
    """A SQLite file of the test's own."""
    path = tmp_path / "jobs.sqlite3"
    engine, peer = sqlite_engine(path), sqlite_engine(path)
    create_tables(engine)
    create_process_tables(engine)
    yield Database(engine, peer, "ddd_")
    engine.dispose()
    peer.dispose()


@pytest.fixture(params=[adapter("postgresql"), adapter("sqlite")])
def database(request: pytest.FixtureRequest) -> Database:
    """Each SQL database, for the tests of what the SQL family adds to a contract."""
    found = service_of(request)
    assert isinstance(found, Database)
    return found


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(START)


# -- one fixture per port -----------------------------------------------------------------


@pytest.fixture(params=LOCKS)
def lock_subject(request: pytest.FixtureRequest, clock: FixedClock) -> LockSubject:
    match service_of(request):
        case None:
            lock = InMemoryLock(clock)
            return LockSubject(lock=lock, peer=lock, clock=clock, elapse=clock.advance)
        case RedisNamespace() as redis:

            def elapse(ms: int) -> None:
                redis.elapse(ms)
                clock.advance(ms)

            return LockSubject(
                lock=RedisLock(redis.client, prefix=redis.prefix, clock=clock),
                peer=RedisLock(redis.peer, prefix=redis.prefix, clock=clock),
                clock=clock,
                elapse=elapse,
            )
        case Database() as database:
            return LockSubject(
                lock=SqlLock(database.engine, clock, prefix=database.prefix, sweep_every=2),
                peer=SqlLock(database.peer, clock, prefix=database.prefix),
                clock=clock,
                elapse=clock.advance,
            )


@pytest.fixture(params=CHECKPOINTS)
def checkpoints_subject(request: pytest.FixtureRequest) -> JobCheckpointsSubject:
    match service_of(request):
        case None:
            checkpoints = InMemoryJobCheckpoints()
            return JobCheckpointsSubject(checkpoints=checkpoints, peer=checkpoints)
        case RedisNamespace() as redis:
            prefix = f"{redis.prefix}checkpoint:"
            return JobCheckpointsSubject(
                checkpoints=RedisJobCheckpoints(redis.client, prefix=prefix),
                peer=RedisJobCheckpoints(redis.peer, prefix=prefix),
            )
        case Database() as database:
            return JobCheckpointsSubject(
                checkpoints=SqlJobCheckpoints(database.engine, prefix=database.prefix),
                peer=SqlJobCheckpoints(database.peer, prefix=database.prefix),
            )


@pytest.fixture(params=RUN_STATES)
def run_state_subject(request: pytest.FixtureRequest, clock: FixedClock) -> JobRunStateSubject:
    match service_of(request):
        case None:
            state = InMemoryJobRunState(clock)
            return JobRunStateSubject(state=state, peer=state, elapse=clock.advance)
        case RedisNamespace() as redis:
            prefix = f"{redis.prefix}run:"
            return JobRunStateSubject(
                state=RedisJobRunState(redis.client, prefix=prefix),
                peer=RedisJobRunState(redis.peer, prefix=prefix),
                elapse=redis.elapse,
            )
        case Database() as database:
            return JobRunStateSubject(
                state=SqlJobRunState(database.engine, clock, prefix=database.prefix),
                peer=SqlJobRunState(database.peer, clock, prefix=database.prefix),
                elapse=clock.advance,
            )


@pytest.fixture(params=LAST_RUNS)
def last_runs_subject(request: pytest.FixtureRequest) -> JobLastRunsSubject:
    match service_of(request):
        case None:
            last_runs = InMemoryJobLastRuns()
            return JobLastRunsSubject(last_runs=last_runs, peer=last_runs)
        case RedisNamespace() as redis:
            prefix = f"{redis.prefix}last-run:"
            return JobLastRunsSubject(
                last_runs=RedisJobLastRuns(redis.client, prefix=prefix),
                peer=RedisJobLastRuns(redis.peer, prefix=prefix),
            )
        case Database() as database:
            return JobLastRunsSubject(
                last_runs=SqlJobLastRuns(database.engine, prefix=database.prefix),
                peer=SqlJobLastRuns(database.peer, prefix=database.prefix),
            )


@pytest.fixture(params=PAUSES)
def pauses_subject(request: pytest.FixtureRequest) -> JobPausesSubject:
    match service_of(request):
        case None:
            pauses = InMemoryJobPauses()
            return JobPausesSubject(pauses=pauses, peer=pauses)
        case RedisNamespace() as redis:
            return JobPausesSubject(
                pauses=RedisJobPauses(redis.client, prefix=redis.prefix),
                peer=RedisJobPauses(redis.peer, prefix=redis.prefix),
            )
        case Database() as database:
            return JobPausesSubject(
                pauses=SqlJobPauses(database.engine, prefix=database.prefix),
                peer=SqlJobPauses(database.peer, prefix=database.prefix),
            )


class UnreachableRunState(InMemoryJobRunState):
    """A run state whose store cannot be asked, after a lock that can."""

    def claim(self, job: str, scheduled_at: datetime, *, queue: bool, ttl_ms: int) -> Claim:
        raise ConnectionError("the run state's store is down")


def redis_ports(
    client: RedisClient, redis: RedisNamespace, clock: FixedClock
) -> tuple[RedisLock, RedisJobRunState, RedisJobCheckpoints, RedisJobLastRuns]:
    """The four Redis ports beat uses, on ``client``, under the test's prefix."""
    return (
        RedisLock(client, prefix=redis.prefix, clock=clock),
        RedisJobRunState(client, prefix=f"{redis.prefix}run:"),
        RedisJobCheckpoints(client, prefix=f"{redis.prefix}checkpoint:"),
        RedisJobLastRuns(client, prefix=f"{redis.prefix}last-run:"),
    )


def sql_occurrence_store(
    engine: Engine, clock: FixedClock, prefix: str, *, run_prefix: str | None = None
) -> OccurrenceStore:
    """The store beat gets from the SQL stores on ``engine``, its run state under
    ``run_prefix`` when given (a table that does not exist: the store fails half-way)."""
    store = occurrence_store(
        SqlLock(engine, clock, prefix=prefix, sweep_every=3),
        SqlJobRunState(engine, clock, prefix=run_prefix or prefix),
        SqlJobCheckpoints(engine, prefix=prefix),
        SqlJobLastRuns(engine, prefix=prefix),
    )
    assert isinstance(store, SqlOccurrenceStore)
    return store


@pytest.fixture(params=OCCURRENCE_STORES)
def occurrence_store_subject(
    request: pytest.FixtureRequest, clock: FixedClock
) -> OccurrenceStoreSubject:
    """The store ``occurrence_store`` combines from each family's ports (one script, one
    transaction), and the Redis ports composed one by one: both must do the same."""
    match service_of(request):
        case None:
            lock, run_state, last_runs = (
                InMemoryLock(clock),
                InMemoryJobRunState(clock),
                InMemoryJobLastRuns(),
            )
            store = occurrence_store(lock, run_state, None, last_runs)
            assert isinstance(store, ComposedOccurrenceStore)
            return OccurrenceStoreSubject(
                store=store,
                peer=ComposedOccurrenceStore(lock, run_state, last_runs),
                lock=lock,
                run_state=run_state,
                checkpoints=None,
                last_runs=last_runs,
                half_broken=ComposedOccurrenceStore(lock, UnreachableRunState(clock), last_runs),
            )
        case RedisNamespace() as redis:
            lock, run_state, checkpoints, last_runs = redis_ports(redis.client, redis, clock)
            peer_ports = redis_ports(redis.peer, redis, clock)
            down = connect(UNREACHABLE_REDIS, timeout=0.2, retries=0)
            down_lock, down_run_state, down_checkpoints, down_last_runs = redis_ports(
                down, redis, clock
            )
            if request.param.variant == ONE_PORT_AT_A_TIME:
                peer_lock, peer_run_state, _, peer_last_runs = peer_ports
                return OccurrenceStoreSubject(
                    store=ComposedOccurrenceStore(lock, run_state, last_runs),
                    peer=ComposedOccurrenceStore(peer_lock, peer_run_state, peer_last_runs),
                    lock=lock,
                    run_state=run_state,
                    checkpoints=None,
                    last_runs=last_runs,
                    half_broken=ComposedOccurrenceStore(lock, down_run_state, last_runs),
                )
            store = occurrence_store(lock, run_state, checkpoints, last_runs)
            assert isinstance(store, RedisOccurrenceStore)
            broken = down_run_state.occurrence_store(down_lock, down_checkpoints, down_last_runs)
            assert broken is not None
            return OccurrenceStoreSubject(
                store,
                occurrence_store(*peer_ports),
                lock,
                run_state,
                checkpoints,
                last_runs,
                broken,
            )
        case Database() as database:
            prefix = database.prefix
            return OccurrenceStoreSubject(
                store=sql_occurrence_store(database.engine, clock, prefix),
                peer=sql_occurrence_store(database.peer, clock, prefix),
                lock=SqlLock(database.engine, clock, prefix=prefix),
                run_state=SqlJobRunState(database.engine, clock, prefix=prefix),
                checkpoints=SqlJobCheckpoints(database.engine, prefix=prefix),
                last_runs=SqlJobLastRuns(database.engine, prefix=prefix),
                half_broken=sql_occurrence_store(
                    database.engine, clock, prefix, run_prefix=f"missing_{uuid.uuid4().hex[:8]}_"
                ),
            )


@pytest.fixture(params=JOB_STORES)
def job_store_subject(request: pytest.FixtureRequest) -> JobStoreSubject:
    in_a_unit_of_work = request.param.variant == IN_A_UNIT_OF_WORK
    match service_of(request):
        case None if in_a_unit_of_work:
            unit_of_work = InMemoryUnitOfWork()
            store = InMemoryJobStore(unit_of_work=unit_of_work)
            return JobStoreSubject(store, store, START, unit_of_work)
        case None:
            store = InMemoryJobStore()
            return JobStoreSubject(store=store, peer=store, start=START)
        case RedisNamespace() as redis:
            return JobStoreSubject(
                store=RedisJobStore(redis.client, prefix=redis.prefix),
                peer=RedisJobStore(redis.peer, prefix=redis.prefix),
                start=START,
            )
        case Database() as database:
            peer = SqlJobStore(database.peer, prefix=database.prefix)
            if not in_a_unit_of_work:
                return JobStoreSubject(
                    SqlJobStore(database.engine, prefix=database.prefix), peer, START
                )
            sql_unit = SqlAlchemyUnitOfWork(sessionmaker(database.engine))
            sql_store = SqlJobStore(database.engine, unit_of_work=sql_unit, prefix=database.prefix)
            return JobStoreSubject(sql_store, peer, START, sql_unit)


def sql_overwriter(engine: Engine, prefix: str) -> Callable[[StoredProcess, str, str], None]:
    """Writes a stored instance's state and timeouts texts straight into its row."""
    table = process_table(prefix)

    def overwrite(saved: StoredProcess, state: str, timeouts: str) -> None:
        with engine.begin() as connection:
            written = connection.execute(
                update(table)
                .where(
                    table.c.tenant == (saved.tenant_id or ""),
                    table.c.process == saved.process,
                    table.c.id == saved.id,
                )
                .values(state=state, timeouts=timeouts)
            )
            assert written.rowcount == 1

    return overwrite


@pytest.fixture(params=PROCESS_STORES)
def process_store_subject(request: pytest.FixtureRequest) -> ProcessStoreSubject:
    service = service_of(request)
    if service is None:
        memory = InMemoryProcessStore()

        def overwrite(saved: StoredProcess, state: str, timeouts: str) -> None:
            key = (saved.tenant_id or "", saved.process, saved.id)
            memory._instances[key] = (saved.version, state, timeouts)

        return ProcessStoreSubject(store=memory, peer=memory, overwrite=overwrite)
    assert isinstance(service, Database)  # no Redis adapter of this port
    peer = SqlProcessStore(service.peer, prefix=service.prefix)
    written = sql_overwriter(service.peer, service.prefix)
    if request.param.variant != IN_A_UNIT_OF_WORK:
        store = SqlProcessStore(service.engine, prefix=service.prefix)
        return ProcessStoreSubject(store=store, peer=peer, overwrite=written)
    unit_of_work = SqlAlchemyUnitOfWork(sessionmaker(service.engine))
    store = SqlProcessStore(service.engine, unit_of_work=unit_of_work, prefix=service.prefix)
    return ProcessStoreSubject(store, peer, unit_of_work, written)
