"""The beat scheduler side by side with Celery's default scheduler and redbeat, in one run.

1. CPU per idle ``tick()``: the three schedulers hold the same ``beat_schedule`` of N crontab
   entries, none due for hours, and tick until each has spent ``--cpu`` seconds of CPU
   (``time.process_time``) after a warm-up tick; wall time per tick beside it. Celery's
   ``PersistentScheduler`` keeps its shelve in a temporary directory; redbeat keeps its entries
   on the real Redis under a prefix of its own, holds its beat lock as it does in production
   (extended at each tick), and is cleaned up afterwards. Ours is wired by ``install_jobs``,
   which translates the same entries.
2. Delay from an occurrence's instant to its publish, with two ``celery beat`` services (two
   processes, ``celery.beat.Service``) sharing ``RedisLock``, ``RedisJobRunState`` and
   ``RedisJobCheckpoints`` on the real Redis, and publishing to it as a broker: for each size
   of ``--jobs``, that many jobs of ``every: '1s'`` for ``--seconds`` seconds on the real
   clock. The publish instant is taken when ``send_task`` returns. A beat's first publish pays
   once for connecting to the broker and for Celery's lazy set-up: the instants up to the last
   beat's first publish are shown apart (warm-up), not in the percentiles. The jobs of a set
   are all due at the same instant, so the delay grows with the set: each beat handles them
   one after the other. This process plays the worker: it ends each run in the run state half
   a second after its instant, so overlap never holds an occurrence back; the beats keep their
   publish instants to themselves until they stop, so nothing else runs while they send.
   ``late_after_ms`` is 5 s, so leases are released within the run as they are in a steady
   state (with the default 60 s, after the first minute).
3. Redis round trips per occurrence made by the beats (the worker's own are not counted),
   counted by a redis-py connection that counts the commands it sends, once leases are being
   released.

Every number depends on the machine: the header says how many cores it has and how loaded it
was, since the beats, Redis and this process share them.

    python bench/bench_beat.py [--sizes 100,1000,10000] [--cpu 1.0] [--jobs 1,5,20] [--seconds 30]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Generator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

from celery import Celery
from celery.beat import PersistentScheduler, Service
from celery.schedules import crontab
from redbeat.schedulers import RedBeatScheduler, acquire_distributed_beat_lock
from redis import ConnectionPool, Redis
from redis.connection import Connection
from stopping import clean_up_on_stop

from ddd_celery.celery import install_jobs
from ddd_celery.celery.beat import JobBeatScheduler
from ddd_celery.declarations import ScheduledJobDeclaration, parse_job_schedule
from ddd_celery.kernel.clock import SystemClock
from ddd_celery.kernel.lock import InMemoryLock
from ddd_celery.redis import RedisJobCheckpoints, RedisJobRunState, RedisLock

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
LATE_AFTER_MS = 5_000
"""Short enough for leases to be released within a run, as in a steady state."""


def progress(text: str) -> None:
    print(f"\r{text:<78}", end="", file=sys.stderr, flush=True)


# --- 1. CPU per idle tick ------------------------------------------------------------------


def entries(count: int) -> dict[str, dict[str, Any]]:
    """``count`` crontab entries spread over the minutes of an hour twelve hours from now."""
    hour = (datetime.now(UTC).hour + 12) % 24
    return {
        f"entry-{index}": {"task": "bench.noop", "schedule": crontab(minute=index % 60, hour=hour)}
        for index in range(count)
    }


def app_with(count: int, **settings: Any) -> Celery:
    app = Celery(f"bench-{uuid.uuid4().hex[:8]}", broker="memory://", set_as_current=False)
    app.conf.update(beat_schedule=entries(count), timezone="UTC", **settings)
    return app


@dataclass(frozen=True)
class TickCost:
    cpu_us: float
    wall_us: float
    ticks: int


def tick_cost(tick: Callable[[], object], budget_s: float) -> TickCost:
    """Tick until ``budget_s`` of CPU is spent, after one warm-up tick."""
    tick()
    ticks, batch = 0, 1
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    while time.process_time() - cpu_start < budget_s:
        for _ in range(batch):
            tick()
        ticks += batch
        batch = min(batch * 2, 4096)
    cpu, wall = time.process_time() - cpu_start, time.perf_counter() - wall_start
    return TickCost(cpu / ticks * 1e6, wall / ticks * 1e6, ticks)


def ours(count: int) -> Generator[Callable[[], object]]:
    app = app_with(count)
    install_jobs(app, jobs=[], lock=InMemoryLock(SystemClock()), environ={}, start=True)
    scheduler = JobBeatScheduler(app=app)
    yield scheduler.tick


def celery_default(count: int) -> Generator[Callable[[], object]]:
    with tempfile.TemporaryDirectory() as directory:
        app = app_with(count)
        scheduler = PersistentScheduler(
            app=app, schedule_filename=str(Path(directory) / "celerybeat-schedule")
        )
        try:
            yield scheduler.tick
        finally:
            scheduler.close()


def redbeat(count: int) -> Generator[Callable[[], object]]:
    prefix = f"bench:redbeat:{uuid.uuid4().hex}:"
    app = app_with(count, redbeat_redis_url=REDIS_URL, redbeat_key_prefix=prefix)
    client = Redis.from_url(REDIS_URL)
    try:
        scheduler = RedBeatScheduler(app=app)
        acquire_distributed_beat_lock(sender=SimpleNamespace(scheduler=scheduler))
        yield scheduler.tick
        scheduler.close()
    finally:
        for key in client.scan_iter(match=f"{prefix}*"):
            client.delete(key)
        client.close()


SCHEDULERS: dict[str, Callable[[int], Generator[Callable[[], object]]]] = {
    "ddd_celery JobBeatScheduler": ours,
    "celery PersistentScheduler": celery_default,
    "redbeat RedBeatScheduler": redbeat,
}


def idle_ticks(sizes: list[int], budget_s: float) -> dict[tuple[str, int], TickCost]:
    costs: dict[tuple[str, int], TickCost] = {}
    for size in sizes:
        for name, build in SCHEDULERS.items():
            progress(f"idle tick: {name} with {size:,} entries (setting up)")
            ticks = build(size)
            tick = next(ticks)
            progress(f"idle tick: {name} with {size:,} entries (measuring)")
            costs[name, size] = tick_cost(tick, budget_s)
            ticks.close()
    return costs


# --- 2 and 3. Two beats on the real clock and the real Redis --------------------------------


class CountingConnection(Connection):
    """Counts each command it sends by name: one command is one round trip for our stores."""

    sent: ClassVar[Counter[str]] = Counter()

    def send_command(self, *args: Any, **kwargs: Any) -> None:
        CountingConnection.sent[str(args[0]).upper()] += 1
        super().send_command(*args, **kwargs)  # type: ignore[no-untyped-call]


class Tick:
    """The job of the latency run; it never runs here, beat only sends it."""

    def run(self, execution: object) -> None:
        return None


def beat_process(
    *,
    index: int,
    prefix: str,
    jobs: int,
    start_at: float,
    count_from: float,
    stop_at: float,
    out: Any,
) -> None:
    """One ``celery beat`` service publishing to the real Redis, from ``start_at`` to ``stop_at``.

    Its Redis commands are counted from ``count_from``, once leases are being released.
    """
    app = Celery(f"bench-beat-{index}", broker=REDIS_URL, set_as_current=False)
    app.conf.update(
        broker_transport_options={"global_keyprefix": prefix},
        beat_enable_remote_control=False,
        timezone="UTC",
    )
    pool = ConnectionPool.from_url(
        REDIS_URL, connection_class=CountingConnection, socket_timeout=1.0
    )
    client = Redis(connection_pool=pool)
    declarations = [
        ScheduledJobDeclaration(
            f"bench.tick-{number}", "bench", parse_job_schedule({"every": "1s"}), Tick
        )
        for number in range(jobs)
    ]
    install_jobs(
        app,
        jobs=declarations,
        lock=RedisLock(client, prefix=prefix),
        checkpoints=RedisJobCheckpoints(client, prefix=f"{prefix}checkpoint:"),
        run_state=RedisJobRunState(client, prefix=f"{prefix}run:"),
        environ={},
        start=True,
        late_after_ms=LATE_AFTER_MS,
    )
    publish = app.send_task

    sent: list[tuple[str, str, float]] = []

    def send_task(name: str, *args: Any, **kwargs: Any) -> Any:
        result = publish(name, *args, **kwargs)
        sent.append((name, kwargs["kwargs"]["scheduled_at"], time.time()))
        return result

    app.send_task = send_task
    service = Service(app=app, scheduler_cls=JobBeatScheduler)
    time.sleep(max(0.0, start_at - time.time()))
    threading.Timer(count_from - time.time(), CountingConnection.sent.clear).start()
    threading.Timer(stop_at - time.time(), service.stop).start()
    service.start()
    out.put((sent, dict(CountingConnection.sent)))


@dataclass(frozen=True)
class Latency:
    jobs: int
    delays_ms: list[float]
    warm_up_ms: float
    """The longest delay up to the instant of the last beat's first publish."""
    occurrences: int
    duplicates: int
    missing: int
    counted: int
    """Occurrences due from the moment the Redis commands are counted."""
    commands: Counter[str]


