"""Each row of issue 13 side by side with its peer or floor, in one run, on the real Redis.

Every side of a row runs in the same run, one after the other and ``--repeats`` times
alternating; figures are medians of the repeats, and the ratios are what counts on a shared
machine. The app is wired as the README says (Redis broker, ``ddd_celery_key_prefix``: the lock,
run state, checkpoints and last runs on the broker's Redis), every key under a prefix of the
run, deleted at the end.

1. One occurrence published by beat (``tick()`` on a fixed clock, a job of every second, its
   previous run ended in between, leases released as in a steady state) against the same
   publish alone (``send_task``), and against the same message as beat builds it
   (``TaskMessage``) alone; Redis round trips of the stores counted on the connection.
2. What the lock adds: the store's ``begin`` of one occurrence (checkpoint and claim) with its
   lock against the same without a lock, alternating; one ``SET NX PX`` alone beside them, what
   the lock cost when it was a round trip of its own.
3. p99 from an instant to its publish, 100 jobs of every second due together, one beat on the
   real clock for ``--seconds``: a message counts as published when the producer's batch is
   flushed, not when kombu's ``Producer.publish`` returns.
4. ``celery jobs list`` at 10,000 jobs whose stores hold a record for each, beyond importing the
   app: the list command alone, timed in a process of its own that imported this file as the
   app (``BENCH_JOBS``) and did nothing else, then the same with ``--json``; against the floor
   of one read per job and store (what it did before).
5. Beat's set-up at 10,000 jobs with a checkpoint each, against Celery's ``PersistentScheduler``
   holding the same number of ``beat_schedule`` entries.
6. Worker: ``--tasks`` occurrence messages of a no-op job, published first, then a real
   ``celery worker`` (solo, prefork -c 2) runs them; the same with ``timeout_ms``; a plain
   Celery task doing the same work (one INCR). Time from the first task's INCR to the last's.
7. A burst: ``--burst`` jobs on ``* * * * *`` due at the same minute, real ``celery beat``
   processes (``python -m celery beat``) publishing to Redis: ours with one, two and three
   beats sharing the lock, Celery's stock beat and redbeat with the same entries. Instant to
   the last publish (the queue's length polled every 10 ms, for ``--window`` seconds, at most
   59: the next minute is due at 60; ``--peer-window`` for the peers), occurrences published,
   sent twice and missing, the beat's peak RSS (VmHWM), its set-up (the scheduler that ticks
   built, ``setup_schedule`` included) and the time from its process's start to that.

This file is also the app the beats and workers run (``celery -A bench_round_trips``),
configured by ``BENCH_PREFIX``, ``BENCH_JOBS``, ``BENCH_KIND`` and ``BENCH_BEAT``. Its Redis
keys are deleted on any exit, a SIGTERM or SIGHUP included.

    python bench/bench_round_trips.py [--repeats 3] [--tasks 2000] [--burst 10000] [--only 1,2]
    python bench/bench_round_trips.py --only 7 --burst 100000 --repeats 1 --beats ddd_celery
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

from celery import Celery
from celery.beat import PersistentScheduler
from celery.schedules import crontab
from kombu import Producer
from redis import ConnectionPool, Redis
from redis.connection import Connection
from stopping import clean_up_on_stop

import ddd_celery.celery.beat_publishing as publishing_module
from ddd_celery.celery import install_jobs
from ddd_celery.celery._task_messages import TaskMessage, new_task_id
from ddd_celery.celery.beat import JobBeatScheduler
from ddd_celery.celery.message import OccurrenceMessage
from ddd_celery.celery.registry import jobs_of
from ddd_celery.declarations import ScheduledJobDeclaration, parse_job_schedule
from ddd_celery.declarations.cron_evaluator import latest_occurrence
from ddd_celery.kernel.clock import Clock, FixedClock, SystemClock
from ddd_celery.scheduling.occurrence_store import Beginning
from ddd_celery.scheduling.outcomes import JobRun, Outcome

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
PREFIX = os.environ.get("BENCH_PREFIX") or f"bench:rt:{uuid.uuid4().hex[:8]}:"
JOBS = int(os.environ.get("BENCH_JOBS") or 0)
KIND = os.environ.get("BENCH_KIND") or "ours"
QUEUE = "benchrt"
HERE = Path(__file__).parent
LATE_AFTER_MS = 5_000
"""Short enough for leases to be released within a run, as in a steady state."""

redis = Redis.from_url(REDIS_URL, socket_timeout=5.0)


class CountingConnection(Connection):
    """Counts what it sends to Redis: one packed send is one round trip (a pipeline included)."""

    sent: ClassVar[int] = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        super().send_packed_command(command, check_health)


def count() -> None:
    """The work of every task of section 6: one INCR; the first and the last note when."""
    done = redis.incr(f"{PREFIX}done")
    if done == 1:
        redis.set(f"{PREFIX}first", time.time())
    redis.set(f"{PREFIX}last", time.time())


class NoopJob:
    def run(self, execution: object) -> None:
        count()


class IdleJob:
    """A job beat sends in sections 1 to 5 and 7; it never runs there."""

    def run(self, execution: object) -> None:
        return None


def declarations(count_: int, schedule: dict[str, Any]) -> list[Any]:
    """``count_`` jobs of the context ``benchrt``, so their tasks go to the queue ``benchrt``."""
    parsed = parse_job_schedule(schedule)
    return [
        ScheduledJobDeclaration(f"{QUEUE}.job-{number}", QUEUE, parsed, IdleJob)
        for number in range(count_)
    ]


def new_app(name: str, *, client: Redis | None = None, **conf: Any) -> Celery:
    app = Celery(name, broker=REDIS_URL, set_as_current=False)
    app.conf.update(
        broker_transport_options={"global_keyprefix": PREFIX},
        broker_connection_retry_on_startup=True,
        task_default_queue=QUEUE,
        worker_hijack_root_logger=False,
        beat_enable_remote_control=False,
        timezone="UTC",
        ddd_celery_key_prefix=f"{PREFIX}ddd:",
        ddd_celery_late_after_ms=LATE_AFTER_MS,
        **conf,
    )
    return app


def wired(
    app: Celery, jobs: list[Any], *, clock: Clock | None = None, client: Redis | None = None
) -> Any:
    """``install_jobs`` as the README wires it; with ``client``, the same stores on that client."""
    stores: dict[str, Any] = {}
    if client is not None:
        from ddd_celery.redis import (  # noqa: PLC0415
            RedisJobCheckpoints,
            RedisJobLastRuns,
            RedisJobRunState,
            RedisLock,
        )

        prefix = f"{PREFIX}ddd:"
        stores = {
            "lock": RedisLock(client, prefix=prefix, clock=clock or SystemClock()),
            "run_state": RedisJobRunState(client, prefix=f"{prefix}run:"),
            "checkpoints": RedisJobCheckpoints(client, prefix=f"{prefix}checkpoint:"),
            "last_runs": RedisJobLastRuns(client, prefix=f"{prefix}last-run:"),
        }
    return install_jobs(app, jobs=jobs, environ={}, start=True, clock=clock, **stores)


# --- the app the subprocesses run ------------------------------------------------------------

app = new_app("bench_round_trips")
if KIND == "ours":
    if JOBS:
        wired(app, declarations(JOBS, {"cron": "* * * * *"}))
    else:
        wired(
            app,
            [
                ScheduledJobDeclaration(
                    f"{QUEUE}.noop", QUEUE, parse_job_schedule({"every": "1s"}), NoopJob
                ),
                ScheduledJobDeclaration(
                    f"{QUEUE}.noop-timeout",
                    QUEUE,
                    parse_job_schedule({"every": "1s", "timeout_ms": 60_000}),
                    NoopJob,
                ),
            ],
        )
else:
    app.conf.beat_schedule = {
        f"bench.entry-{number}": {
            "task": "benchrt.plain",
            "schedule": crontab(),
            "options": {"queue": QUEUE},
        }
        for number in range(JOBS)
    }
    app.conf.update(redbeat_redis_url=REDIS_URL, redbeat_key_prefix=f"{PREFIX}redbeat:")


if os.environ.get("BENCH_BEAT"):
    from celery.beat import Service

    _get_scheduler = Service.get_scheduler

    def _timed_get_scheduler(service: Any, lazy: bool = False, **kwargs: Any) -> Any:
        """The scheduler that ticks, built (its ``setup_schedule`` included) and timed: the
        instant its heap is ready and what building it took, written for section 7."""
        start, started_at = time.perf_counter(), time.time()
        scheduler = _get_scheduler(service, lazy=lazy, **kwargs)
        if not lazy:
            ready = {
                "setup_s": time.perf_counter() - start,
                "started_at": started_at,
                "ready_at": time.time(),
            }
            redis.set(f"{PREFIX}ready:{os.getpid()}", json.dumps(ready))
        return scheduler

    Service.get_scheduler = _timed_get_scheduler  # type: ignore[method-assign]


@app.task(name="benchrt.plain", ignore_result=True, serializer="json")
def plain_task() -> None:
    count()


# --- helpers ---------------------------------------------------------------------------------


def progress(text: str) -> None:
    print(f"\r{text:<78}", end="", file=sys.stderr, flush=True)


def reset() -> None:
    """Delete every key of the run, a thousand per round trip (a burst leaves 300,000)."""
    keys: list[bytes] = []
    for key in redis.scan_iter(match=f"{PREFIX}*", count=1000):
        keys.append(key)
        if len(keys) == 1000:
            redis.unlink(*keys)
            keys.clear()
    if keys:
        redis.unlink(*keys)


def median(values: list[float]) -> float:
    return statistics.median(values)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def once_us(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1e6


def timed_us(call: Callable[[], object], calls: int) -> list[float]:
    call()
    spent = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        spent.append((time.perf_counter() - start) * 1e6)
    return spent


# --- 1 and 2. one occurrence ----------------------------------------------------------------


def one_occurrence(calls: int) -> dict[str, float]:
    """p50 µs of one occurrence through beat and of its publish alone; store round trips."""
    reset()
    pool = ConnectionPool.from_url(REDIS_URL, connection_class=CountingConnection)
    client = Redis(connection_pool=pool)
    # Now, to the second: the messages' expiry stays ahead of the real clock, as in a beat.
    clock = FixedClock(datetime.fromtimestamp(int(time.time()), UTC))
    beat_app = new_app(f"bench-one-{uuid.uuid4().hex[:6]}")
    registry = wired(beat_app, declarations(1, {"every": "1s"}), clock=clock, client=client)
    scheduler = JobBeatScheduler(app=beat_app)
    name = f"{QUEUE}.job-0"
    task = registry.job(name).task_name

    def one_tick() -> None:
        clock.advance(1000)
        scheduler.tick()

    def finish() -> None:
        registry.run_state.finish(name, clock.now(), ttl_ms=60_000)

    for _ in range(LATE_AFTER_MS // 1000 + 2):  # leases are released from now on
        one_tick()
        finish()

    def publish_alone() -> None:
        at = clock.now()
        beat_app.send_task(
            task,
            kwargs=OccurrenceMessage(at, "c0ffee").to_kwargs(),
            queue=QUEUE,
            expires=at + timedelta(minutes=15),
            serializer="json",
            headers={},
        )

    message = TaskMessage.of(beat_app, task, queue=QUEUE)
    assert message is not None

    def publish_built_once() -> None:
        """The same message as beat builds it (``TaskMessage``), alone: beat's own floor."""
        at = clock.now()
        with beat_app.producer_or_acquire() as producer:
            message.send(
                producer,
                new_task_id(),
                OccurrenceMessage(at, "c0ffee").to_kwargs(),
                headers={},
                expires=at + timedelta(minutes=15),
            )

    publish_alone()
    publish_built_once()
    # Alternating, so that load from elsewhere falls on every side alike.
    beat_us, publish_us, built_us, round_trips = [], [], [], []
    for _ in range(calls):
        before = CountingConnection.sent
        beat_us.append(once_us(one_tick))
        round_trips.append(CountingConnection.sent - before)
        finish()
        publish_us.append(once_us(publish_alone))
        built_us.append(once_us(publish_built_once))
    lock = lock_cost(registry.occurrences(), clock.now(), client, calls)
    scheduler.close()
    reset()
    return {
        "beat_us": median(beat_us),
        "publish_us": median(publish_us),
        "built_us": median(built_us),
        "round_trips": statistics.fmean(round_trips),
        **lock,
    }


