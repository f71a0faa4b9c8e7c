"""The lock's promises on real beats: a beat that dies holding it, clocks apart, sub-second jobs.

Each occurrence of a ``single_instance`` job is sent by the one beat that takes its lock
``job:<name>:<instant>``; the others record ``skipped-locked``.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from process_support import Deployment, parse, wait_until

pytestmark = pytest.mark.processes

EVERY_SECOND = "proc.every-second"
HALF_SECOND = "proc.half-second"


def instant_of(key: str) -> datetime:
    """The instant of a lock key ``job:<name>:<ISO instant>``."""
    return parse(key.rsplit(":", 3)[-3] + ":" + ":".join(key.rsplit(":", 3)[-2:]))


def sent_once_and_locked_once(
    deploy: Deployment, job: str, start: datetime, end: datetime, step: timedelta
) -> None:
    """Every instant of ``job`` from ``start`` to ``end`` ran once and was found locked once."""
    ran = Counter(deploy.instants_ran(job))
    locked = Counter(parse(o["scheduled_at"]) for o in deploy.outcomes(job, "skipped-locked"))
    assert all(count == 1 for count in ran.values()), (ran, deploy.logs())
    instant, checked = start, 0
    while instant <= end:
        assert (ran[instant], locked[instant]) == (1, 1), (instant, deploy.logs())
        instant += step
        checked += 1
    assert checked >= 5, (start, end)
    assert deploy.outcomes(job, "failed") == deploy.outcomes(job, "missed") == []


def test_a_beat_that_dies_holding_the_lock_of_an_occurrence_leaves_it_unrun_by_the_others(
    deploy: Deployment,
) -> None:
    env = deploy.environment({EVERY_SECOND: {"enabled": True}})
    deploy.beat(env)
    deploy.worker(env, pool="threads", concurrency=2)
    wait_until(lambda: len(deploy.ran(EVERY_SECOND)) >= 2, 30, "the first runs")
    holder = deploy.beat({**env, "DDD_TEST_HOLD_AFTER_LOCK": "1"})
    wait_until(lambda: deploy.records.llen(f"{deploy.prefix}held") >= 1, 30, "a lock taken")
    holder.kill()  # it took the lock, and never claimed nor sent the occurrence
    [key] = [k.decode() for k in deploy.records.lrange(f"{deploy.prefix}held", 0, -1)]
    held = instant_of(key)
    wait_until(
        lambda: any(at > held + timedelta(seconds=4) for at in deploy.instants_ran(EVERY_SECOND)),
        30,
        "runs after the occurrence held",
    )

    assert held not in deploy.instants_ran(EVERY_SECOND), deploy.logs()
    locked = [parse(o["scheduled_at"]) for o in deploy.outcomes(EVERY_SECOND, "skipped-locked")]
    assert held in locked, deploy.logs()  # the other beat reached it and found it taken
    assert deploy.records.pttl(f"{deploy.prefix}{key}") > 0  # within the lock's time to live
    after = sorted(at for at in deploy.instants_ran(EVERY_SECOND) if at > held)
    assert after == [held + timedelta(seconds=i + 1) for i in range(len(after))], deploy.logs()


@pytest.mark.parametrize("shift_ms", [2_500, -2_500], ids=["ahead", "behind"])
def test_beats_whose_clocks_are_seconds_apart_send_each_occurrence_once(
    deploy: Deployment, shift_ms: int
) -> None:
    env = deploy.environment({EVERY_SECOND: {"enabled": True}})
    deploy.beat(env)
    deploy.beat({**env, "DDD_TEST_CLOCK_SHIFT_MS": str(shift_ms)})
    deploy.worker(env, pool="threads", concurrency=2)
    wait_until(
        lambda: len(deploy.outcomes(EVERY_SECOND, "skipped-locked")) >= 2,
        30,
        "both beats to reach the same instants",
    )
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
    time.sleep(10)
    end = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=4)

    sent_once_and_locked_once(deploy, EVERY_SECOND, start, end, timedelta(seconds=1))


def test_a_half_second_job_under_two_beats_takes_a_lock_per_occurrence_and_runs_each_once(
    deploy: Deployment,
) -> None:
    env = deploy.environment({HALF_SECOND: {"enabled": True}})
    deploy.beat(env)
    deploy.beat(env)
    deploy.worker(env, pool="threads", concurrency=2)
    wait_until(
        lambda: len(deploy.outcomes(HALF_SECOND, "skipped-locked")) >= 2,
        30,
        "both beats to reach the same instants",
    )
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
    time.sleep(6)
    end = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)

    sent_once_and_locked_once(deploy, HALF_SECOND, start, end, timedelta(milliseconds=500))
    keys = {
        instant_of(key.decode())
        for key in deploy.records.scan_iter(match=f"{deploy.prefix}job:{HALF_SECOND}:*")
    }
    halves = [
        start + timedelta(milliseconds=500 * i)
        for i in range(2 * int((end - start).total_seconds()) + 1)
    ]
    assert set(halves) <= keys, sorted(keys)
    assert any(at.microsecond == 500_000 for at in halves)
