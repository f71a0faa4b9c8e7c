"""The restart rule on real processes: a beat stopped ~10 s, jobs of every second, checkpoints.

At start, the instants older than the latest one due are one ``missed`` record (``skip``) or
covered by the catch-up (``run-once``); the latest one due runs, being within
``late_after_ms`` (60 s here); every following instant runs on its time, once.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from process_support import Deployment, parse, sleep_until_mid_second, wait_until

pytestmark = pytest.mark.processes

ONCE = "proc.catch-up-once"
SKIP = "proc.catch-up-skip"
SECOND = timedelta(seconds=1)


def test_a_beat_stopped_ten_seconds_runs_the_latest_instant_once_then_each_one_on_time(
    deploy: Deployment,
) -> None:
    env = deploy.environment({ONCE: {"enabled": True}, SKIP: {"enabled": True}})
    beat = deploy.beat(env)
    deploy.worker(env, pool="threads", concurrency=4)
    wait_until(lambda: min(len(deploy.ran(j)) for j in (ONCE, SKIP)) >= 2, 40, "the first runs")

    sleep_until_mid_second()
    beat.stop()
    stopped_at = datetime.now(UTC)
    time.sleep(10)
    restarted_at = datetime.now(UTC)
    beat.start()
    wait_until(
        lambda: all(
            sum(at > restarted_at for at in deploy.instants_ran(job)) >= 4 for job in (ONCE, SKIP)
        ),
        40,
        "four runs of each job after the restart",
    )

    for job in (ONCE, SKIP):
        ran = deploy.instants_ran(job)
        assert len(ran) == len(set(ran)), (job, deploy.logs())
        last_before = max(at for at in ran if at < stopped_at)
        after = sorted(at for at in ran if at > last_before)
        # the first instant run after the stop is the latest one due when beat started again
        latest = after[0]
        assert latest >= restarted_at - SECOND, (job, after, restarted_at, deploy.logs())
        assert latest - last_before >= timedelta(seconds=10), (job, after)
        # then every following instant, once, on its time
        assert after == [latest + i * SECOND for i in range(len(after))], (job, after)
        lines = [line for line in deploy.ran(job) if parse(line["scheduled_at"]) > latest]
        assert all(
            parse(line["started_at"]) - parse(line["scheduled_at"]) < SECOND for line in lines
        ), (job, lines)
        missed = deploy.outcomes(job, "missed")
        if job == ONCE:
            assert missed == [], deploy.logs()  # the catch-up covers the gap
        else:
            [gap] = missed  # one record for the whole gap, with its first instant
            assert parse(gap["scheduled_at"]) == last_before + SECOND, (gap, deploy.logs())