def lock_cost(store: Any, at: datetime, client: Redis, calls: int) -> dict[str, float]:
    """p50 µs of beat's begin of one occurrence with and without its lock, and of a SET NX PX."""
    key = f"{PREFIX}lock-alone"

    def begin(lock: bool) -> Callable[[], object]:
        """Beat's begin of one occurrence (a job of its own each call, so each claim starts)."""

        def call() -> None:
            job = f"{QUEUE}.lock-{uuid.uuid4().hex}"
            lock_key = f"job:{job}:{at.isoformat()}" if lock else None
            store.begin([Beginning(job, at, lock_key, 60_000, True, False, 60_000)])

        return call

    with_lock, without_lock, set_us = [], [], []
    for _ in range(calls):  # alternating, as above
        with_lock.append(once_us(begin(lock=True)))
        without_lock.append(once_us(begin(lock=False)))
        set_us.append(
            once_us(lambda: client.set(f"{key}:{uuid.uuid4().hex}", "t", nx=True, px=60_000))
        )
    return {
        "with_lock_us": median(with_lock),
        "without_lock_us": median(without_lock),
        "set_us": median(set_us),
    }


# --- 3. 100 jobs due together on the real clock --------------------------------------------


def due_together(jobs: int, seconds: float) -> list[float]:
    """Delays in ms from each instant to the flush of the batch that published it."""
    reset()
    beat_app = new_app(f"bench-together-{uuid.uuid4().hex[:6]}")
    registry = wired(beat_app, declarations(jobs, {"every": "1s"}))
    scheduler = JobBeatScheduler(app=beat_app)
    sent: list[str] = []
    delays: list[float] = []
    publish = Producer.publish

    def recording_publish(producer: Any, body: Any, *args: Any, **kwargs: Any) -> Any:
        """Beat's publishes, whichever way beat builds its messages: the instant they carry."""
        sent.append(body[1]["scheduled_at"])
        return publish(producer, body, *args, **kwargs)

    Producer.publish = recording_publish  # type: ignore[method-assign]
    batch = publishing_module.publish_batch

    @contextlib.contextmanager
    def timed_batch(producer: Any, size: int) -> Iterator[object]:
        with batch(producer, size) as opened:
            yield opened
        flushed = time.time()
        delays.extend((flushed - datetime.fromisoformat(at).timestamp()) * 1000 for at in sent)
        sent.clear()

    publishing_module.publish_batch = timed_batch  # type: ignore[assignment]
    stop_at = time.time() + seconds
    try:
        while time.time() < stop_at:
            time.sleep(scheduler.tick())
            if sent:  # one publish alone: no batch
                now = time.time()
                delays.extend((now - datetime.fromisoformat(at).timestamp()) * 1000 for at in sent)
                sent.clear()
            with redis.pipeline(transaction=False) as pipe:
                for job in registry.jobs:
                    pipe.delete(f"{PREFIX}ddd:run:{job}")  # the runs end at once
                pipe.execute()
    finally:
        publishing_module.publish_batch = batch  # type: ignore[assignment]
        Producer.publish = publish  # type: ignore[method-assign]
        scheduler.close()
        reset()
    return delays[jobs:]  # the first instant pays for connecting to the broker


