"""The operator's page (``ddd_celery.web``) on big stores, on the real Redis and PostgreSQL.

1. Background jobs: each page of ``/background`` (no filter, the state ``dead``, a job name, a
   tenant, the 20th page through its cursor), a job's page, the JSON listing and the dashboard
   (the store's counters and two pages of the latest finished jobs), among 1,000 jobs and among
   ``--jobs`` (1,000,000), on ``RedisJobStore`` and ``SqlJobStore``. The jobs are written in
   bulk in each store's layout by ``bench_operations.py``'s fill (a Lua script,
   ``INSERT ... SELECT generate_series``) and read back through the store first.
2. Scheduled jobs: ``/scheduled`` (the first page, one in the middle, a search), a job's page
   and the JSON listing among 100 jobs and among ``--scheduled`` (10,000), their stores on
   Redis (the lock, run state, checkpoints, last runs, pauses of ``ddd_celery_redis_url``) and
   on PostgreSQL (``SqlLock`` and the SQL stores), each job with ``--records`` runs in its
   history.

Each request goes through the whole ASGI application (routing, the store calls in a worker
thread, the templates) by ``httpx.ASGITransport``, without a socket; the figure is the median
of ``--pages`` requests, the two sizes alternating, with the ratio. Goal: a fraction of a second
at the large sizes, about 1x (a page reads an index from its cursor, never the jobs before it).

    python bench/bench_web.py [--jobs 1000000] [--scheduled 10000]
        [--only background,scheduled,redis,postgresql]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from bench_operations import (
    NAMES,
    SMALL,
    STORES,
    Bench,
    check_filled,
    list_counts,
    listing_app,
    progress,
    servers,
)
from celery import Celery
from only import add_only, chosen
from sqlalchemy import Engine
from stopping import clean_up_on_stop

from ddd_celery.background.store import JobFilter
from ddd_celery.celery import install_jobs
from ddd_celery.celery.registry import jobs_of
from ddd_celery.declarations import ScheduledJobDeclaration, parse_job_schedule
from ddd_celery.kernel import SystemClock
from ddd_celery.scheduling.outcomes import JobRun, Outcome
from ddd_celery.sql import (
    SqlJobCheckpoints,
    SqlJobLastRuns,
    SqlJobRunState,
    SqlLock,
    create_tables,
    drop_tables,
)
from ddd_celery.web import create_app

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
SECTIONS = ("background", "scheduled")
FEW_SCHEDULED = 100
SCHEDULES = [
    {"every": "15m"},
    {"cron": "0 7 * * 1-5", "time_zone": "Europe/Paris"},
    {"cron": "30 2 * * *", "time_zone": "America/New_York"},
    {"every": "1h"},
]
OUTCOMES = [Outcome.SUCCEEDED, Outcome.SUCCEEDED, Outcome.FAILED, Outcome.MISSED]


class IdleJob:
    def run(self, execution: object) -> None:
        return None


Requests = dict[str, Callable[[httpx.AsyncClient, int], Any]]
"""Each request by name: how it is asked of the client of app ``i``."""


async def timed(apps: list[Any], requests: Requests, pages: int) -> dict[str, list[float]]:
    """The median ms of each request on each app, the apps alternating."""
    clients = [
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://bench")
        for app in apps
    ]
    spent: dict[str, list[float]] = {}
    try:
        for name, ask in requests.items():
            progress(f"  {name}")
            for index, client in enumerate(clients):
                for _ in range(3):  # warm: connections, caches, templates
                    answer = await ask(client, index)
                    assert answer.status_code == 200, (name, answer.status_code, answer.text[:500])
            times: list[list[float]] = [[] for _ in clients]
            for _ in range(pages):
                for index, client in enumerate(clients):
                    began = time.perf_counter()
                    answer = await ask(client, index)
                    times[index].append((time.perf_counter() - began) * 1000)
                    assert answer.status_code == 200
            spent[name] = [statistics.median(each) for each in times]
    finally:
        for client in clients:
            await client.aclose()
    return spent


# --- 1. background jobs --------------------------------------------------------------------


def get(path: str, **params: str) -> Callable[[httpx.AsyncClient, int], Any]:
    return lambda client, _: client.get(path, params=params)


def background_requests(cursors: list[str]) -> Requests:
    return {
        "/background (no filter)": get("/background"),
        "/background?state=dead": get("/background", state="dead"),
        "/background?name=": get("/background", name="bench.job-3"),
        "/background?tenant=": get("/background", tenant="tenant-7"),
        "/background, page 20 (cursor)": lambda client, index: client.get(
            "/background", params={"cursor": cursors[index]}
        ),
        "/background/job?id=": get("/background/job", id="list-000000012"),
        "/api/background/jobs": get("/api/background/jobs"),
        "/ (dashboard)": get("/"),
    }


def background(
    bench: Bench, kind: str, jobs: int, pages: int
) -> tuple[dict[str, list[float]], float]:
    now = datetime.now(UTC)
    base = now - timedelta(days=9)
    apps, cursors, fill_s = [], [], 0.0
    for count in (SMALL, jobs):
        store = bench.new_store(kind)
        began = time.perf_counter()
        bench.fill(store, "list", count, base=base, now=now)
        fill_s = time.perf_counter() - began
        check_filled(store, "list", count, list_counts(count))
        cursor: str | None = None
        for _ in range(19):
            cursor = store.list_page(JobFilter(), now=now, limit=50, cursor=cursor).cursor
        assert cursor is not None
        cursors.append(cursor)
        apps.append(create_app(listing_app(store), refresh_seconds=0))
    progress(f"1. {NAMES[kind]}")
    spent = asyncio.run(timed(apps, background_requests(cursors), pages))
    bench.clean()
    return spent, fill_s


# --- 2. scheduled jobs ---------------------------------------------------------------------


@dataclass
class Scheduled:
    """The apps of section 2 and what they made, deleted by ``clean``."""

    bench: Bench
    apps: list[Celery] = field(default_factory=list)
    key_prefixes: list[str] = field(default_factory=list)
    table_prefixes: list[str] = field(default_factory=list)

    def app(self, kind: str, count: int, records: int) -> Celery:
        """An app of ``count`` scheduled jobs on ``kind``'s stores, ``records`` runs each."""
        app = Celery(f"bench-web-{uuid.uuid4().hex[:8]}", broker="memory://", set_as_current=False)
        clock = SystemClock()
        declared = [
            ScheduledJobDeclaration(
                f"{context}.job-{number:05d}",
                context,
                parse_job_schedule(SCHEDULES[number % len(SCHEDULES)]),
                IdleJob,
            )
            for number in range(count)
            for context in ["billing" if number % 3 else "reports"]
        ]
        if kind == "redis":
            prefix = f"bench:web:{uuid.uuid4().hex[:8]}:"
            self.key_prefixes.append(prefix)
            app.conf.update(ddd_celery_redis_url=REDIS_URL, ddd_celery_key_prefix=prefix)
            install_jobs(app, jobs=declared, environ={}, clock=clock)
        else:
            tables = f"bench_web_{uuid.uuid4().hex[:8]}_"
            self.table_prefixes.append(tables)
            engine: Engine = self.bench.engine
            create_tables(engine, tables)
            app.conf.ddd_celery_redis_url = None
            install_jobs(
                app,
                jobs=declared,
                environ={},
                clock=clock,
                lock=SqlLock(engine, clock, prefix=tables),
                run_state=SqlJobRunState(engine, clock, prefix=tables),
                checkpoints=SqlJobCheckpoints(engine, prefix=tables),
                last_runs=SqlJobLastRuns(engine, prefix=tables),
            )
        self.apps.append(app)
        registry = jobs_of(app)
        last_runs = registry.last_runs
        assert last_runs is not None
        start = datetime.now(UTC) - timedelta(days=1)
        for number, job in enumerate(declared):
            for record in range(records):
                at = start + timedelta(hours=record, seconds=number)
                outcome = OUTCOMES[(number + record) % len(OUTCOMES)]
                ran = outcome in (Outcome.SUCCEEDED, Outcome.FAILED)
                last_runs.write(
                    JobRun(
                        job=job.name,
                        scheduled_at=at,
                        outcome=outcome,
                        context=job.context,
                        started_at=at if ran else None,
                        duration_ms=5.0 if ran else None,
                        error_code="UNEXPECTED_ERROR" if outcome is Outcome.FAILED else None,
                        error_type="RuntimeError" if outcome is Outcome.FAILED else None,
                        correlation_id=f"c-{number}-{record}",
                    )
                )
            if number % 500 == 0:
                progress(f"  {NAMES[kind]}: the history of {number:,}/{count:,} jobs")
        registry.pauses.pause(declared[-1].name, by="bench", at=datetime.now(UTC))
        return app

    def clean(self) -> None:
        for app in self.apps:
            app.close()
        self.apps.clear()
        for prefix in self.key_prefixes:
            for key in self.bench.redis.scan_iter(match=f"{prefix}*", count=10_000):
                self.bench.redis.unlink(key)
        self.key_prefixes.clear()
        for tables in self.table_prefixes:
            drop_tables(self.bench.engine, tables)
        self.table_prefixes.clear()


