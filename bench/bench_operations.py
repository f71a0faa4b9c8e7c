"""Operating background jobs at scale, on the real Redis and the real PostgreSQL, in one run.

1. List: a page of 50 of ``JobStore.list_page`` (no filter, the state ``dead``, a job name, a
   tenant, and the 20th page through its cursor) and of ``celery jobs background list`` (the
   command run in this process, as a user types it, its output discarded), among 1,000 jobs
   and among ``--jobs``, on ``RedisJobStore`` and ``SqlJobStore``; the median of ``--pages``
   pages, the two sizes alternating, side by side with the ratio. Goal: about 1x (each query
   reads an index from its cursor, never the jobs before it).
2. Work: what a worker asks of the store for each job, on the same two stores (seven in ten
   of their jobs finished, one in ten ready, a backlog): ``claim_job`` as a task's message
   claims (``tasks.py``), ``claim_due`` of one job as a polling worker claims (the earliest
   due of the queue's backlog), and the conclusions ``Attempt`` sends (``complete``, ``fail``
   with a retry, ``fail`` for the last time: dead); three fresh jobs added (untimed) a round
   keep the backlog's size. The median of ``--pages`` rounds, side by side with the ratio.
   Goal: about 1x (a claim reads its queue's index from its earliest due job, a conclusion
   the job's row).
3. Retention: ``--jobs`` finished jobs (four in five succeeded, one cancelled, finished 8 and 9
   days ago) and one dead job per hundred, purged by the relay (``Relay.run`` once a second as
   beat runs it, its defaults: batches of 1,000 at most 20 a pass, in the first 250 ms of the
   pass, after publishing) while ``--rate`` due jobs a second are added for it to publish. Its
   lateness (a job's publish minus its ``run_at``: the relay's period makes it 0 to 1 s) and
   the time of each pass, with the purge running and, for ``--baseline`` seconds before, the
   same relay with the purge off on the same store. Goal: the lateness the same, every dead job
   kept.

The jobs are written straight into each store's layout, in bulk (``bench_operations_fill.lua``
for Redis, ``INSERT ... SELECT generate_series`` for PostgreSQL); a sample is read back through
the store, so a layout that changed fails the run instead of measuring something else. Every
key is under a prefix of the run, every table under a prefix of its own, deleted at the end.
Every number depends on the machine: the header says how many cores and how loaded they were,
since the servers and this process share them.

    python bench/bench_operations.py [--jobs 1000000] [--only list,work,purge,redis,postgresql]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from celery import Celery
from celery.bin.base import CLIContext
from celery.signals import before_task_publish
from click.testing import CliRunner
from only import add_only, chosen
from redis import Redis
from sqlalchemy import Engine, create_engine, text
from stopping import clean_up_on_stop

from ddd_celery.background.store import (
    ClaimedJob,
    EnqueuedBy,
    JobFilter,
    JobLease,
    JobState,
    JobStatus,
    JobStore,
    NewJob,
)
from ddd_celery.celery import install_background_jobs, install_jobs
from ddd_celery.celery.background.relay import Relay, Retention
from ddd_celery.celery.cli import jobs as jobs_command
from ddd_celery.celery.config import read_config
from ddd_celery.kernel import InMemoryLock, SystemClock
from ddd_celery.kernel.instants import epoch_ms
from ddd_celery.redis import RedisJobStore, connect
from ddd_celery.sql import SqlJobStore, create_tables, drop_tables
from ddd_celery.sql.connection import to_micros

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
HERE = Path(__file__).parent
SMALL = 1_000
PAGE = 50
TOOK_MS = 1_000
"""How long after it was enqueued a filled job finished."""
REDIS_CHUNK = 2_000
"""Jobs one fill script writes: about 20 ms of Redis, so other clients are never held long."""
SQL_CHUNK = 100_000
STORES = ("redis", "postgresql")
SECTIONS = ("list", "work", "purge")
NAMES = {"redis": "Redis", "postgresql": "PostgreSQL"}
WORKER = "celery@bench"


def progress(text: str) -> None:
    print(f"\r{text:<78}", end="", file=sys.stderr, flush=True)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, int(len(ordered) * share) - 1)]


# --- the stores, filled in bulk ------------------------------------------------------------


@dataclass
class Bench:
    """The servers, and what a run made on them, deleted by ``clean``."""

    redis: Redis
    engine: Engine
    key_prefixes: list[str] = field(default_factory=list)
    table_prefixes: list[str] = field(default_factory=list)
    prefix_of: dict[int, str] = field(default_factory=dict)
    """Each store's prefix, by ``id`` of the store."""

    def new_store(self, kind: str) -> JobStore:
        store: JobStore
        if kind == "redis":
            prefix = f"bench:operations:{uuid.uuid4().hex[:8]}:"
            self.key_prefixes.append(prefix)
            store = RedisJobStore(self.redis, prefix=prefix)
        else:
            prefix = f"bench_ops_{uuid.uuid4().hex[:8]}_"
            self.table_prefixes.append(prefix)
            create_tables(self.engine, prefix)
            store = SqlJobStore(self.engine, prefix=prefix)
        self.prefix_of[id(store)] = prefix
        return store

    def fill(self, store: JobStore, mix: str, count: int, *, base: datetime, now: datetime) -> None:
        """``count`` jobs of ``mix`` (``bench_operations_fill.lua`` says each), the first
        enqueued at ``base``, a millisecond apart."""
        if isinstance(store, RedisJobStore):
            self._fill_redis(store, mix, count, base=base, now=now)
        else:
            assert isinstance(store, SqlJobStore)
            self._fill_sql(store, mix, count, base=base, now=now)

    def _fill_redis(
        self, store: RedisJobStore, mix: str, count: int, *, base: datetime, now: datetime
    ) -> None:
        script = self.redis.register_script((HERE / "bench_operations_fill.lua").read_text())
        prefix = self.prefix_of[id(store)]
        for start in range(0, count, REDIS_CHUNK):
            size = min(REDIS_CHUNK, count - start)
            script(args=[prefix, start, size, mix, epoch_ms(base), epoch_ms(now), TOOK_MS])
            progress(f"  filling {NAMES['redis']}: {start + size:,}/{count:,} {mix}")

    def _fill_sql(
        self, store: SqlJobStore, mix: str, count: int, *, base: datetime, now: datetime
    ) -> None:
        table = f"{self.prefix_of[id(store)]}jobs"
        for start in range(0, count, SQL_CHUNK):
            last = min(start + SQL_CHUNK, count) - 1
            with self.engine.begin() as connection:
                connection.execute(
                    text(FILL_SQL.format(table=table)),
                    {
                        "mix": mix,
                        "first": start,
                        "last": last,
                        "base": to_micros(base),
                        "now": to_micros(now),
                        "took": TOOK_MS * 1_000,
                    },
                )
            progress(f"  filling {NAMES['postgresql']}: {last + 1:,}/{count:,} {mix}")
        with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.execute(text(f'VACUUM ANALYZE "{table}"'))  # what autovacuum does

    def clean(self) -> None:
        for prefix in self.key_prefixes:
            progress(f"  deleting the keys of {prefix}")
            keys = []
            for key in self.redis.scan_iter(match=f"{prefix}*", count=10_000):
                keys.append(key)
                if len(keys) == 1_000:
                    self.redis.unlink(*keys)
                    keys = []
            if keys:
                self.redis.unlink(*keys)
        self.key_prefixes.clear()
        for prefix in self.table_prefixes:
            drop_tables(self.engine, prefix)
        self.table_prefixes.clear()


