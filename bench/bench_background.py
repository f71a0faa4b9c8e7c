"""Background jobs on Celery side by side with plain Celery tasks, in one run, on the real Redis.

1. Enqueue: ``StoredJobQueue.enqueue`` inside an ``InMemoryUnitOfWork``, published after the
   commit (``RedisJobStore`` ``add``, then the task's message), against a plain ``apply_async``
   of an equivalent Celery task, both to the Redis broker; µs per call. Goal: at most 1.3x.
2. Worker: ``--tasks`` messages are published first, then a real ``celery worker`` process is
   started on them (solo, then prefork -c 2). Every task does one ``INCR`` on Redis, the
   background one inside its attempt (claim, lease heartbeat thread, run, complete, record);
   the time is from the first task's ``INCR`` to the last one's, so the worker's start-up is not
   counted. Goal: at most 1.3x the per-task cost of the plain task.

Sections 1 and 2 alternate the two sides over ``--rounds`` rounds and keep each side's best
round: on a shared machine, a burst of load from elsewhere then costs a round, not a side.
3. Relay: ``--due`` jobs already due wait in ``RedisJobStore``; one ``Relay.run()`` (batches of
   500) hands back expired leases and publishes them all through one producer. Goal: at least
   20,000 jobs published per second (issue 24; 1,000 before).

4. Batches: ``--batch`` jobs enqueued in one unit of work with ``enqueue_many`` (one
   ``add_many``, the wake-ups published after the commit in one batch) beside the same
   jobs enqueued one by one in one unit of work, on Redis (``RedisJobStore``, added after the
   commit) and on PostgreSQL (``SqlJobStore``, the outbox: in the unit's transaction). Jobs per
   second, counting to the commit (``committed``: the add and the commit, the wake-ups not yet
   sent) and to the last wake-up sent (``published``). Goal: ``enqueue_many`` at least 20,000
   jobs a second committed on PostgreSQL and 50,000 on Redis.

Every number depends on the machine and what else runs on it: the header says how many cores
and how loaded they were. This file is also the app the workers run (``celery -A
bench_background``), configured by ``BENCH_PREFIX``; every key is under a prefix of the run and
deleted at the end.

    python bench/bench_background.py [--enqueue 2000] [--tasks 2000] [--due 10000]
        [--batch 5000] [--only 1,2,3,4]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from celery import Celery
from sqlalchemy import create_engine
from sqlalchemy import text as sql_text
from sqlalchemy.orm import sessionmaker

from ddd_celery.background import Dispatch, JobPublisher, JobStore, StoredJobQueue
from ddd_celery.celery import install_background_jobs, install_jobs
from ddd_celery.celery.background.publisher import CeleryJobPublisher
from ddd_celery.celery.background.relay import Relay
from ddd_celery.declarations.background import BackgroundJobExecution, background
from ddd_celery.kernel import EnqueueRequest, InMemoryLock, SystemClock, UnitOfWork, UuidGenerator
from ddd_celery.kernel.scope import ContextVarExecutionScope
from ddd_celery.kernel.unit_of_work import InMemoryUnitOfWork
from ddd_celery.redis import connect
from ddd_celery.redis.job_store import RedisJobStore
from ddd_celery.sql import SqlAlchemyUnitOfWork, SqlJobStore, create_tables, drop_tables

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
PREFIX = os.environ.get("BENCH_PREFIX") or f"bench:background:{uuid.uuid4().hex[:8]}:"
"""The run's prefix: the script makes one, the workers it starts are given it."""
QUEUE = "benchbg"
HERE = Path(__file__).parent

redis = connect(REDIS_URL, timeout=5.0)


def count() -> None:
    """The work of both tasks: one INCR; the first and the last note when they ran."""
    done = redis.incr(f"{PREFIX}done")
    if done == 1:
        redis.set(f"{PREFIX}first", time.time())
    redis.set(f"{PREFIX}last", time.time())


@background("benchbg.noop", max_attempts=1)
class NoopJob:
    def run(self, payload: Any, execution: BackgroundJobExecution) -> None:
        count()


app = Celery("bench_background", broker=REDIS_URL, set_as_current=False)
app.conf.update(
    broker_transport_options={"global_keyprefix": PREFIX},
    broker_connection_retry_on_startup=True,
    task_default_queue=QUEUE,
    worker_hijack_root_logger=False,
)
install_jobs(app, jobs=[], lock=InMemoryLock(SystemClock()), environ={})
registry = install_background_jobs(
    app, jobs=[NoopJob], store=RedisJobStore(redis, prefix=f"{PREFIX}store:")
)


@app.task(
    name="benchbg.plain",
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
    serializer="json",
)
def plain_task() -> None:
    count()


def progress(text: str) -> None:
    print(f"\r{text:<78}", end="", file=sys.stderr, flush=True)


def per_call_us(call: Callable[[], object], calls: int) -> float:
    call()  # the first pays for connecting
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls * 1e6


# --- 1. enqueue ----------------------------------------------------------------------------