def two_beats(jobs: int, seconds: float) -> Latency:
    prefix = f"bench:beat:{uuid.uuid4().hex}:"
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    start_at = float(int(time.time()) + 4)  # both processes imported and wired by then
    stop_at = start_at + seconds
    count_from = start_at + LATE_AFTER_MS / 1000 + 2.5  # half a second before an instant
    processes = [
        context.Process(
            target=beat_process,
            kwargs={
                "index": index,
                "prefix": prefix,
                "jobs": jobs,
                "start_at": start_at,
                "count_from": count_from,
                "stop_at": stop_at,
                "out": out,
            },
        )
        for index in range(2)
    ]
    for process in processes:
        process.start()
    worker = Redis.from_url(REDIS_URL)
    run_state = RedisJobRunState(worker, prefix=f"{prefix}run:")
    published: dict[tuple[str, float], list[float]] = {}
    commands: Counter[str] = Counter()
    first_sends: list[float] = []
    try:
        # The worker's part, half a second after each instant, away from the beats' work: each
        # run ends, so overlap never holds the next occurrence back.
        for second in range(int(start_at), int(stop_at) + 2):
            time.sleep(max(0.0, second + 0.5 - time.time()))
            for number in range(jobs):
                at = datetime.fromtimestamp(second, UTC)
                run_state.finish(f"bench.tick-{number}", at, ttl_ms=60_000)
            progress(f"two beats, {jobs} jobs: {stop_at - time.time():.0f} s left")
        for _ in processes:
            sent, counted = out.get(timeout=30)
            commands.update(counted)
            first_sends.append(datetime.fromisoformat(sent[0][1]).timestamp())
            for name, scheduled_at, at in sent:
                instant = datetime.fromisoformat(scheduled_at).timestamp()
                published.setdefault((name, instant), []).append(at)
    finally:
        for process in processes:
            process.join(timeout=10)
        for key in worker.scan_iter(match=f"{prefix}*"):
            worker.delete(key)
        worker.close()
    # A beat's first publish pays for connecting to the broker and for Celery's lazy set-up,
    # once per process: the instants up to the last beat's first publish are shown apart. The
    # last ones may be cut by the stop.
    warm_until, last = max(first_sends), stop_at - 2
    delays = {key: (min(times) - key[1]) * 1000 for key, times in published.items()}
    return Latency(
        jobs=jobs,
        delays_ms=[delay for key, delay in delays.items() if warm_until < key[1] <= last],
        warm_up_ms=max(delay for key, delay in delays.items() if key[1] <= warm_until),
        occurrences=len(published),
        duplicates=sum(len(times) - 1 for times in published.values()),
        missing=jobs * int(last - warm_until)
        - sum(1 for _, instant in published if warm_until < instant <= last),
        counted=sum(1 for _, instant in published if instant >= count_from),
        commands=commands,
    )


