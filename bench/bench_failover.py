"""What the lock's "best effort" costs when a Redis Cluster master fails over.

Starts a cluster of its own (three masters, a replica each, on free local ports; see
tests/redis_servers.py), then two "beats" (threads, each with its own client, as two processes
hold theirs) take the lock of every occurrence of ``--jobs`` jobs every ``--tick-ms``, the keys
``{ddd_celery}:job:<name>:<instant>`` as the Celery settings lay them out on a cluster. Midway
the master of that slot fails: killed (``--mode kill``, a crash: the replica takes over after
the node timeout, and a lock written but not yet replicated is lost) or handed over
(``--mode failover``, ``CLUSTER FAILOVER`` on the replica: no write lost). Each occurrence is
counted as run once, twice (both beats took its lock: the failover lost the first) or not at
all (neither could reach Redis: recorded ``failed``, ``JOB_LOCK_UNAVAILABLE``).

    python bench/bench_failover.py --mode kill
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from redis_servers import NODE_TIMEOUT_MS, redis_cluster, wait_for
from stopping import clean_up_on_stop

from ddd_celery.kernel.lock import LockUnavailableError
from ddd_celery.redis import RedisLock, connect

PREFIX = "{ddd_celery}:"


def beat(
    url: str, runs: Counter[str], *, ticks: int, jobs: int, tick_ms: int, start: float
) -> None:
    """One beat: every tick, the lock of each job's occurrence; ``runs`` counts those taken."""
    lock = RedisLock(connect(url), prefix=PREFIX)
    for tick in range(ticks):
        time.sleep(max(0.0, start + tick * tick_ms / 1000 - time.monotonic()))
        for job in range(jobs):
            key = f"job:j{job}:{tick}"
            try:
                taken = lock.acquire(key, 60_000) is not None
            except LockUnavailableError:
                taken = False
            if taken:
                runs[key] += 1


def main() -> None:
    clean_up_on_stop()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["kill", "failover"], default="kill")
    parser.add_argument("--jobs", type=int, default=10)
    parser.add_argument("--tick-ms", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=8.0)
    options = parser.parse_args()
    ticks = int(options.seconds * 1000 / options.tick_ms)
    with redis_cluster(masters=3, replicas=1) as cluster:
        master = cluster.master_of(PREFIX)
        replica = cluster.replicas[master.port][0]
        runs: list[Counter[str]] = [Counter(), Counter()]
        start = time.monotonic() + 0.5
        beats = [
            threading.Thread(
                target=beat,
                args=(cluster.url, counted),
                kwargs={
                    "ticks": ticks,
                    "jobs": options.jobs,
                    "tick_ms": options.tick_ms,
                    "start": start,
                },
            )
            for counted in runs
        ]
        for thread in beats:
            thread.start()
        time.sleep(0.5 + options.seconds / 3)
        failed_at = time.monotonic()
        if options.mode == "kill":
            master.kill()
        else:
            replica.client.execute_command("CLUSTER FAILOVER")
        wait_for(
            lambda: cluster.master_of(PREFIX).port == replica.port, "the replica to take over", 30
        )
        took_over = time.monotonic() - failed_at
        for thread in beats:
            thread.join()
    total = runs[0] + runs[1]
    keys = [f"job:j{job}:{tick}" for tick in range(ticks) for job in range(options.jobs)]
    twice = sum(1 for key in keys if total[key] > 1)
    never = sum(1 for key in keys if total[key] == 0)
    print(
        f"mode={options.mode} node-timeout={NODE_TIMEOUT_MS}ms occurrences={len(keys)} "
        f"({options.jobs} jobs every {options.tick_ms} ms for {options.seconds:g} s, two beats)"
    )
    print(f"  replica master after {took_over:.2f} s")
    print(f"  run once {len(keys) - twice - never}, twice {twice}, not at all {never}")


if __name__ == "__main__":
    main()
