"""Faults across real processes: the lock store stopped mid-run, a beat killed and restarted."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from process_support import Deployment, parse, sleep_until_mid_second, wait_until

pytestmark = pytest.mark.processes

EVERY_SECOND = "proc.every-second"
ONCE = "proc.catch-up-once"
SKIP = "proc.catch-up-skip"


def test_with_the_lock_store_down_occurrences_fail_unsent_and_resume_when_it_is_back(
    deploy: Deployment,
) -> None:
    store = deploy.redis_server()
    env = deploy.environment({EVERY_SECOND: {"enabled": True}}, store_url=store.url)
    beats = [deploy.beat(env), deploy.beat(env)]
    deploy.worker(env, pool="solo")
    wait_until(
        lambda: (
            len(deploy.ran(EVERY_SECOND)) >= 2
            and bool(deploy.outcomes(EVERY_SECOND, "skipped-locked"))
        ),
        30,
        "runs, with both beats up",
    )

    sleep_until_mid_second()
    store.kill()
    down_at = datetime.now(UTC)
    time.sleep(4)
    store.start()
    up_at = datetime.now(UTC)
    wait_until(
        lambda: any(at > up_at + timedelta(seconds=1) for at in deploy.instants_ran(EVERY_SECOND)),
        20,
        "runs to resume",
    )

    outage = [down_at + timedelta(seconds=s) for s in (0.5, 1.5, 2.5)]
    instants = [at.replace(microsecond=0) + timedelta(seconds=1) for at in outage]
    ran = deploy.instants_ran(EVERY_SECOND)
    assert not set(instants) & set(ran), deploy.logs()
    failed = deploy.outcomes(EVERY_SECOND, "failed")
    for instant in instants:
        codes = [o["error_code"] for o in failed if parse(o["scheduled_at"]) == instant]
        assert codes == ["JOB_LOCK_UNAVAILABLE", "JOB_LOCK_UNAVAILABLE"], deploy.logs()
    assert all(beat.alive for beat in beats), deploy.logs()
    assert len(ran) == len(set(ran))


def test_a_beat_killed_and_restarted_catches_up_from_its_checkpoints(deploy: Deployment) -> None:
    env = deploy.environment(
        {ONCE: {"enabled": True}, SKIP: {"enabled": True}}, late_after_ms=1_000
    )
    beat = deploy.beat(env)
    deploy.worker(env, pool="threads", concurrency=2)
    wait_until(lambda: len(deploy.ran(SKIP)) >= 3, 30, "the first runs")

    sleep_until_mid_second()
    beat.kill()
    killed_at = datetime.now(UTC)
    time.sleep(5)
    beat.start()
    restarted_at = datetime.now(UTC)
    # and two runs of ONCE since the kill: on a loaded machine beat starts more than 2 s late,
    # and its catch-up alone is then past restarted_at + 2 s
    wait_until(
        lambda: (
            all(
                any(at > restarted_at + timedelta(seconds=2) for at in deploy.instants_ran(job))
                for job in (ONCE, SKIP)
            )
            and sum(at > killed_at for at in deploy.instants_ran(ONCE)) >= 2
        ),
        30,
        "runs to resume after the restart",
    )

    for job in (ONCE, SKIP):
        ran = deploy.instants_ran(job)
        assert len(ran) == len(set(ran)), deploy.logs()
        before = [at for at in ran if at < killed_at]
        assert before == sorted(before)
    # run-once: of the instants missed while beat was down, only the latest one due when it
    # started ran (on time or as the catch-up, by when beat ticked), once, then the rest
    once = [line for line in deploy.ran(ONCE) if parse(line["scheduled_at"]) > killed_at]
    caught_up_at = parse(once[0]["scheduled_at"])
    assert caught_up_at > killed_at + timedelta(seconds=3), deploy.logs()  # not the first missed
    # ... but the latest: the instant after it was reached on time (ran, or found it running)
    following = caught_up_at + timedelta(seconds=1)
    overlapped = [parse(o["scheduled_at"]) for o in deploy.outcomes(ONCE, "skipped-overlap")]
    assert following in overlapped or parse(once[1]["scheduled_at"]) == following
    assert all(
        parse(line["started_at"]) - parse(line["scheduled_at"]) < timedelta(seconds=1)
        for line in once[1:]
    )
    assert deploy.outcomes(ONCE, "missed") == []
    # skip: one missed record for the gap, with its first instant; nothing ran late
    skip_ran = deploy.instants_ran(SKIP)
    last_before = max(at for at in skip_ran if at < killed_at)
    [missed] = deploy.outcomes(SKIP, "missed")
    assert parse(missed["scheduled_at"]) == last_before + timedelta(seconds=1), deploy.logs()
    assert all(
        parse(line["started_at"]) - parse(line["scheduled_at"]) < timedelta(seconds=1)
        for line in deploy.ran(SKIP)
    )
    assert not [at for at in skip_ran if last_before < at < restarted_at - timedelta(seconds=1)]