def scheduled(
    bench: Bench, kind: str, count: int, records: int, pages: int
) -> dict[str, list[float]]:
    made = Scheduled(bench)
    try:
        apps = [made.app(kind, size, records) for size in (FEW_SCHEDULED, count)]
        progress(f"2. {NAMES[kind]}")

        requests = {
            "/scheduled (first page)": get("/scheduled"),
            "/scheduled?after= (middle)": get("/scheduled", after="billing.job-00050"),
            "/scheduled?q= (search)": get("/scheduled", q="job-0004"),
            "/scheduled/job?name=": get("/scheduled/job", name="billing.job-00001"),
            "/api/scheduled": get("/api/scheduled"),
            "/ (dashboard)": get("/"),
        }
        pages_of = [create_app(app, refresh_seconds=0) for app in apps]
        return asyncio.run(timed(pages_of, requests, pages))
    finally:
        made.clean()


# --- the run -------------------------------------------------------------------------------


def table(title: str, sizes: tuple[int, int], results: dict[str, dict[str, list[float]]]) -> None:
    print()
    print(title)
    header = "".join(f"{NAMES[kind]:>32}" for kind in results)
    print(f"{'':<32}{header}")
    print(f"{'':<32}" + "".join(f"{sizes[0]:>10,}{sizes[1]:>13,}{'ratio':>9}" for _ in results))
    for name in next(iter(results.values())):
        cells = "".join(
            f"{few:>10.1f}{many:>13.1f}{many / few:>8.2f}x"
            for few, many in (spent[name] for spent in results.values())
        )
        print(f"{name:<32}{cells}")


