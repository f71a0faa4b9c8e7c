"""The SQL adapters on PostgreSQL side by side with the Redis adapters, in one run.

1. ``SqlLock.acquire`` against ``RedisLock.acquire``: ``--ops`` acquires of distinct keys
   (an occurrence each), one at a time; latency of each call.
2. ``SqlJobStore`` against ``RedisJobStore``: ``add``, then ``claim_job``, then ``complete`` of
   ``--ops`` jobs, one call at a time; latency of each call.
3. Beat's begin of one occurrence (lock, checkpoint, claim of a job's run), ``--ops`` times on
   PostgreSQL: the ports asked one after the other (``SqlLock``, ``SqlJobCheckpoints``,
   ``SqlJobRunState``, as the composed store and beat do) against ``SqlOccurrenceStore.begin``,
   calls alternating; latency of each call, and the statements and transactions per call.
4. The relay's ``take_due`` on PostgreSQL (and Redis, for scale): ``--relay`` due jobs never
   dispatched, taken in batches of 500 (the relay's default) until none is left; jobs per
   second. The jobs are inserted before the clock starts.

Both stores are the real servers on loopback (``DATABASE_URL``, ``REDIS_URL``), each under a
prefix of this run's own, deleted afterwards. Every number depends on the machine: the header
says how many cores it has and how loaded it was, since the servers and this process share them.

    python bench/bench_sql.py [--ops 5000] [--relay 20000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy import Connection, Engine, create_engine, event, insert
from stopping import clean_up_on_stop

from ddd_celery.background.store import EnqueuedBy, JobLease, JobStatus, JobStore, NewJob
from ddd_celery.kernel import FixedClock
from ddd_celery.kernel.lock import Lock
from ddd_celery.redis import RedisJobStore, RedisLock, connect
from ddd_celery.scheduling.occurrence import lock_key
from ddd_celery.scheduling.occurrence_store import Beginning, occurrence_store
from ddd_celery.sql import (
    SqlJobCheckpoints,
    SqlJobLastRuns,
    SqlJobRunState,
    SqlJobStore,
    SqlLock,
    create_tables,
    drop_tables,
)
from ddd_celery.sql.connection import to_micros
from ddd_celery.sql.occurrence_store import SqlOccurrenceStore

DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
NOW = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
LEASE_MS = 30_000
BATCH = 500


def timed(calls: int, call: Callable[[int], object]) -> list[float]:
    """Latency of each of ``calls`` calls, in milliseconds."""
    spent = []
    for index in range(calls):
        began = time.perf_counter()
        call(index)
        spent.append((time.perf_counter() - began) * 1000)
    return spent


def summary(spent: list[float]) -> tuple[float, float, float]:
    ordered = sorted(spent)
    return (
        statistics.median(ordered),
        ordered[int(len(ordered) * 0.99) - 1],
        ordered[-1],
    )


def row(name: str, sql: list[float], redis: list[float]) -> str:
    s50, s99, smax = summary(sql)
    r50, r99, rmax = summary(redis)
    return (
        f"{name:<22} {s50:8.3f} {s99:8.3f} {smax:8.2f}   {r50:8.3f} {r99:8.3f} {rmax:8.2f}"
        f"   {s50 / r50:5.1f}x {s99 / r99:5.1f}x"
    )


def job(job_id: str) -> NewJob:
    return NewJob(
        id=job_id,
        name="bench.noop",
        queue="bench",
        payload={"n": job_id},
        enqueued_at=NOW,
        run_at=NOW,
        max_attempts=3,
        enqueued_by=EnqueuedBy(correlation_id=job_id, actor="system:bench"),
    )


def locks(ops: int, sql: Lock, redis: Lock) -> list[str]:
    timed(50, lambda i: sql.acquire(f"job:bench.warm:{i}", 60_000))
    timed(50, lambda i: redis.acquire(f"job:bench.warm:{i}", 60_000))
    key = "job:bench.every-second:{}"
    return [
        row(
            "lock acquire",
            timed(ops, lambda i: sql.acquire(key.format(i), 60_000)),
            timed(ops, lambda i: redis.acquire(key.format(i), 60_000)),
        )
    ]


def one_store(ops: int, store: JobStore) -> dict[str, list[float]]:
    """Latencies of ``add``, then ``claim_job``, then ``complete`` of ``ops`` jobs."""
    ids = [f"job-{uuid.uuid4().hex}" for _ in range(ops)]
    leases: list[JobLease] = []

    def claim(i: int) -> None:
        claimed = store.claim_job(ids[i], now=NOW, lease_ms=LEASE_MS)
        assert claimed is not None
        leases.append(claimed.lease)

    spent = {
        "add": timed(ops, lambda i: store.add(job(ids[i]), dispatched=True)),
        "claim_job": timed(ops, claim),
        "complete": timed(ops, lambda i: store.complete(leases[i], now=NOW)),
    }
    assert store.stats().total(JobStatus.SUCCEEDED) == ops
    return spent


def jobs(ops: int, sql: JobStore, redis: JobStore) -> list[str]:
    on_sql, on_redis = one_store(ops, sql), one_store(ops, redis)
    return [row(f"job store {name}", on_sql[name], on_redis[name]) for name in on_sql]


class Counted:
    """Statements and transactions run on an engine while counting."""

    def __init__(self, engine: Engine) -> None:
        self.statements = self.transactions = 0
        self.counting = False
        event.listen(engine, "before_cursor_execute", self._statement)
        event.listen(engine, "begin", self._transaction)

    def _statement(self, *_: object) -> None:
        self.statements += self.counting

    def _transaction(self, _: Connection) -> None:
        self.transactions += self.counting  # an autocommit statement is one too


def beginnings(ops: int, engine: Engine, prefix: str, clock: FixedClock) -> list[str]:
    lock = SqlLock(engine, clock, prefix=prefix)
    checkpoints = SqlJobCheckpoints(engine, prefix=prefix)
    run_state = SqlJobRunState(engine, clock, prefix=prefix)
    combined = occurrence_store(lock, run_state, checkpoints, SqlJobLastRuns(engine, prefix=prefix))
    assert isinstance(combined, SqlOccurrenceStore)

    def ports(i: str) -> None:
        job = f"bench.ports.{i}"
        assert lock.acquire(lock_key(job, NOW), 60_000) is not None
        checkpoints.write(job, NOW)
        run_state.claim(job, NOW, queue=False, ttl_ms=60_000)

    def store(i: str) -> None:
        job = f"bench.store.{i}"
        begun = Beginning(job, NOW, lock_key(job, NOW), 60_000, claim=True, queue=False,
                          run_ttl_ms=60_000)  # fmt: skip
        combined.begin([begun])
        assert begun.claimed is not None

    counted = Counted(engine)
    spent: dict[str, list[float]] = {"ports": [], "store": []}
    per_call: dict[str, tuple[float, float]] = {}
    for name, call in (("ports", ports), ("store", store)):  # warm up, then count
        timed(50, lambda i, call=call: call(f"warm.{i}"))
        counted.statements = counted.transactions = 0
        counted.counting = True
        timed(200, lambda i, call=call: call(f"counted.{i}"))
        counted.counting = False
        per_call[name] = (counted.statements / 200, counted.transactions / 200)
    for i in range(ops):  # alternating, so both see the same load
        spent["ports"] += timed(1, lambda _, at=i: ports(f"timed.{at}"))
        spent["store"] += timed(1, lambda _, at=i: store(f"timed.{at}"))
    p50, p99, _ = summary(spent["ports"])
    s50, s99, _ = summary(spent["store"])
    (ps, pt), (ss, st) = per_call["ports"], per_call["store"]
    return [
        f"{'ms per call, PostgreSQL':<26} {'ports p50':>9} {'p99':>7}   {'store p50':>9} "
        f"{'p99':>7}   {'ports/store p50, p99':>20}   statements / transactions per call",
        f"{'beat begin, 1 occurrence':<26} {p50:9.3f} {p99:7.3f}   {s50:9.3f} {s99:7.3f}   "
        f"{p50 / s50:13.2f}x {p99 / s99:5.2f}x   ports {ps:.2f} / {pt:.2f}, "
        f"store {ss:.2f} / {st:.2f}",
    ]


def relay(count: int, sql: SqlJobStore, engine_url: str, prefix: str, redis: JobStore) -> list[str]:
    engine = create_engine(engine_url)
    table = create_tables(engine, prefix).jobs
    at = to_micros(NOW)
    rows = [
        {
            "id": f"due-{index}", "name": "bench.noop", "queue": "bench", "status": "queued",
            "payload": "{}", "enqueued_at": at, "run_at": at + index, "attempts": 0,
            "max_attempts": 3, "tenant": "", "relay_at": at + index,
        }
        for index in range(count)
    ]  # fmt: skip
    with engine.begin() as connection:
        for start in range(0, count, 5_000):
            connection.execute(insert(table), rows[start : start + 5_000])
    for index in range(count):
        redis.add(job(f"due-{index}"), dispatched=False)
    later = NOW + timedelta(seconds=1)
    lines = []
    for name, store in (("PostgreSQL", sql), ("Redis", redis)):
        taken = 0
        began = time.perf_counter()
        while batch := store.take_due(now=later, limit=BATCH, redispatch_after_ms=300_000):
            taken += len(batch)
        elapsed = time.perf_counter() - began
        assert taken == count, (name, taken)
        lines.append(
            f"relay take_due on {name:<10} {count} jobs in {elapsed:6.2f} s: "
            f"{count / elapsed:9,.0f} jobs/s (batches of {BATCH})"
        )
    engine.dispose()
    return lines


def main() -> None:
    clean_up_on_stop()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=5_000)
    parser.add_argument("--relay", type=int, default=20_000)
    args = parser.parse_args()

    load = os.getloadavg()
    print(f"cpus: {os.cpu_count()}, load average: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"PostgreSQL {DATABASE_URL.split('@')[-1]}, Redis {REDIS_URL.split('@')[-1]}, loopback")
    prefix = f"bench_{uuid.uuid4().hex[:10]}_"
    key_prefix = f"bench:sql:{uuid.uuid4().hex}:"
    engine = create_engine(DATABASE_URL)
    create_tables(engine, prefix)
    client = connect(REDIS_URL)
    clock = FixedClock(NOW)
    try:
        print(
            f"\n{'ms per call':<22} {'SQL p50':>8} {'p99':>8} {'max':>8}   "
            f"{'Redis p50':>8} {'p99':>8} {'max':>8}   {'ratio p50, p99':>12}"
        )
        for line in locks(
            args.ops,
            SqlLock(engine, clock, prefix=prefix),
            RedisLock(client, prefix=key_prefix, clock=clock),
        ):
            print(line, flush=True)
        for line in jobs(
            args.ops,
            SqlJobStore(engine, prefix=prefix),
            RedisJobStore(client, prefix=f"{key_prefix}store:"),
        ):
            print(line, flush=True)
        print()
        for line in beginnings(args.ops, engine, prefix, clock):
            print(line, flush=True)
        print()
        for line in relay(
            args.relay,
            SqlJobStore(engine, prefix=prefix),
            DATABASE_URL,
            prefix,
            RedisJobStore(client, prefix=f"{key_prefix}relay:"),
        ):
            print(line, flush=True)
    finally:
        drop_tables(engine, prefix)
        engine.dispose()
        for key in client.scan_iter(match=f"{key_prefix}*", count=1_000):
            client.delete(key)
        client.close()


if __name__ == "__main__":
    main()