FILL_SQL = """
INSERT INTO "{table}" (id, name, queue, status, payload, enqueued_at, run_at, attempts,
    max_attempts, correlation_id, actor, tenant_id, tenant, last_error_code, last_error_type,
    lease_token, lease_expires_at, finished_at, relay_at, history)
SELECT id, name, 'bench', status, '{{"month":"2026-10"}}', enqueued_at, run_at, attempts, 3,
    id, 'system:bench', NULLIF(tenant, ''), tenant,
    CASE WHEN status IN ('failed', 'dead') THEN 'UNEXPECTED_ERROR' END,
    CASE WHEN status IN ('failed', 'dead') THEN 'RuntimeError' END,
    CASE WHEN status = 'running' THEN 'lease-' || id END,
    CASE WHEN status = 'running' THEN :now + 3600000000 END,
    CASE WHEN status IN ('succeeded', 'dead', 'cancelled') THEN enqueued_at + :took END,
    CASE WHEN status IN ('queued', 'failed') THEN run_at END,
    CASE WHEN attempts = 0 THEN '[]' ELSE json_build_array(json_build_object(
        'number', 1, 'started_at', enqueued_at, 'worker', 'celery@bench',
        'outcome', CASE status WHEN 'running' THEN 'running' WHEN 'succeeded' THEN 'succeeded'
            ELSE 'failed' END,
        'ended_at', CASE WHEN status = 'running' THEN NULL ELSE enqueued_at + :took END,
        'error_code', CASE WHEN status IN ('failed', 'dead') THEN 'UNEXPECTED_ERROR' END,
        'error_type', CASE WHEN status IN ('failed', 'dead') THEN 'RuntimeError' END))::text
    END
FROM (
    SELECT id, name, tenant, enqueued_at, status,
        CASE WHEN state = 'scheduled' THEN :now + 86400000000
            WHEN state = 'failed' THEN :now + 3600000000 ELSE enqueued_at END AS run_at,
        CASE WHEN status IN ('queued', 'cancelled') THEN 0 ELSE 1 END AS attempts
    FROM (
        SELECT id, name, tenant, enqueued_at, state,
            CASE WHEN state IN ('ready', 'scheduled') THEN 'queued' ELSE state END AS status
        FROM (
            SELECT :mix || '-' || lpad(g::text, 9, '0') AS id,
                'bench.job-' || ((g / 20) % 10) AS name,
                CASE WHEN :mix = 'list' THEN 'tenant-' || ((g / 40) % 10) ELSE '' END
                    AS tenant,
                :base + g * 1000 AS enqueued_at,
                CASE :mix
                    WHEN 'list' THEN (ARRAY['succeeded', 'succeeded', 'succeeded',
                        'succeeded', 'succeeded', 'succeeded', 'succeeded', 'succeeded',
                        'succeeded', 'succeeded', 'cancelled', 'cancelled', 'dead', 'dead',
                        'ready', 'ready', 'scheduled', 'scheduled', 'failed',
                        'running'])[g % 20 + 1]
                    WHEN 'purge' THEN CASE WHEN g % 5 = 4 THEN 'cancelled' ELSE 'succeeded' END
                    ELSE 'dead'
                END AS state
            FROM generate_series(CAST(:first AS bigint), CAST(:last AS bigint)) AS g
        ) AS generated
    ) AS stated
) AS timed
"""
"""The rows ``bench_operations_fill.lua`` writes, as the SQL store keeps them (microseconds)."""

