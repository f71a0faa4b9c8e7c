"""RedisJobLastRuns on the real Redis: its keys, its round trips, the history's bound, and
outages."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from ddd_celery.redis import RedisJobLastRuns, StoreUnavailableError, connect
from ddd_celery.scheduling.outcomes import JobRun, Outcome

pytestmark = pytest.mark.redis

AT = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
AT_MS = 1_772_431_200_000


def missed(job: str, at: datetime = AT) -> JobRun:
    return JobRun(job=job, scheduled_at=at, outcome=Outcome.MISSED, context="test")


@pytest.fixture
def job(redis_client: Redis) -> Iterator[str]:
    """A job of this test's own, whose last run under the default prefix is deleted after."""
    job = f"test.last-runs-{uuid.uuid4().hex}"
    yield job
    redis_client.delete(f"ddd_celery:last-run:{job}", f"ddd_celery:last-run:history:{job}")


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


def test_the_history_is_a_list_of_the_same_json_newest_first_that_never_expires(
    redis_client: Redis, job: str
) -> None:
    RedisJobLastRuns(redis_client).write(missed(job))

    key = f"ddd_celery:last-run:history:{job}"
    [record] = redis_client.lrange(key, 0, -1)
    assert record == redis_client.hget(f"ddd_celery:last-run:{job}", "run")
    assert redis_client.pttl(key) == -1


def test_the_history_list_is_trimmed_to_the_bound_the_store_is_given(
    redis_client: Redis, job: str
) -> None:
    last_runs = RedisJobLastRuns(redis_client, history_limit=3)
    runs = [missed(job, at=AT + timedelta(minutes=minutes)) for minutes in range(5)]
    for run in runs:
        last_runs.write(run)

    assert redis_client.llen(f"ddd_celery:last-run:history:{job}") == 3
    assert last_runs.history(job, limit=10) == runs[:1:-1]


@pytest.mark.parametrize("limit", [0, -3])
def test_a_history_bound_that_keeps_nothing_is_refused(redis_client: Redis, limit: int) -> None:
    with pytest.raises(ValueError, match="positive number of records"):
        RedisJobLastRuns(redis_client, history_limit=limit)


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
    assert commands[0][2:5] == (
        "2",
        f"{prefix}billing.close-month",
        f"{prefix}history:billing.close-month",
    )
    assert commands[0][5] == str(AT_MS)


def test_a_history_read_is_one_lrange_of_its_limit(
    recorded: tuple[Redis, list[tuple[str, ...]]], prefix: str
) -> None:
    client, commands = recorded
    last_runs = RedisJobLastRuns(client, prefix=prefix, history_prefix=f"{prefix}h:")
    last_runs.history("billing.close-month")  # connected once
    commands.clear()

    last_runs.history("billing.close-month", limit=7)

    assert commands == [("LRANGE", f"{prefix}h:billing.close-month", "0", "6")]


@pytest.mark.parametrize("action", ["read", "write", "history"])
def test_an_unreachable_redis_makes_the_last_runs_unavailable_at_once(
    closed_port_url: str, action: str
) -> None:
    last_runs = RedisJobLastRuns(connect(closed_port_url))
    operations: dict[str, Callable[[], object]] = {
        "read": lambda: last_runs.read("billing.close-month"),
        "write": lambda: last_runs.write(missed("billing.close-month")),
        "history": lambda: last_runs.history("billing.close-month"),
    }
    started = time.monotonic()

    doing = "read the run history" if action == "history" else f"{action} the last run"
    with pytest.raises(StoreUnavailableError, match=doing) as raised:
        operations[action]()

    assert isinstance(raised.value.__cause__, RedisConnectionError)
    assert time.monotonic() - started < 0.5
