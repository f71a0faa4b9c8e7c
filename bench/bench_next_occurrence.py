"""Throughput of ``next_occurrence`` against cronsim and croniter, in Europe/Paris.

Each evaluator walks a chain of occurrences of the same expression from the same instant, in
the same process and run: ddd_celery calls ``next_occurrence`` on its previous result, cronsim
and croniter advance their own iterators (their fastest use). The best of several rounds is kept
for each, after a warm-up round; the ``cold`` column is ddd_celery's first round with its cache
of zone offsets emptied, the price a process pays once. The ratio compares ddd_celery with the
faster peer.

    python bench/bench_next_occurrence.py [--rounds N]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from datetime import datetime
from zoneinfo import ZoneInfo

from croniter import croniter
from cronsim import CronSim

from ddd_celery.declarations import cron_evaluator, parse_job_schedule
from ddd_celery.declarations.cron_evaluator import next_occurrence

ZONE = "Europe/Paris"
START = datetime(2026, 1, 1, tzinfo=ZoneInfo(ZONE))
CASES = (
    ("*/15 * * * *", 2000),
    ("0 * * * *", 2000),
    ("0 */2 * * *", 2000),
    ("0 7 * * 1-5", 2000),
    ("30 2 * * *", 2000),
    ("15 9-17 * * mon-fri", 2000),
    ("0,30 8-18 * * *", 2000),
    ("0 0 1 * *", 2000),
    ("0 0 13 * fri", 2000),
    ("0 12 1 1,4,7,10 *", 1000),
    ("0 0 29 2 *", 200),
)


def chain_ours(expression: str, steps: int) -> Callable[[], object]:
    parsed = parse_job_schedule({"cron": expression, "time_zone": ZONE})

    def run() -> object:
        instant = START
        for _ in range(steps):
            instant = next_occurrence(parsed, instant)
        return instant

    return run


def chain_cronsim(expression: str, steps: int) -> Callable[[], object]:
    def run() -> object:
        occurrences = CronSim(expression, START)
        for _ in range(steps):
            instant = next(occurrences)
        return instant

    return run


def chain_croniter(expression: str, steps: int) -> Callable[[], object]:
    def run() -> object:
        occurrences = croniter(expression, START)
        for _ in range(steps):
            instant = occurrences.get_next(datetime)
        return instant

    return run


def seconds(run: Callable[[], object]) -> float:
    began = time.perf_counter()
    run()
    return time.perf_counter() - began


def best(run: Callable[[], object], rounds: int) -> float:
    run()  # warm-up: imports, caches, the interpreter's specialisation
    return min(seconds(run) for _ in range(rounds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds per evaluator (best kept)")
    rounds = parser.parse_args().rounds

    rows: list[tuple[str, int, list[float]]] = []
    for number, (expression, steps) in enumerate(CASES, 1):
        print(f"\rmeasuring {number}/{len(CASES)}: {expression:<24}", end="", file=sys.stderr)
        cron_evaluator._CHUNKS.clear()  # the cold round starts without cached offsets
        cold = steps / seconds(chain_ours(expression, steps))
        ours = steps / best(chain_ours(expression, steps), rounds)
        sim = steps / best(chain_cronsim(expression, steps), rounds)
        niter = steps / best(chain_croniter(expression, steps), rounds)
        rows.append((expression, steps, [ours, cold, sim, niter, ours / max(sim, niter)]))
    print("\r" + " " * 60 + "\r", end="", file=sys.stderr)

    print(f"next_occurrence chains in {ZONE} from {START.isoformat()}, occurrences/s (best of")
    print(f"{rounds} rounds), Python {sys.version.split()[0]}")
    header = ("expression", "steps", "ddd_celery", "cold", "cronsim", "croniter", "ratio")
    print(f"{header[0]:<22}{header[1]:>6}" + "".join(f"{title:>12}" for title in header[2:]))
    for expression, steps, values in rows:
        rates = "".join(f"{rate:>12,.0f}" for rate in values[:4])
        print(f"{expression:<22}{steps:>6}{rates}{values[4]:>11.2f}x")
    means = [
        math.exp(sum(math.log(values[i]) for _, _, values in rows) / len(rows)) for i in range(5)
    ]
    rates = "".join(f"{rate:>12,.0f}" for rate in means[:4])
    print(f"{'geometric mean':<28}{rates}{means[4]:>11.2f}x")


if __name__ == "__main__":
    main()