LIST_STATUSES = (
    [JobStatus.SUCCEEDED] * 10
    + [JobStatus.CANCELLED] * 2
    + [JobStatus.DEAD] * 2
    + [JobStatus.QUEUED] * 4
    + [JobStatus.FAILED, JobStatus.RUNNING]
)
"""The status of job i of the list mix is ``LIST_STATUSES[i % 20]``, as the fill writes it."""


def list_counts(count: int) -> dict[JobStatus, int]:
    counts: dict[JobStatus, int] = {}
    for residue, status in enumerate(LIST_STATUSES):
        counts[status] = counts.get(status, 0) + len(range(residue, count, 20))
    return counts


def check_filled(store: JobStore, mix: str, count: int, statuses: dict[JobStatus, int]) -> None:
    """Read back what the fill wrote, through the store: a layout that changed stops here."""
    stats = store.stats()
    for status, expected in statuses.items():
        assert stats.total(status) == expected, (status, stats.total(status), expected)
    for index in (0, count // 2, count - 1):
        job = store.find(f"{mix}-{index:09}", tenant_id=None)
        assert job is not None, f"{mix}-{index:09} is not found: the store's layout changed"
        assert job.name == f"bench.job-{index // 20 % 10}"
    page = store.list_page(JobFilter(), now=datetime.now(UTC), limit=PAGE)
    assert len(page.jobs) == min(PAGE, count)
    assert page.jobs[0].id.startswith(mix)


# --- 1. listing ----------------------------------------------------------------------------


def listing_app(store: JobStore) -> Celery:
    """An app on the store, as an operator's ``celery -A app jobs`` loads it."""
    app = Celery(f"bench-ops-{uuid.uuid4().hex[:8]}", broker="memory://", set_as_current=False)
    app.conf.update(ddd_celery_redis_url=None)
    install_jobs(app, jobs=[], lock=InMemoryLock(SystemClock()), environ={})
    install_background_jobs(app, jobs=[], store=store)
    return app


def list_cli(app: Celery) -> Callable[[], object]:
    context = CLIContext(app=app, no_color=True, workdir=None, quiet=False)
    runner = CliRunner()

    def run() -> None:
        done = runner.invoke(jobs_command, ["background", "list"], obj=context)
        assert done.exit_code == 0, done.output
        assert done.output.count("\n") > PAGE, done.output

    return run


def queries(store: JobStore, now: datetime) -> dict[str, Callable[[], object]]:
    """A page of 50 by each kind of listing, on ``store``."""
    cursor: str | None = None
    for _ in range(19):
        cursor = store.list_page(JobFilter(), now=now, limit=PAGE, cursor=cursor).cursor

    def page(where: JobFilter, at: str | None = None) -> Callable[[], object]:
        return lambda: store.list_page(where, now=now, limit=PAGE, cursor=at)

    return {
        "list_page, no filter": page(JobFilter()),
        "list_page, state dead": page(JobFilter(state=JobState.DEAD)),
        "list_page, job name": page(JobFilter(name="bench.job-3")),
        "list_page, tenant": page(JobFilter(tenant_id="tenant-7")),
        "list_page, page 20 (cursor)": page(JobFilter(), cursor),
        "jobs background list": list_cli(listing_app(store)),
    }


def timed_ms(call: Callable[[], object]) -> float:
    began = time.perf_counter()
    call()
    return (time.perf_counter() - began) * 1000


def filled(bench: Bench, kind: str, jobs: int, now: datetime) -> tuple[list[JobStore], float]:
    """Two stores of the list mix, of ``SMALL`` and of ``jobs`` jobs; and the big fill's s."""
    stores, fill_s = [], 0.0
    for count in (SMALL, jobs):
        store = bench.new_store(kind)
        began = time.perf_counter()
        bench.fill(store, "list", count, base=now - timedelta(days=9), now=now)
        fill_s = time.perf_counter() - began
        check_filled(store, "list", count, list_counts(count))
        stores.append(store)
    return stores, fill_s


def side_by_side(
    kind: str,
    section: str,
    small: Callable[[], dict[str, float]],
    large: Callable[[], dict[str, float]],
    rounds: int,
) -> dict[str, list[float]]:
    """The median ms of each step of ``rounds`` rounds on each size, the sizes alternating."""
    on: list[dict[str, list[float]]] = [{}, {}]
    for round_ in range(3 + rounds):
        progress(f"{section} {NAMES[kind]}: round {round_ + 1}/{3 + rounds}")
        for size, run in enumerate((small, large)):
            spent = run()
            if round_ >= 3:  # warm: the first pay for connecting and for the caches
                for step, ms in spent.items():
                    on[size].setdefault(step, []).append(ms)
    return {
        step: [statistics.median(on[0][step]), statistics.median(on[1][step])] for step in on[0]
    }


def listing(stores: list[JobStore], kind: str, pages: int, now: datetime) -> dict[str, list[float]]:
    """ms per page among ``SMALL`` and among ``jobs`` jobs, by query."""
    small, large = (queries(store, now) for store in stores)

    def pager(calls: dict[str, Callable[[], object]]) -> Callable[[], dict[str, float]]:
        return lambda: {name: timed_ms(call) for name, call in calls.items()}

    return side_by_side(kind, "1.", pager(small), pager(large), pages)


# --- 2. a worker's work --------------------------------------------------------------------

LEASE_MS = 60_000


def worker_round(store: JobStore) -> Callable[[], dict[str, float]]:
    """One round of a worker's calls on ``store``, timed each: what ``tasks.py`` (a claim by
    the message's job id) and ``Attempt`` (a conclusion) send, and a poller's ``claim_due``."""

    def claimed(claim: Callable[[], object]) -> tuple[JobLease, float]:
        began = time.perf_counter()
        answer = claim()
        ms = (time.perf_counter() - began) * 1000
        job = answer[0] if isinstance(answer, list) else answer
        assert isinstance(job, ClaimedJob), f"nothing was claimed: {answer!r}"
        return job.lease, ms

    def one_round() -> dict[str, float]:
        now = datetime.now(UTC)
        fresh = [f"work-{uuid.uuid4().hex}" for _ in range(3)]  # one claimed by id, two polled
        for job_id in fresh:
            store.add(due_job(job_id, now), dispatched=True)
        now = datetime.now(UTC)
        spent: dict[str, float] = {}
        lease, spent["claim_job (a task's message)"] = claimed(
            lambda: store.claim_job(
                fresh[0], now=now, lease_ms=LEASE_MS, token=uuid.uuid4().hex, worker=WORKER
            )
        )
        spent["complete"] = timed_ms(lambda: store.complete(lease, now=now))
        poll = partial(
            store.claim_due, ["bench"], now=now, lease_ms=LEASE_MS, limit=1, worker=WORKER
        )
        lease, spent["claim_due, 1 job (a poller)"] = claimed(poll)
        retry_at = now + timedelta(hours=1)
        spent["fail, retried"] = timed_ms(
            lambda: store.fail(
                lease, now=now, error_code="BOOM", error_type="BoomError", retry_at=retry_at
            )
        )
        lease, _ = claimed(poll)
        spent["fail, dead"] = timed_ms(
            lambda: store.fail(
                lease, now=now, error_code="BOOM", error_type="BoomError", retry_at=None
            )
        )
        return spent

    return one_round


def working(stores: list[JobStore], kind: str, rounds: int) -> dict[str, list[float]]:
    """ms per call among ``SMALL`` and among ``jobs`` jobs, by call."""
    small, large = (worker_round(store) for store in stores)
    return side_by_side(kind, "2.", small, large, rounds)


# --- 3. retention --------------------------------------------------------------------------


@dataclass
class Drive:
    """What the relay did in a run of passes."""

    lateness_ms: list[float]
    pass_ms: list[float]
    purged: int
    seconds: float
    """From the first pass's start to the last one's end."""
    skipped: int


def drive(
    store: JobStore,
    relay: Relay,
    *,
    rate: int,
    label: str,
    seconds: float | None = None,
    purge: int = 0,
) -> Drive:
    """Run ``relay`` once a second, as beat does, while ``rate`` due jobs a second are added,
    for ``seconds`` or until ``purge`` jobs were purged; a pass that overruns the next second
    skips it, as beat's ``skipped-overlap``."""
    clock = SystemClock()
    due: dict[str, float] = {}
    sent: dict[str, float] = {}
    stop = threading.Event()

    def on_publish(sender: str = "", body: Any = None, **_: Any) -> None:
        sent.setdefault(body[1]["job_id"], time.time())

    def produce() -> None:
        while not stop.wait(1 / rate):
            at = clock.now()
            job_id = f"due-{uuid.uuid4().hex}"
            store.add(due_job(job_id, at), dispatched=False)
            due[job_id] = at.timestamp()

    before_task_publish.connect(on_publish, weak=False)
    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    started = time.monotonic()
    pass_ms: list[float] = []
    purged = skipped = second = 0
    try:
        while True:
            second += 1
            time.sleep(max(0.0, started + second - time.monotonic()))
            began = time.monotonic()
            tick = relay.run()
            ended = time.monotonic()
            pass_ms.append((ended - began) * 1000)
            purged += sum(tick.purged.values())
            late = int(ended - started) - second
            if late > 0:
                skipped += late
                second += late
            ran = ended - started - 1  # from the first pass
            progress(f"3. {label}: {ran:5.0f} s, {purged:,}/{purge:,} purged")
            if (seconds is not None and ran >= seconds) or (purge and purged >= purge):
                break
    finally:
        stop.set()
        producer.join()
        before_task_publish.disconnect(on_publish)
    lateness = [(sent[job_id] - at) * 1000 for job_id, at in due.items() if job_id in sent]
    return Drive(lateness, pass_ms, purged, ran, skipped)


def due_job(job_id: str, at: datetime) -> NewJob:
    return NewJob(
        id=job_id,
        name="bench.job-0",
        queue="bench",
        payload={"month": "2026-10"},
        enqueued_at=at,
        run_at=at,
        max_attempts=3,
        enqueued_by=EnqueuedBy(correlation_id=job_id, actor="system:bench"),
    )


def retention(bench: Bench, kind: str, jobs: int, rate: int, baseline_s: float) -> list[str]:
    store = bench.new_store(kind)
    now = datetime.now(UTC)
    dead = max(1, jobs // 100)
    began = time.perf_counter()
    bench.fill(store, "purge", jobs, base=now - timedelta(days=9), now=now)
    bench.fill(store, "dead", dead, base=now - timedelta(days=30), now=now)
    fill_s = time.perf_counter() - began
    cancelled = len(range(4, jobs, 5))
    check_filled(
        store,
        "purge",
        jobs,
        {
            JobStatus.SUCCEEDED: jobs - cancelled,
            JobStatus.CANCELLED: cancelled,
            JobStatus.DEAD: dead,
        },
    )
    app = Celery(f"bench-ops-{uuid.uuid4().hex[:8]}", broker="memory://", set_as_current=False)

    def relay(kept: Retention) -> Relay:
        # published jobs no worker claims are not sent again within the run
        return Relay(app, store, SystemClock(), retention=kept, redispatch_after_ms=3_600_000)

    name = NAMES[kind]
    without = drive(
        store, relay(Retention({}, batch=0)), rate=rate, label=f"{name}, no purge",
        seconds=baseline_s,
    )  # fmt: skip
    default = Retention.of(read_config({}))
    purging = drive(store, relay(default), rate=rate, label=f"{name}, purge", purge=jobs)
    stats = store.stats()
    left = [stats.total(status) for status in (JobStatus.SUCCEEDED, JobStatus.CANCELLED)]
    assert left == [0, 0], left
    kept = stats.total(JobStatus.DEAD)
    app.close()
    bench.clean()
    rows = []
    for what, run in (("no purge", without), ("purge", purging)):
        rate_text = f"{run.purged / run.seconds:>10,.0f}" if run.purged else f"{'-':>10}"
        rows.append(
            f"{name + ', ' + what:<22}{run.purged:>10,}{run.seconds:>7.1f}{rate_text}"
            f"{percentile(run.lateness_ms, 0.5):>9.0f}{percentile(run.lateness_ms, 0.99):>6.0f}"
            f"{max(run.lateness_ms):>6.0f}{percentile(run.pass_ms, 0.5):>9.1f}"
            f"{percentile(run.pass_ms, 0.99):>7.1f}{max(run.pass_ms):>7.1f}{run.skipped:>8}"
        )
    rows.append(
        f"{'':<22}filled in {fill_s:.1f} s; dead jobs kept: {kept:,} of {dead:,}; "
        f"{len(purging.lateness_ms) + len(without.lateness_ms):,} due jobs published"
    )
    return rows


# --- the run -------------------------------------------------------------------------------


@contextmanager
def servers() -> Iterator[Bench]:
    bench = Bench(connect(REDIS_URL, timeout=30.0), create_engine(DATABASE_URL))
    try:
        yield bench
    finally:
        bench.clean()
        bench.engine.dispose()
        bench.redis.close()


def print_sizes(spent_by_store: dict[str, dict[str, list[float]]], jobs: int) -> None:
    """A table of ms at each size and their ratio, a store a column group."""
    header = "".join(f"{NAMES[kind]:>30}" for kind in spent_by_store)
    print(f"{'':<30}{header}")
    sizes = "".join(f"{SMALL:>9,}{jobs:>12,}{'ratio':>9}" for _ in spent_by_store)
    print(f"{'':<30}{sizes}")
    for name in next(iter(spent_by_store.values())):
        cells = "".join(
            f"{spent[name][0]:>9.2f}{spent[name][1]:>12.2f}{spent[name][1] / spent[name][0]:>8.2f}x"
            for spent in spent_by_store.values()
        )
        print(f"{name:<30}{cells}")


def main() -> None:
    clean_up_on_stop()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000, help="jobs of the large store")
    parser.add_argument("--pages", type=int, default=100, help="pages timed per query and size")
    parser.add_argument("--rate", type=int, default=50, help="due jobs added a second")
    parser.add_argument("--baseline", type=float, default=20.0, help="seconds without purge")
    add_only(parser, SECTIONS, STORES)
    args = parser.parse_args()
    sections, stores = chosen(parser, args.only, SECTIONS, STORES)
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    listed: dict[str, dict[str, list[float]]] = {}
    worked: dict[str, dict[str, list[float]]] = {}
    fills: dict[str, float] = {}
    retained: list[str] = []
    with servers() as bench:
        if {"list", "work"} & set(sections):
            for kind in stores:
                now = datetime.now(UTC)
                sized, fills[kind] = filled(bench, kind, args.jobs, now)
                if "list" in sections:
                    listed[kind] = listing(sized, kind, args.pages, now)
                if "work" in sections:
                    worked[kind] = working(sized, kind, args.pages)
                bench.clean()
        if "purge" in sections:
            for kind in stores:
                retained += retention(bench, kind, args.jobs, args.rate, args.baseline)
    print("\r", end="", file=sys.stderr)
    end_load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    where = f"Redis {REDIS_URL.split('@')[-1]}, PostgreSQL {DATABASE_URL.split('@')[-1]}"
    print(f"Operating background jobs, Python {sys.version.split()[0]}, {where}")
    print(f"{os.cpu_count()} CPUs, load average at the start: {load}; at the end: {end_load}")
    if listed:
        print()
        print(
            f"1. A page of {PAGE}, ms (median of {args.pages} pages), among {SMALL:,} and "
            f"{args.jobs:,} jobs (goal: about 1x)"
        )
        print_sizes(listed, args.jobs)
    if worked:
        print()
        print(
            f"2. A worker's calls, ms (median of {args.pages} rounds), among {SMALL:,} and "
            f"{args.jobs:,} jobs, 1 in 10 ready (goal: about 1x)"
        )
        print_sizes(worked, args.jobs)
    if fills:
        filled_in = ", ".join(f"{NAMES[kind]} {fill_s:.1f} s" for kind, fill_s in fills.items())
        print(f"filled {args.jobs:,} jobs in: {filled_in}")
    if retained:
        print()
        print(
            f"3. Retention: {args.jobs:,} finished jobs purged by the relay (a pass a second, "
            f"batches of 1,000, 250 ms a pass at most, after publishing) while {args.rate} "
            "due jobs a second are published; lateness = publish - run_at"
        )
        print(
            f"{'':<22}{'purged':>10}{'s':>7}{'jobs/s':>10}{'late p50':>9}{'p99':>6}{'max':>6}"
            f"{'pass p50':>9}{'p99':>7}{'max':>7}{'skipped':>8}   (ms)"
        )
        for line in retained:
            print(line)


if __name__ == "__main__":
    main()
