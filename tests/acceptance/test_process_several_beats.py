"""Three active beats and one worker across a minute boundary: every occurrence runs once.

A long test (30 to 64 s of watching), kept to the one claim that needs the time: a cron job
crosses a minute boundary while an every-second job runs at least thirty times. The watch ends
once both happened, not after a fixed minute. A fresh ``jobs list`` then shows what the worker
recorded.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from process_support import Deployment, parse, seconds_between, wait_until

pytestmark = pytest.mark.processes

EVERY_SECOND = "proc.every-second"
EVERY_MINUTE = "proc.every-minute"
WATCH_S = 30
"""The shortest watch: thirty instants of the every-second job contended by three beats."""


def every_beat_is_up(deploy: Deployment) -> bool:
    """An instant was sent by one beat and found locked by the two others."""
    locked = Counter(o["scheduled_at"] for o in deploy.outcomes(EVERY_SECOND, "skipped-locked"))
    return 2 in locked.values()


def test_three_beats_and_a_worker_run_each_occurrence_once_on_its_instant(
    deploy: Deployment,
) -> None:
    env = deploy.environment({EVERY_SECOND: {"enabled": True}, EVERY_MINUTE: {"enabled": True}})
    beats = [deploy.beat(env) for _ in range(3)]
    deploy.worker(env, pool="prefork", concurrency=2)
    wait_until(lambda: every_beat_is_up(deploy), 30, "an instant seen by the three beats")
    watched_from = datetime.now(UTC)
    next_minute = watched_from.replace(second=0, microsecond=0) + timedelta(minutes=1)
    # the cron's instant 2 s inside the window watched (its run landed), and WATCH_S at least
    until = max(watched_from + timedelta(seconds=WATCH_S), next_minute + timedelta(seconds=4))
    time.sleep((until - datetime.now(UTC)).total_seconds())
    watched_to = datetime.now(UTC) - timedelta(seconds=2)  # the last runs may still be landing

    assert all(beat.alive for beat in beats), deploy.logs()
    for job, instants in (
        (EVERY_SECOND, seconds_between(watched_from, watched_to)),
        (EVERY_MINUTE, [t for t in seconds_between(watched_from, watched_to) if t.second == 0]),
    ):
        lines = deploy.ran(job)
        ran = [parse(line["scheduled_at"]) for line in lines]
        locked = [parse(o["scheduled_at"]) for o in deploy.outcomes(job, "skipped-locked")]
        assert instants, job
        for instant in instants:
            assert (ran.count(instant), locked.count(instant)) == (1, 2), (job, instant)
        assert len(ran) == len(set(ran)), job
        assert all(at.microsecond == 0 for at in ran), job
        if job == EVERY_MINUTE:
            assert all(at.second == 0 for at in ran), ran
        late = [
            line
            for line in lines
            if parse(line["started_at"]) - parse(line["scheduled_at"]) > timedelta(seconds=1)
        ]
        assert late == [], job
        assert deploy.outcomes(job, "failed") == deploy.outcomes(job, "missed") == [], job
    # a fresh process lists what the worker recorded; the beats' skipped-locked never hide it
    listed = deploy.jobs_list(env)
    assert "succeeded 20" in listed[EVERY_SECOND], listed
    assert "succeeded 20" in listed[EVERY_MINUTE], listed
    assert listed["proc.slow-skip"].endswith("none yet"), listed