def main() -> None:
    clean_up_on_stop()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000, help="background jobs, large store")
    parser.add_argument("--scheduled", type=int, default=10_000, help="scheduled jobs, large app")
    parser.add_argument("--records", type=int, default=3, help="history records per scheduled job")
    parser.add_argument("--pages", type=int, default=30, help="requests timed per page and size")
    add_only(parser, SECTIONS, STORES)
    args = parser.parse_args()
    sections, stores = chosen(parser, args.only, SECTIONS, STORES)
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    listed: dict[str, dict[str, list[float]]] = {}
    fills: dict[str, float] = {}
    timed_scheduled: dict[str, dict[str, list[float]]] = {}
    with servers() as bench:
        if "background" in sections:
            for kind in stores:
                listed[kind], fills[kind] = background(bench, kind, args.jobs, args.pages)
        if "scheduled" in sections:
            for kind in stores:
                timed_scheduled[kind] = scheduled(
                    bench, kind, args.scheduled, args.records, args.pages
                )
    print("\r", end="", file=sys.stderr)
    end_load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"The operator's page (ddd_celery.web), Python {sys.version.split()[0]}")
    print(f"{os.cpu_count()} CPUs, load average at the start: {load}; at the end: {end_load}")
    if listed:
        table(
            f"1. Background jobs: ms a page (median of {args.pages}), among {SMALL:,} and "
            f"{args.jobs:,} jobs",
            (SMALL, args.jobs),
            listed,
        )
        print("filled in: " + ", ".join(f"{NAMES[k]} {s:.1f} s" for k, s in fills.items()))
    if timed_scheduled:
        table(
            f"2. Scheduled jobs: ms a page (median of {args.pages}), among {FEW_SCHEDULED:,} and "
            f"{args.scheduled:,} jobs, {args.records} records of history each",
            (FEW_SCHEDULED, args.scheduled),
            timed_scheduled,
        )


if __name__ == "__main__":
    main()
