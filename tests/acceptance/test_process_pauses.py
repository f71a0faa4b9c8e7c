"""Two running beats and a worker: ``celery jobs pause`` skips the next occurrences, ``resume``
runs them again, nothing restarted.

The commands run as an operator runs them, ``celery -A process_app jobs pause|resume NAME`` in
a process of its own, while the beats tick; the pause lives beside their ``RedisLock``.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from process_support import HERE, Deployment, parse, wait_until

pytestmark = pytest.mark.processes

JOB = "proc.every-second"
SLACK = timedelta(seconds=1)
"""An occurrence due while the command ran may have been read before the pause was kept."""


def jobs_command(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", "process_app", "jobs", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=HERE,
        timeout=60,
        check=False,
    )


def skipped_paused(deploy: Deployment) -> list[datetime]:
    return [parse(o["scheduled_at"]) for o in deploy.outcomes(JOB, "skipped-paused")]


def test_a_pause_makes_every_running_beat_skip_the_next_occurrences_until_resumed(
    deploy: Deployment,
) -> None:
    env = deploy.environment({JOB: {"enabled": True}})
    beats = [deploy.beat(env) for _ in range(2)]
    deploy.worker(env, pool="solo")
    wait_until(lambda: len(deploy.ran(JOB)) >= 2, 60, "the job running before the pause")

    paused = jobs_command(env, "pause", JOB, "--by", "ops@test", "--reason", "acceptance")
    paused_at = datetime.now(UTC)
    wait_until(lambda: len(skipped_paused(deploy)) >= 3, 30, "three occurrences skipped")
    resumed = jobs_command(env, "resume", JOB)
    resumed_at = datetime.now(UTC)
    wait_until(
        lambda: any(at > resumed_at + SLACK for at in deploy.instants_ran(JOB)),
        30,
        "a run after the resume",
    )

    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.startswith(f"paused {JOB} by ops@test at "), paused.stdout
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith(f"resumed {JOB} (it was paused by ops@test at "), (
        resumed.stdout
    )
    assert all(beat.alive for beat in beats), deploy.logs()
    skipped = skipped_paused(deploy)
    ran = deploy.instants_ran(JOB)
    assert len(skipped) == len(set(skipped)), "one beat records each occurrence skipped-paused"
    locked = {parse(o["scheduled_at"]) for o in deploy.outcomes(JOB, "skipped-locked")}
    assert set(skipped) <= locked, "the other beat found its lock taken"
    assert all(paused_at - SLACK <= at <= resumed_at + SLACK for at in skipped), skipped
    during = [at for at in ran if paused_at + SLACK < at < resumed_at - SLACK]
    assert during == [], "nothing ran while the job was paused"
    seconds = [at for at in ran + skipped if at.microsecond == 0]
    assert Counter(seconds).most_common(1)[0][1] == 1, "each occurrence ran or was skipped once"
    output = "".join(beat.output() for beat in beats)
    assert "Scheduled job skipped: paused by an operator" in output
    assert deploy.outcomes(JOB, "failed") == deploy.outcomes(JOB, "missed") == []
