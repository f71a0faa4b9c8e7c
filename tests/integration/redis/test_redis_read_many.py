"""Reading many jobs at once from Redis: any job name, and one call per thousand jobs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from redis import Redis

from ddd_celery.redis import RedisJobCheckpoints, RedisJobLastRuns, RedisJobRunState
from ddd_celery.scheduling.outcomes import JobRun, Outcome

pytestmark = pytest.mark.redis

AT = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
NAMES = [
    "billing.plain",
    "beat.nightly report",
    'beat.a "quoted" \\ name',
    "beat.line\nbreak\ttab",
    "beat.[1, 2]",
    "beat.été ⏰ 日本",
    "beat.",
]
"""Declared names are ``context.job``; a ``beat_schedule`` entry's is ``beat.`` and any key."""


def test_read_many_answers_any_job_name_as_read_does(redis_client: Redis, prefix: str) -> None:
    checkpoints = RedisJobCheckpoints(redis_client, prefix=f"{prefix}checkpoint:")
    run_state = RedisJobRunState(redis_client, prefix=f"{prefix}run:")
    last_runs = RedisJobLastRuns(redis_client, prefix=f"{prefix}last-run:")
    for number, name in enumerate(NAMES[::2]):
        at = AT + timedelta(minutes=number)
        checkpoints.write(name, at)
        run_state.claim(name, at, queue=False, ttl_ms=60_000)
        last_runs.write(JobRun(job=name, scheduled_at=at, outcome=Outcome.SUCCEEDED, context="x"))

    handled = checkpoints.read_many(NAMES)
    running = run_state.running_many(NAMES)
    outcomes = last_runs.read_many(NAMES)

    assert handled == {name: checkpoints.read(name) for name in NAMES}
    assert running == {name: run_state.running(name) for name in NAMES}
    assert outcomes == {name: last_runs.read(name) for name in NAMES}
    assert handled[NAMES[2]] == running[NAMES[2]] == AT + timedelta(minutes=1)
    assert handled[NAMES[3]] is running[NAMES[3]] is outcomes[NAMES[3]] is None


def test_read_many_is_one_call_per_thousand_jobs(
    recorded: tuple[Redis, list[tuple[str, ...]]], prefix: str
) -> None:
    client, commands = recorded
    jobs = [f"billing.job-{number}" for number in range(2_500)]
    stores = [
        RedisJobCheckpoints(client, prefix=f"{prefix}checkpoint:").read_many,
        RedisJobRunState(client, prefix=f"{prefix}run:").running_many,
        RedisJobLastRuns(client, prefix=f"{prefix}last-run:").read_many,
    ]
    for read_many in stores:  # Redis loads each script once (NOSCRIPT, SCRIPT LOAD) at most
        read_many(jobs[:1])
    commands.clear()

    for read_many in stores:
        assert set(read_many(jobs).values()) == {None}

    assert [command[0] for command in commands] == ["EVALSHA"] * 9
    assert {len(command) for command in commands} == {7}  # sha, routing key, prefix, field, names
