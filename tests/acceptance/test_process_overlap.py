"""Overlap across processes: beats see a run in progress on a worker through the shared state."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from process_support import Deployment, parse, seconds_between, wait_until

pytestmark = pytest.mark.processes

SKIP = "proc.slow-skip"
QUEUE = "proc.slow-queue"
SLEEP_S = 2.5


def test_overlap_skip_and_queue_hold_between_two_beats_and_a_worker(deploy: Deployment) -> None:
    env = deploy.environment({SKIP: {"enabled": True}, QUEUE: {"enabled": True}}, sleep_s=SLEEP_S)
    deploy.beat(env)
    deploy.beat(env)
    deploy.worker(env, pool="threads", concurrency=4)
    wait_until(
        lambda: len(deploy.ran(SKIP)) >= 4 and len(deploy.ran(QUEUE)) >= 4,
        60,
        "four runs of each job",
    )

    for job in (SKIP, QUEUE):
        runs = sorted(deploy.ran(job), key=lambda line: line["began"])
        for earlier, later in itertools.pairwise(runs):
            assert later["began"] >= earlier["ended"], (job, runs, deploy.logs())
        window = seconds_between(parse(runs[0]["scheduled_at"]), parse(runs[-2]["scheduled_at"]))
        ran = [parse(line["scheduled_at"]) for line in runs]
        skipped = [parse(o["scheduled_at"]) for o in deploy.outcomes(job, "skipped-overlap")]
        locked = [parse(o["scheduled_at"]) for o in deploy.outcomes(job, "skipped-locked")]
        for instant in window:
            handled = ran.count(instant) + skipped.count(instant)
            assert handled == 1, (job, instant, deploy.logs())
            # The other beat loses the instant's lock, or, starved past late_after_ms on a
            # loaded machine, never asks for it: the lock is never taken twice.
            assert locked.count(instant) <= 1, (job, instant, deploy.logs())
        assert set(window) & set(locked), (job, "the two beats never met on an instant")
    queued = [
        line
        for line in deploy.ran(QUEUE)
        if parse(line["started_at"]) - parse(line["scheduled_at"]) > timedelta(seconds=1)
    ]
    assert queued, deploy.ran(QUEUE)
    assert all(
        parse(line["started_at"]) - parse(line["scheduled_at"]) < timedelta(seconds=1)
        for line in deploy.ran(SKIP)
    )
