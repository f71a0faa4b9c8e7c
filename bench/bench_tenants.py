"""A per-tenant job over many tenants: its tenant runs in turn in one task, or spread.

One real ``celery worker`` (prefork, ``--concurrency`` processes, 4 by default) runs two
per-tenant jobs that do the same work: ``--tenants`` tenants (1,000), each run sleeping
``--run-ms`` (100 ms, a use case waiting on its database). ``benchtenants.in-turn`` runs them
one after the other in the occurrence's task (the seeds' way, the default);
``benchtenants.spread`` (``tenant_runs='spread'``) sends one task per tenant and the last one
records the occurrence. For each, the script publishes one occurrence, as beat does, and waits
for its one outcome (``on_run``, in whichever process recorded it); it prints the occurrence's
duration (from its start to its last tenant run's end, as recorded) and the time from the
publish to the outcome. The worker is started, and waited for, before the clock starts.

Every number depends on the machine and what else runs on it: the header says how many cores
and how loaded they were. This file is also the app the worker runs (``celery -A
bench_tenants``), configured by ``BENCH_PREFIX``, ``BENCH_TENANTS`` and ``BENCH_RUN_MS``; every
key is under a prefix of the run and deleted at the end.

    python bench/bench_tenants.py [--tenants 1000] [--run-ms 100] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from celery import Celery
from stopping import clean_up_on_stop

from ddd_celery.celery import OccurrenceMessage, install_jobs
from ddd_celery.declarations import JobExecution, scheduled
from ddd_celery.kernel import iso_ms
from ddd_celery.kernel.tenants import InMemoryTenantDirectory
from ddd_celery.redis import connect
from ddd_celery.scheduling.observability import RunDetail
from ddd_celery.scheduling.outcomes import JobRun

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
PREFIX = os.environ.get("BENCH_PREFIX") or f"bench:tenants:{uuid.uuid4().hex[:8]}:"
"""The run's prefix: the script makes one, the worker it starts is given it."""
TENANTS = int(os.environ.get("BENCH_TENANTS", "1000"))
RUN_S = int(os.environ.get("BENCH_RUN_MS", "100")) / 1000
QUEUE = "benchtenants"
HERE = Path(__file__).parent
IN_TURN, SPREAD = "benchtenants.in-turn", "benchtenants.spread"

redis = connect(REDIS_URL, timeout=5.0)


def close_month(execution: JobExecution) -> None:
    """The work of one tenant: a use case that waits ``BENCH_RUN_MS`` on its database."""
    time.sleep(RUN_S)
    redis.incr(f"{PREFIX}ran")


@scheduled(IN_TURN, every="1d", tenancy="per-tenant")
class InTurnJob:
    def run(self, execution: JobExecution) -> None:
        close_month(execution)


@scheduled(SPREAD, every="1d", tenancy="per-tenant", tenant_runs="spread")
class SpreadJob:
    def run(self, execution: JobExecution) -> None:
        close_month(execution)


def keep_outcome(run: JobRun, error: BaseException | None, detail: RunDetail) -> None:
    line = {"job": run.job, "outcome": run.outcome.value, "duration_ms": run.duration_ms}
    redis.rpush(f"{PREFIX}outcomes", json.dumps({**line, "at": time.time()}))


app = Celery("bench_tenants", broker=REDIS_URL, set_as_current=False)
app.conf.update(
    broker_transport_options={"global_keyprefix": PREFIX},
    broker_connection_retry_on_startup=True,
    task_default_queue=QUEUE,
    worker_hijack_root_logger=False,
    ddd_celery_key_prefix=PREFIX,
)
install_jobs(
    app,
    jobs=[InTurnJob, SpreadJob],
    tenants=InMemoryTenantDirectory(f"tenant-{number:04d}" for number in range(TENANTS)),
    on_run=keep_outcome,
    routes={IN_TURN: QUEUE, SPREAD: QUEUE},
    environ={},
)


def progress(text: str) -> None:
    print(f"\r{text:<78}", end="", file=sys.stderr, flush=True)


def start_worker(concurrency: int, tenants: int, run_ms: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "BENCH_PREFIX": PREFIX,
        "BENCH_TENANTS": str(tenants),
        "BENCH_RUN_MS": str(run_ms),
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    command = [sys.executable, "-m", "celery", "-A", "bench_tenants", "worker", "-l", "WARNING"]
    options = ["-P", "prefork", "-c", str(concurrency), "-Q", QUEUE, "-n", f"{PREFIX}@%h"]
    quiet = ["--without-mingle", "--without-gossip", "--without-heartbeat"]
    return subprocess.Popen(
        [*command, *options, *quiet], env=env, cwd=HERE, stdout=subprocess.DEVNULL
    )


def wait_ready(seconds: float) -> None:
    """Until the worker answers a ping: its pool is up."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if app.control.ping(timeout=0.5):
            return
    raise SystemExit("the worker did not start")


def occurrence(job: str, tenants: int, timeout_s: float) -> tuple[float, float]:
    """Publish one occurrence of ``job``; its recorded duration and the publish-to-outcome time."""
    redis.delete(f"{PREFIX}outcomes", f"{PREFIX}ran")
    at = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    message = OccurrenceMessage(at, uuid.uuid4().hex).to_kwargs()
    sent = time.time()
    app.send_task(job, kwargs=message, queue=QUEUE, serializer="json")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        progress(f"{job}: {int(redis.get(f'{PREFIX}ran') or 0)}/{tenants} tenants ran")
        line = redis.lindex(f"{PREFIX}outcomes", 0)
        if line is not None:
            outcome = json.loads(line)
            assert outcome["outcome"] == "succeeded", outcome
            assert int(redis.get(f"{PREFIX}ran") or 0) == tenants
            return outcome["duration_ms"] / 1000, outcome["at"] - sent
        time.sleep(0.2)
    raise SystemExit(f"{job}: no outcome in {timeout_s} s")


def main() -> None:
    clean_up_on_stop()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=TENANTS)
    parser.add_argument("--run-ms", type=int, default=int(RUN_S * 1000))
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    load = os.getloadavg()
    print(
        f"{os.cpu_count()} cores, load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
        f"{args.tenants} tenants x {args.run_ms} ms, prefork -c {args.concurrency}, "
        f"{iso_ms(datetime.now(UTC))}"
    )
    worker = start_worker(args.concurrency, args.tenants, args.run_ms)
    try:
        wait_ready(60)
        bound = args.tenants * args.run_ms / 1000
        spread = occurrence(SPREAD, args.tenants, 4 * bound + 60)
        in_turn = occurrence(IN_TURN, args.tenants, 4 * bound + 60)
    finally:
        worker.terminate()
        worker.wait(60)
        for key in redis.scan_iter(match=f"{PREFIX}*"):
            redis.delete(key)
    progress("")
    print("\r", end="", file=sys.stderr)
    ideal = bound / args.concurrency
    print(f"{'tenant runs':<12} {'occurrence s':>13} {'publish->outcome s':>19} {'vs in turn':>11}")
    for name, (duration, wall) in (("in turn", in_turn), ("spread", spread)):
        print(f"{name:<12} {duration:>13.1f} {wall:>19.1f} {in_turn[1] / wall:>10.1f}x")
    print(f"(the work alone: {bound:.0f} s in one process, {ideal:.0f} s over {args.concurrency})")


if __name__ == "__main__":
    main()
