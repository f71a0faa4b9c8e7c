"""RedisJobLastRuns on the real Redis: its keys, its round trips, and outages."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from ddd_celery.redis import RedisJobLastRuns, StoreUnavailableError, connect
from ddd_celery.scheduling.outcomes import JobRun, Outcome

pytestmark = pytest.mark.redis

AT = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
AT_MS = 1_772_431_200_000


def missed(job: str) -> JobRun:
    return JobRun(job=job, scheduled_at=AT, outcome=Outcome.MISSED, context="test")


@pytest.fixture
def job(redis_client: Redis) -> Iterator[str]:
    """A job of this test's own, whose last run under the default prefix is deleted after."""
    job = f"test.last-runs-{uuid.uuid4().hex}"
    yield job
    redis_client.delete(f"ddd_celery:last-run:{job}")


def test_a_last_run_is_a_hash_of_its_instant_and_its_json_that_never_expires(
    redis_client: Redis, job: str
) -> None:
    RedisJobLastRuns(redis_client).write(missed(job))

    key = f"ddd_celery:last-run:{job}"
    stored = redis_client.hgetall(key)
    assert stored[b"at"] == str(AT_MS).encode()
    assert json.loads(stored[b"run"]) == {
        "job": job,
        "context": "test",
        "scheduled_at": "2026-03-02T06:00:00.000000Z",
        "outcome": "missed",
        "started_at": None,
        "duration_ms": None,
        "error_code": None,
        "error_type": None,
        "correlation_id": None,
        "tenant_id": None,
    }
    assert redis_client.pttl(key) == -1


def test_writing_is_one_evalsha_and_reading_one_hget(
    recorded: tuple[Redis, list[tuple[str, ...]]], prefix: str
) -> None:
    client, commands = recorded
    last_runs = RedisJobLastRuns(client, prefix=prefix)
    last_runs.write(missed("billing.close-month"))  # scripts and reads connected once
    last_runs.read("billing.close-month")
    commands.clear()

    last_runs.write(missed("billing.close-month"))
    last_runs.read("billing.close-month")

    assert [command[0] for command in commands] == ["EVALSHA", "HGET"]
    assert commands[0][2:4] == ("1", f"{prefix}billing.close-month")
    assert commands[0][4] == str(AT_MS)


@pytest.mark.parametrize("action", ["read", "write"])
def test_an_unreachable_redis_makes_the_last_runs_unavailable_at_once(
    closed_port_url: str, action: str
) -> None:
    last_runs = RedisJobLastRuns(connect(closed_port_url))
    operations: dict[str, Callable[[], object]] = {
        "read": lambda: last_runs.read("billing.close-month"),
        "write": lambda: last_runs.write(missed("billing.close-month")),
    }
    started = time.monotonic()

    with pytest.raises(StoreUnavailableError, match=f"{action} the last run") as raised:
        operations[action]()

    assert isinstance(raised.value.__cause__, RedisConnectionError)
    assert time.monotonic() - started < 0.5
