"""The cost of handling an occurrence with 100, 1,000 and 10,000 registered jobs.

Each size runs one simulated hour of ``every: '1m'`` jobs on an ``InProcessJobScheduler``
driven by ``ManualJobTimers`` on a ``FixedClock``: a trivial async job, an ``InMemoryLock``,
the default logger (nothing written below warning) and no metrics. Every occurrence goes the
whole way: due, lock, claim, run in its execution scope, record, next instant. The cost per
occurrence is the wall time of the hour divided by the occurrences handled; the best of a few
rounds is kept. Goal: the cost at 10,000 jobs within 1.5x of the cost at 100, which holds only
if the scheduler does O(log n) per occurrence (one heap, one driver), not O(n).

    python bench/bench_engine.py [--rounds N] [--minutes M]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
from datetime import UTC, datetime

from ddd_celery.declarations.execution import JobExecution
from ddd_celery.kernel import (
    ContextVarExecutionScope,
    FixedClock,
    InMemoryLock,
    SequentialIdGenerator,
)
from ddd_celery.scheduling.in_process import InProcessJobScheduler
from ddd_celery.testing import ManualJobTimers

SIZES = (100, 1_000, 10_000)
START = datetime(2026, 3, 2, 9, 59, 30, tzinfo=UTC)
GOAL = 1.5


async def _job(execution: JobExecution) -> None:
    return None


async def one_hour(jobs: int, minutes: int) -> tuple[float, int]:
    """Seconds spent and occurrences handled in ``minutes`` simulated minutes."""
    clock = FixedClock(START)
    timers = ManualJobTimers(clock)
    handled = 0

    def count(*_: object) -> None:
        nonlocal handled
        handled += 1

    scheduler = InProcessJobScheduler(
        clock=clock,
        lock=InMemoryLock(clock),
        scope=ContextVarExecutionScope(),
        ids=SequentialIdGenerator(),
        timers=timers,
        on_run=count,
    )
    for index in range(jobs):
        scheduler.register(name=f"bench.job-{index}", schedule={"every": "1m"}, run=_job)
    await scheduler.start()
    await timers.advance(0)
    gc.collect()
    began = time.perf_counter()
    await timers.advance(minutes * 60_000)
    spent = time.perf_counter() - began
    await timers.run_until(scheduler.stop())
    if handled != jobs * minutes:
        raise AssertionError(f"{jobs} jobs: {handled} occurrences, expected {jobs * minutes}")
    return spent, handled


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds per size; the best is kept")
    parser.add_argument("--minutes", type=int, default=60, help="simulated minutes per round")
    args = parser.parse_args()

    best: dict[int, tuple[float, int]] = {}
    for jobs in SIZES:
        for round_ in range(1, args.rounds + 1):
            print(f"\r{jobs:>6} jobs, round {round_}/{args.rounds} ...", end="", file=sys.stderr)
            spent, handled = asyncio.run(one_hour(jobs, args.minutes))
            if jobs not in best or spent < best[jobs][0]:
                best[jobs] = (spent, handled)
    print("\r" + " " * 40 + "\r", end="", file=sys.stderr)

    print(f"one simulated hour ({args.minutes} min) of every-1m jobs, best of {args.rounds}")
    print(f"{'jobs':>8} {'occurrences':>12} {'wall s':>8} {'µs / occurrence':>16}")
    per: dict[int, float] = {}
    for jobs, (spent, handled) in best.items():
        per[jobs] = spent / handled * 1e6
        print(f"{jobs:>8,} {handled:>12,} {spent:>8.2f} {per[jobs]:>16.1f}")
    ratio = per[SIZES[-1]] / per[SIZES[0]]
    verdict = "within" if ratio <= GOAL else "NOT within"
    print(f"10,000 vs 100: {ratio:.2f}x ({verdict} the {GOAL}x goal)")
    return 0 if ratio <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