def enqueue_costs(calls: int, rounds: int) -> tuple[float, float]:
    """The best round of each, the two alternating so that both see the same load."""
    unit_of_work = InMemoryUnitOfWork()
    queue = registry.queue(unit_of_work=unit_of_work)

    def enqueue_in_unit_of_work() -> None:
        with unit_of_work.begin():
            queue.enqueue(NoopJob, {"month": "2026-10"})

    ours, plain = [], []
    for round_ in range(rounds):
        progress(f"1. enqueue, round {round_ + 1}/{rounds}")
        ours.append(per_call_us(enqueue_in_unit_of_work, calls // rounds))
        plain.append(per_call_us(plain_task.apply_async, calls // rounds))
        reset()
    return min(ours), min(plain)


# --- 2. worker throughput ------------------------------------------------------------------


def worker_cost(pool: str, concurrency: int, tasks: int, publish: Callable[[], object]) -> float:
    """µs per task of a real worker process on ``tasks`` messages published beforehand."""
    reset()
    for _ in range(tasks):
        publish()
    env = {
        **os.environ,
        "BENCH_PREFIX": PREFIX,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    worker = subprocess.Popen(
        [
            sys.executable, "-m", "celery", "-A", "bench_background", "worker",
            "-P", pool, "-c", str(concurrency), "-Q", QUEUE, "-l", "WARNING",
            "--without-mingle", "--without-gossip", "--without-heartbeat",
        ],
        cwd=HERE, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while int(redis.get(f"{PREFIX}done") or 0) < tasks:
            if time.monotonic() > deadline or worker.poll() is not None:
                raise RuntimeError(f"the {pool} worker did not run {tasks} tasks")
            time.sleep(0.05)
    finally:
        worker.terminate()
        worker.wait(30)
    first, last = float(redis.get(f"{PREFIX}first") or 0), float(redis.get(f"{PREFIX}last") or 0)
    return (last - first) / (tasks - 1) * 1e6


def worker_costs(tasks: int, rounds: int) -> list[tuple[str, float, float]]:
    """The best round of each, per pool, the two alternating so that both see the same load."""
    queue = registry.queue()
    rows = []
    for pool, concurrency in (("solo", 1), ("prefork", 2)):
        ours, plain = [], []
        for round_ in range(rounds):
            progress(f"2. {pool}, round {round_ + 1}/{rounds}: background jobs")
            ours.append(worker_cost(pool, concurrency, tasks, lambda: queue.enqueue(NoopJob, {})))
            progress(f"2. {pool}, round {round_ + 1}/{rounds}: plain tasks")
            plain.append(worker_cost(pool, concurrency, tasks, plain_task.apply_async))
        rows.append((f"{pool} -c {concurrency}", min(ours), min(plain)))
    return rows


# --- 3. relay ------------------------------------------------------------------------------


def relay_rate(due: int) -> tuple[float, int]:
    reset()
    store = RedisJobStore(redis, prefix=f"{PREFIX}relay:")
    queue = StoredJobQueue(
        store=store,
        clock=SystemClock(),
        ids=UuidGenerator(),
        scope=ContextVarExecutionScope(),
        declarations=[NoopJob],
    )
    progress(f"3. adding {due:,} due jobs")
    for _ in range(due):
        queue.enqueue(NoopJob, {}, delay_ms=1)  # not published: the relay's to publish
    time.sleep(0.01)
    relay = Relay(app, store, SystemClock(), batch=500, max_batches=due // 500 + 1)
    progress("3. relay")
    start = time.perf_counter()
    published = relay.run().published
    elapsed = time.perf_counter() - start
    reset()
    return published / elapsed, published


# --- 4. batches ----------------------------------------------------------------------------


class TimedPublisher(JobPublisher):
    """The Celery publisher, timing what it spends sending wake-ups."""

    def __init__(self) -> None:
        self._celery = CeleryJobPublisher(app)
        self.seconds = 0.0

    def publish(self, dispatch: Dispatch) -> None:
        start = time.perf_counter()
        self._celery.publish(dispatch)
        self.seconds += time.perf_counter() - start

    def publish_many(self, dispatches: Any) -> None:
        start = time.perf_counter()
        self._celery.publish_many(dispatches)
        self.seconds += time.perf_counter() - start


def batch_rates(
    store: JobStore, unit_of_work: UnitOfWork, jobs: int, rounds: int, clear: Callable[[], None]
) -> dict[str, tuple[float, float]]:
    """(committed, published) jobs/s of each way, best of ``rounds`` alternating rounds."""
    publisher = TimedPublisher()
    queue = StoredJobQueue(
        store=store,
        clock=SystemClock(),
        ids=UuidGenerator(),
        scope=ContextVarExecutionScope(),
        unit_of_work=unit_of_work,
        publisher=publisher,
        declarations=[NoopJob],
    )

    def many() -> None:
        queue.enqueue_many(EnqueueRequest(NoopJob, {"n": n}) for n in range(jobs))

    def singles() -> None:
        for n in range(jobs):
            queue.enqueue(NoopJob, {"n": n})

    rates: dict[str, list[tuple[float, float]]] = {"enqueue_many": [], "enqueue, one by one": []}
    for _ in range(rounds):
        for way, enqueue in (("enqueue_many", many), ("enqueue, one by one", singles)):
            clear()
            publisher.seconds = 0.0
            start = time.perf_counter()
            with unit_of_work.begin():
                enqueue()
            elapsed = time.perf_counter() - start
            rates[way].append((jobs / (elapsed - publisher.seconds), jobs / elapsed))
    clear()
    return {way: (max(r[0] for r in kept), max(r[1] for r in kept)) for way, kept in rates.items()}


def batches(jobs: int, rounds: int) -> list[tuple[str, str, float, float]]:
    rows = []
    progress(f"4. batches of {jobs:,} on Redis")
    redis_store = RedisJobStore(redis, prefix=f"{PREFIX}batch:")

    def clear_redis() -> None:
        for key in redis.scan_iter(match=f"{PREFIX}*", count=10_000):
            redis.delete(key)

    for way, (committed, published) in batch_rates(
        redis_store, InMemoryUnitOfWork(), jobs, rounds, clear_redis
    ).items():
        rows.append(("Redis", way, committed, published))
    progress(f"4. batches of {jobs:,} on PostgreSQL")
    engine = create_engine(DATABASE_URL)
    prefix = f"bench_bg_{uuid.uuid4().hex[:8]}_"
    jobs_table = create_tables(engine, prefix).jobs
    sql_unit = SqlAlchemyUnitOfWork(sessionmaker(engine))
    sql_store = SqlJobStore(engine, unit_of_work=sql_unit, prefix=prefix)

    def clear_sql() -> None:
        # TRUNCATE, not DELETE: each round then inserts into an empty table and empty indexes,
        # where after a DELETE each one finds the dead entries of the rounds before
        with engine.begin() as connection:
            connection.execute(sql_text(f'TRUNCATE TABLE "{jobs_table.name}"'))
        clear_redis()

    try:
        for way, (committed, published) in batch_rates(
            sql_store, sql_unit, jobs, rounds, clear_sql
        ).items():
            rows.append(("PostgreSQL (outbox)", way, committed, published))
    finally:
        drop_tables(engine, prefix)
        engine.dispose()
    return rows


def reset() -> None:
    for key in redis.scan_iter(match=f"{PREFIX}*"):
        redis.delete(key)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--enqueue", type=int, default=2_000)
    parser.add_argument("--tasks", type=int, default=2_000)
    parser.add_argument("--due", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=3, help="best of ROUNDS, alternating")
    parser.add_argument("--only", default="1,2,3,4", help="the sections to run, e.g. 3,4")
    args = parser.parse_args()
    only = {int(part) for part in args.only.split(",")}
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    try:
        enqueue = enqueue_costs(args.enqueue, args.rounds) if 1 in only else None
        workers = worker_costs(args.tasks, args.rounds) if 2 in only else None
        relay = relay_rate(args.due) if 3 in only else None
        batch_rows = batches(args.batch, args.rounds) if 4 in only else None
    finally:
        reset()
    print("\r", end="", file=sys.stderr)
    end_load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"Background jobs vs plain Celery tasks, Python {sys.version.split()[0]}, {REDIS_URL}")
    print(f"{os.cpu_count()} CPUs, load average at the start: {load}; at the end: {end_load}")
    if enqueue is not None:
        print()
        each = args.enqueue // args.rounds
        print(f"1. Enqueue, µs per call (best of {args.rounds} rounds of {each:,} calls)")
        print(f"{'':<44}{'µs/call':>10}")
        print(f"{'enqueue in a unit of work, publish on commit':<44}{enqueue[0]:>10.1f}")
        print(f"{'plain apply_async':<44}{enqueue[1]:>10.1f}")
        print(f"ratio {enqueue[0] / enqueue[1]:.2f}x (goal <= 1.3x)")
    if workers is not None:
        print()
        print(
            f"2. Worker, µs per no-op task (best of {args.rounds} rounds of {args.tasks:,} "
            "tasks, real worker processes)"
        )
        print(f"{'pool':<16}{'background job':>16}{'plain task':>12}{'ratio':>8}   goal <= 1.3x")
        for pool, ours, plain in workers:
            print(f"{pool:<16}{ours:>16.0f}{plain:>12.0f}{ours / plain:>7.2f}x")
    if relay is not None:
        rate, published = relay
        print()
        print(f"3. Relay: {published:,} due jobs published in one run")
        print(f"{rate:,.0f} jobs/s (goal >= 20,000/s)")
    if batch_rows is not None:
        print()
        print(
            f"4. Batches: {args.batch:,} jobs in one unit of work, jobs/s (best of "
            f"{args.rounds} alternating rounds)"
        )
        print(f"{'store':<22}{'way':<22}{'committed':>12}{'published':>12}")
        for store, way, committed, published in batch_rows:
            print(f"{store:<22}{way:<22}{committed:>12,.0f}{published:>12,.0f}")
        print("goal: enqueue_many >= 20,000/s committed on PostgreSQL, >= 50,000/s on Redis")


if __name__ == "__main__":
    main()