# --- the table -------------------------------------------------------------------------------


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def report(
    costs: dict[tuple[str, int], TickCost],
    sizes: list[int],
    latencies: list[Latency],
    args: Any,
) -> None:
    progress("")
    print("\r", end="", file=sys.stderr)
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"Beat schedulers side by side, Python {sys.version.split()[0]}, Redis {REDIS_URL}")
    print(f"{os.cpu_count()} CPUs, load average before the latency runs: {args.load}")
    print(f"load average at the end: {load}")
    print()
    print(f"1. Idle tick() with N crontab entries, none due ({args.cpu:g} s of CPU each)")
    print(f"{'scheduler':<30}{'N':>8}{'CPU µs/tick':>14}{'wall µs/tick':>15}{'ticks':>10}")
    for size in sizes:
        for name in SCHEDULERS:
            cost = costs[name, size]
            print(f"{name:<30}{size:>8,}{cost.cpu_us:>14.1f}{cost.wall_us:>15.1f}{cost.ticks:>10,}")
    print()
    for size in sizes:
        ours_cost = costs["ddd_celery JobBeatScheduler", size].cpu_us
        versus = ", ".join(
            f"{costs[name, size].cpu_us / ours_cost:,.0f}x cheaper than {name.split()[0]}"
            for name in list(SCHEDULERS)[1:]
        )
        print(f"N={size:,}: ddd_celery is {versus} (CPU per idle tick)")
    print()
    print(
        f"2. Instant to publish, two beats sharing RedisLock on the real clock, "
        f"{args.seconds:g} s per job set of every-1s jobs, all due at the same instant"
    )
    print(
        f"{'jobs':>5}{'occurrences':>13}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'mean ms':>9}"
        f"{'sent twice':>12}{'never sent':>12}{'warm-up max ms':>16}"
    )
    for run in latencies:
        delays = run.delays_ms
        print(
            f"{run.jobs:>5}{len(delays):>13,}{percentile(delays, 0.5):>9.2f}"
            f"{percentile(delays, 0.99):>9.2f}{max(delays):>9.2f}{statistics.fmean(delays):>9.2f}"
            f"{run.duplicates:>12}{run.missing:>12}{run.warm_up_ms:>16.2f}"
        )
    print()
    print("3. Redis round trips per occurrence made by the beats (the worker's not counted),")
    print(f"   counted once leases are released (late_after_ms={LATE_AFTER_MS})")
    print(f"{'jobs':>5}{'occurrences':>13}{'both beats':>12}{'per beat':>10}   by command")
    for run in latencies:
        per = sum(run.commands.values()) / run.counted
        kinds = ", ".join(
            f"{name} {count / run.counted:.2f}" for name, count in sorted(run.commands.items())
        )
        print(f"{run.jobs:>5}{run.counted:>13,}{per:>12.2f}{per / 2:>10.2f}   {kinds}")


def main() -> None:
    clean_up_on_stop()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--cpu", type=float, default=1.0, help="CPU seconds per idle measure")
    parser.add_argument("--jobs", default="1,5,20", help="sizes of the every-1s job sets")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the latency run")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    costs = idle_ticks(sizes, args.cpu)
    args.load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    latencies = [two_beats(int(jobs), args.seconds) for jobs in args.jobs.split(",")]
    report(costs, sizes, latencies, args)


if __name__ == "__main__":
    main()