# --- 4 and 5. reads at 10,000 jobs ----------------------------------------------------------


def reads(jobs: int) -> dict[str, float]:
    reset()
    list_app = new_app(f"bench-list-{uuid.uuid4().hex[:6]}")
    registry = wired(list_app, declarations(jobs, {"cron": "0 7 * * 1-5"}))
    registry = jobs_of(list_app)
    # Each job's checkpoint is its latest instant: a beat restarted after a short stop.
    now = datetime.now(UTC)
    schedule = next(iter(registry.jobs.values())).schedule
    at = latest_occurrence(schedule, after=now - timedelta(days=8), not_after=now)
    assert at is not None
    for name in registry.jobs:
        registry.checkpoints.write(name, at)
        registry.last_runs.write(
            JobRun(
                job=name,
                scheduled_at=at,
                outcome=Outcome.SUCCEEDED,
                context=QUEUE,
                started_at=at,
                duration_ms=1.0,
            )
        )

    def one_read_each() -> None:
        for name in registry.jobs:
            registry.run_state.running(name)
            registry.checkpoints.read(name)
            registry.last_runs.read(name)

    def ours_setup() -> None:
        JobBeatScheduler(app=list_app).close()

    with tempfile.TemporaryDirectory() as directory:
        stock_app = Celery(f"bench-stock-{uuid.uuid4().hex[:6]}", broker="memory://")
        stock_app.conf.update(
            timezone="UTC",
            beat_schedule={
                f"bench.entry-{number}": {"task": "benchrt.plain", "schedule": crontab()}
                for number in range(jobs)
            },
        )

        def stock_setup() -> None:
            path = Path(directory) / f"schedule-{uuid.uuid4().hex}"
            PersistentScheduler(app=stock_app, schedule_filename=str(path)).close()

        figures = {
            "list_s": list_alone(jobs),
            "list_json_s": list_alone(jobs, "--json"),
            "one_read_each_s": _seconds(one_read_each),
            "setup_s": _seconds(ours_setup),
            "stock_setup_s": _seconds(stock_setup),
        }
    reset()
    return figures


