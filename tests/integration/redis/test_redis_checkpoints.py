"""RedisJobCheckpoints on the real Redis: its keys, its round trips, and outages."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from ddd_celery.redis import RedisJobCheckpoints, StoreUnavailableError, connect

pytestmark = pytest.mark.redis

AT = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
AT_MS = 1_772_431_200_000


@pytest.fixture
def job(redis_client: Redis) -> Iterator[str]:
    """A job of this test's own, whose checkpoint under the default prefix is deleted after."""
    job = f"test.checkpoints-{uuid.uuid4().hex}"
    yield job
    redis_client.delete(f"ddd_celery:checkpoint:{job}")


def test_a_checkpoint_is_epoch_milliseconds_under_the_job_name_and_never_expires(
    redis_client: Redis, job: str
) -> None:
    RedisJobCheckpoints(redis_client).write(job, AT)

    assert redis_client.get(f"ddd_celery:checkpoint:{job}") == str(AT_MS).encode()
    assert redis_client.pttl(f"ddd_celery:checkpoint:{job}") == -1


def test_a_checkpoint_is_kept_to_the_millisecond(redis_client: Redis, prefix: str) -> None:
    checkpoints = RedisJobCheckpoints(redis_client, prefix=prefix)

    checkpoints.write("billing.close-month", AT.replace(microsecond=123_999))

    assert checkpoints.read("billing.close-month") == AT.replace(microsecond=123_000)


def test_reading_is_one_get_and_writing_one_evalsha(
    recorded: tuple[Redis, list[tuple[str, ...]]], prefix: str
) -> None:
    client, commands = recorded
    checkpoints = RedisJobCheckpoints(client, prefix=prefix)
    checkpoints.write("billing.close-month", AT)  # scripts and reads connected once
    checkpoints.read("billing.close-month")
    commands.clear()

    checkpoints.write("billing.close-month", AT)
    checkpoints.read("billing.close-month")

    assert [command[0] for command in commands] == ["EVALSHA", "GET"]
    assert commands[0][2:] == ("1", f"{prefix}billing.close-month", str(AT_MS))


@pytest.mark.parametrize("action", ["read", "write"])
def test_an_unreachable_redis_makes_the_checkpoints_unavailable_at_once(
    closed_port_url: str, action: str
) -> None:
    checkpoints = RedisJobCheckpoints(connect(closed_port_url))
    operations: dict[str, Callable[[], object]] = {
        "read": lambda: checkpoints.read("billing.close-month"),
        "write": lambda: checkpoints.write("billing.close-month", AT),
    }
    started = time.monotonic()

    with pytest.raises(StoreUnavailableError, match=f"{action} the checkpoint") as raised:
        operations[action]()

    assert isinstance(raised.value.__cause__, RedisConnectionError)
    assert time.monotonic() - started < 0.5