LIST_ALONE = """
import contextlib, io, sys, time
from types import SimpleNamespace

import bench_round_trips  # importing the app builds its BENCH_JOBS jobs, as celery -A does
from ddd_celery.celery.cli import list_jobs

start = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    app = SimpleNamespace(app=bench_round_trips.app)
    list_jobs.main(sys.argv[1:], obj=app, standalone_mode=False)
print(time.perf_counter() - start)
"""


def list_alone(jobs: int, *args: str) -> float:
    """``jobs list`` timed in a process of its own that imported the app and did nothing else,
    as ``celery -A bench_round_trips jobs list`` runs it, on the records ``reads`` wrote.

    Not in this process, whose heap (a second app, what the writes left) is not a command's:
    the cyclic collector's passes grow with the heap, and a fresh process pays its own
    connection to Redis as the command does.
    """
    done = subprocess.run(
        [sys.executable, "-c", LIST_ALONE, *args],
        env=_env(BENCH_JOBS=str(jobs)),
        cwd=HERE,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return float(done.stdout.split()[-1])


def _seconds(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


# --- 6. worker ------------------------------------------------------------------------------


def worker_cost(pool: str, concurrency: int, tasks: int, publish: Callable[[], object]) -> float:
    """µs per task of a real worker process on ``tasks`` messages published beforehand."""
    reset()
    for _ in range(tasks):
        publish()
    worker = subprocess.Popen(
        [
            sys.executable, "-m", "celery", "-A", "bench_round_trips", "worker",
            "-P", pool, "-c", str(concurrency), "-Q", QUEUE, "-l", "WARNING",
            "--without-mingle", "--without-gossip", "--without-heartbeat",
        ],
        cwd=HERE, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
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


def _env(**extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "BENCH_PREFIX": PREFIX,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        **extra,
    }


def worker_costs(tasks: int, repeats: int) -> list[tuple[str, float, float, float]]:
    registry = jobs_of(app)
    at = datetime.fromtimestamp(int(time.time()) - 1, UTC)

    def occurrence(name: str) -> Callable[[], object]:
        task = registry.job(name).task_name
        kwargs = OccurrenceMessage(at, "c0ffee").to_kwargs()
        return lambda: app.send_task(task, kwargs=kwargs, queue=QUEUE, serializer="json")

    rows = []
    for pool, concurrency in (("solo", 1), ("prefork", 2)):
        ours, timed, plain = [], [], []
        for repeat in range(repeats):
            progress(f"6. {pool}, repeat {repeat + 1}/{repeats}")
            ours.append(worker_cost(pool, concurrency, tasks, occurrence(f"{QUEUE}.noop")))
            timed.append(worker_cost(pool, concurrency, tasks, occurrence(f"{QUEUE}.noop-timeout")))
            plain.append(worker_cost(pool, concurrency, tasks, plain_task.apply_async))
        rows.append((f"{pool} -c {concurrency}", median(ours), median(timed), median(plain)))
    return rows


# --- 7. the burst ---------------------------------------------------------------------------


NEXT_MINUTE_S = 59.0
"""The longest window of a burst: at 60 s the next minute's occurrences are due."""


def burst(kind: str, beats: int, jobs: int, window: float) -> dict[str, float]:
    """Real beats on ``jobs`` every-minute entries; instant to last publish at one minute.

    The beats start first; the minute observed is the first one after every beat's scheduler
    is built (its ``setup_schedule`` included, timed in the beat: ``BENCH_BEAT``), with 3 s to
    spare, so that it is every beat's first instant or a later one. A beat that was ready a
    minute earlier (three beats of 100,000 jobs take most of a minute to start on two cores)
    sends the minutes before alone, and its claims (no worker ends them: a run stays in
    progress 15 minutes) would make every occurrence of the minute observed ``skipped-overlap``:
    0 published, what the two beats' row once showed. So the run states are deleted a few
    seconds before the minute observed (``_free_the_runs``), as workers that ran those
    occurrences would have ended them. The queue is emptied a second before it. ``window``:
    how long after the instant the queue is watched.
    """
    reset()
    scheduler = {
        "ours": "ddd_celery.celery.beat:JobBeatScheduler",
        "stock": "celery.beat:PersistentScheduler",
        "redbeat": "redbeat.RedBeatScheduler",
    }[kind]
    directory = tempfile.mkdtemp()
    started = time.time()
    command = [sys.executable, "-m", "celery", "-A", "bench_round_trips", "beat"]
    processes = [
        subprocess.Popen(
            [*command, "-S", scheduler, "-l", "WARNING", "-s", str(Path(directory) / f"s{index}")],
            cwd=HERE,
            env=_env(BENCH_JOBS=str(jobs), BENCH_KIND=kind, BENCH_BEAT="1"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for index in range(beats)
    ]
    queue = f"{PREFIX}{QUEUE}"
    try:
        readies = _wait_ready(processes, timeout=600)
        boundary = (int(max(ready["ready_at"] for ready in readies)) // 60 + 1) * 60
        if boundary - time.time() < 3:
            boundary += 60
        earliest_first = (int(min(ready["started_at"] for ready in readies)) // 60 + 1) * 60
        if kind == "ours" and earliest_first < boundary:
            time.sleep(max(0.0, boundary - 6 - time.time()))
            _free_the_runs(jobs)
        time.sleep(max(0.0, boundary - 1 - time.time()))
        redis.delete(queue)
        last_count, last_at = 0, float(boundary)
        cpu_before = _cpu_s(processes)
        time.sleep(max(0.0, boundary - time.time()))
        while time.time() < boundary + window:
            length = int(redis.llen(queue))
            if length != last_count:
                last_count, last_at = length, time.time()
            if length >= jobs and time.time() - last_at > 2:
                break
            time.sleep(0.01)
        cpu = [after - before for after, before in zip(_cpu_s(processes), cpu_before, strict=True)]
        peak_rss = max(_peak_rss_mib(process.pid) for process in processes)
        sent = Counter(
            _occurrence_of(raw)
            for start in range(0, last_count, 10_000)
            for raw in redis.lrange(queue, start, start + 9_999)
        )
    finally:
        _stop(processes)
        reset()
    elapsed = max(last_at - boundary, 1e-6)
    return {
        "published": float(len(sent)),
        "twice": float(sum(times - 1 for times in sent.values())),
        "missing": float(max(0, jobs - len(sent))),
        "seconds": elapsed,
        "rate": len(sent) / elapsed,
        "rss_mib": peak_rss,
        "setup_s": max(ready["setup_s"] for ready in readies),
        "ready_s": max(ready["ready_at"] for ready in readies) - started,
        "beats_cpu_s": sum(cpu[:-1]),
        "redis_cpu_s": cpu[-1],
    }


def _free_the_runs(jobs: int) -> None:
    """Delete the run state of every job, a thousand per round trip: the runs an earlier
    minute claimed end, as the worker that ran them would have ended them."""
    names = [f"{PREFIX}ddd:run:{QUEUE}.job-{number}" for number in range(jobs)]
    for start in range(0, len(names), 1000):
        redis.unlink(*names[start : start + 1000])


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_ready(processes: list[subprocess.Popen[bytes]], timeout: float) -> list[Any]:
    """What each beat wrote once its scheduler was built (``BENCH_BEAT``)."""
    deadline = time.monotonic() + timeout
    readies: dict[int, Any] = {}
    while len(readies) < len(processes):
        for process in processes:
            if process.poll() is not None:
                raise RuntimeError(f"a beat stopped before it was ready: {process.returncode}")
            raw = redis.get(f"{PREFIX}ready:{process.pid}")
            if raw is not None:
                readies[process.pid] = json.loads(raw)
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(processes) - len(readies)} beats not ready in {timeout} s")
        time.sleep(0.1)
    return list(readies.values())


def _occurrence_of(raw: bytes) -> tuple[str, str, str]:
    """What one publish stands for: the task, the beat entry, the occurrence it carries.

    Ours carry their instant (``scheduled_at``), so two sends of one occurrence are seen
    (not their correlation id: each send has its own); a stock or redbeat entry carries nothing
    of its occurrence, so each of its messages counts once (their single beat sends each entry
    once a minute).
    """
    message = json.loads(raw)
    headers = message["headers"]
    _, kwargs, _ = json.loads(base64.b64decode(message["body"]))
    if not kwargs:
        return str(headers.get("task")), str(headers.get("id")), ""
    return str(headers.get("task")), "", f"{kwargs['scheduled_at']} {kwargs.get('tenant_id')}"


def _cpu_s(processes: list[subprocess.Popen[bytes]]) -> list[float]:
    """The CPU seconds (user and system) each beat and the Redis server have used so far: on
    two cores, three beats and Redis share what the burst can take."""
    tick = os.sysconf("SC_CLK_TCK")
    seconds = []
    for process in processes:
        try:
            fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            seconds.append(0.0)
            continue
        seconds.append((int(fields[11]) + int(fields[12])) / tick)
    used = redis.info("cpu")
    return [*seconds, float(used["used_cpu_user"]) + float(used["used_cpu_sys"])]


def _peak_rss_mib(pid: int) -> float:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


# --- the report -----------------------------------------------------------------------------


def burst_lines(args: argparse.Namespace) -> list[str]:
    """Section 7: each beat's burst, ours repeated, the peers once (they are far behind)."""
    window = min(args.window, NEXT_MINUTE_S)
    peer_window = min(args.peer_window, NEXT_MINUTE_S)
    lines: list[str] = []
    lines += [
        "",
        f"7. {args.burst:,} jobs on * * * * * due at one minute, real celery beat "
        f"processes, instant to last publish (watched {window:g} s, peers {peer_window:g} s)",
        f"{'beat':<24}{'published':>10}{'twice':>7}{'missing':>9}{'seconds':>9}{'per s':>8}"
        f"{'RSS MiB':>9}{'set-up s':>10}{'start s':>9}{'CPU s':>7}{'Redis s':>8}",
    ]
    for kind, beats, label in (
        ("ours", 1, "ddd_celery, one beat"),
        ("ours", 2, "ddd_celery, two beats"),
        ("ours", 3, "ddd_celery, three beats"),
        ("redbeat", 1, "redbeat"),
        ("stock", 1, "celery stock beat"),
    ):
        if label.split(",")[0].split()[-1] not in args.beats:
            continue
        runs = []
        for repeat in range(args.repeats if kind == "ours" else 1):
            progress(f"7. burst: {label}, repeat {repeat + 1}")
            watched = window if kind == "ours" else peer_window
            runs.append(burst(kind, beats, args.burst, watched))
        got = {key: median([run[key] for run in runs]) for key in runs[0]}
        lines.append(
            f"{label:<24}{got['published']:>10,.0f}{got['twice']:>7,.0f}{got['missing']:>9,.0f}"
            f"{got['seconds']:>9.2f}{got['rate']:>8,.0f}{got['rss_mib']:>9.0f}"
            f"{got['setup_s']:>10.2f}{got['ready_s']:>9.1f}{got['beats_cpu_s']:>7.2f}"
            f"{got['redis_cpu_s']:>8.2f}"
        )
    lines.append(
        "   set-up s: building the scheduler that ticks (setup_schedule: the heap ready), in "
        "the beat; start s: from the process's start to that, importing the app included; "
        "CPU s: the beats' CPU from a second before the instant to the end, Redis s: the "
        "Redis server's"
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calls", type=int, default=2_000)
    parser.add_argument("--tasks", type=int, default=2_000)
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs of sections 4 and 5")
    parser.add_argument("--burst", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument(
        "--window", type=float, default=NEXT_MINUTE_S, help="section 7: seconds ours are watched"
    )
    parser.add_argument(
        "--peer-window", type=float, default=NEXT_MINUTE_S, help="section 7: redbeat, stock"
    )
    parser.add_argument("--only", default="1,3,4,6,7", help="sections to run (2 runs with 1)")
    parser.add_argument(
        "--beats", default="ddd_celery,redbeat,beat", help="the beats of section 7 to run"
    )
    args = parser.parse_args()
    clean_up_on_stop()  # beats stopped, keys deleted on any exit
    only = set(args.only.split(","))
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    lines = [
        f"Issue 13, side by side, Python {sys.version.split()[0]}, Redis {REDIS_URL}",
        f"{os.cpu_count()} CPUs, load average at the start: {load}; "
        f"medians of {args.repeats} repeats",
    ]
    try:
        if "1" in only:
            runs = []
            for repeat in range(args.repeats):
                progress(f"1. one occurrence, repeat {repeat + 1}")
                runs.append(one_occurrence(args.calls))
            one = {key: median([run[key] for run in runs]) for key in runs[0]}
            lines += [
                "",
                f"1. One occurrence published by beat ({args.calls:,} ticks), p50 µs",
                "   beat tick, lock + claim + checkpoint + release + publish: "
                f"{one['beat_us']:.0f} µs, {one['round_trips']:.2f} store round trips "
                "+ the publish",
                f"   the publish alone (send_task): {one['publish_us']:.0f} µs",
                f"   ratio {one['beat_us'] / one['publish_us']:.2f}x (goal <= 1.5x)",
                f"   the same message built once per job, as beat now publishes it, alone: "
                f"{one['built_us']:.0f} µs (beat's tick {one['beat_us'] / one['built_us']:.2f}x)",
                "2. What the lock adds, p50 µs: beat's begin() of one occurrence with its lock "
                f"{one['with_lock_us']:.0f}, without {one['without_lock_us']:.0f}: "
                f"{one['with_lock_us'] - one['without_lock_us']:.0f} µs (goal <= 100 µs); "
                f"one SET NX PX alone {one['set_us']:.0f} µs",
            ]
        if "3" in only:
            p99s, p50s, counts = [], [], []
            for repeat in range(args.repeats):
                progress(f"3. 100 jobs due together, repeat {repeat + 1}")
                delays = due_together(100, args.seconds)
                p99s.append(percentile(delays, 0.99))
                p50s.append(percentile(delays, 0.5))
                counts.append(len(delays))
            lines += [
                "",
                f"3. 100 every-1s jobs due together, one beat, real clock, {args.seconds:g} s: "
                f"instant to publish p50 {median(p50s):.1f} ms, p99 {median(p99s):.1f} ms "
                f"({median(counts):,.0f} occurrences; goal p99 <= 20 ms)",
            ]
        if "4" in only:
            runs = []
            for repeat in range(args.repeats):
                progress(f"4-5. reads at {args.jobs:,} jobs, repeat {repeat + 1}")
                runs.append(reads(args.jobs))
            got = {key: median([run[key] for run in runs]) for key in runs[0]}
            lines += [
                "",
                f"4. celery jobs list at {args.jobs:,} jobs, beyond importing the app: "
                f"{got['list_s']:.2f} s, --json {got['list_json_s']:.2f} s (goal <= 0.3 s); "
                f"one read per job and store: {got['one_read_each_s']:.2f} s",
                f"5. beat's set-up at {args.jobs:,} jobs: {got['setup_s']:.2f} s (goal <= 0.3 s); "
                f"stock PersistentScheduler: {got['stock_setup_s']:.2f} s",
            ]
        if "6" in only:
            rows = worker_costs(args.tasks, args.repeats)
            lines += [
                "",
                f"6. Worker, µs per no-op task ({args.tasks:,} tasks, real worker processes)",
                f"{'pool':<16}{'job':>8}{'timeout_ms':>12}{'plain':>8}{'ratio':>8}"
                f"{'with timeout':>14}   goal <= 1.2x",
            ]
            for pool, ours, timed, plain in rows:
                lines.append(
                    f"{pool:<16}{ours:>8.0f}{timed:>12.0f}{plain:>8.0f}{ours / plain:>7.2f}x"
                    f"{timed / plain:>13.2f}x"
                )
        if "7" in only:
            lines += burst_lines(args)
    finally:
        reset()
    print("\r", end="", file=sys.stderr)
    end_load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    lines.append(f"\nload average at the end: {end_load}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
