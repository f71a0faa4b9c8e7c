"""The JobPauses contract, run over every adapter (see conftest); and each shared store that
cannot be reached raises ``ConnectionError``, so beat and the CLI can tell it from no pause."""

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import create_engine

from ddd_celery.redis import connect
from ddd_celery.redis.pauses import RedisJobPauses
from ddd_celery.scheduling.pauses import JobPauses
from ddd_celery.sql import sqlite_engine
from ddd_celery.sql.pauses import SqlJobPauses
from ddd_celery.testing.contracts.pauses import JobPausesContract
from tests.contracts.conftest import UNREACHABLE_REDIS


class TestJobPauses(JobPausesContract):
    pass


def redis_down(tmp_path: Path) -> JobPauses:
    return RedisJobPauses(connect(UNREACHABLE_REDIS, timeout=0.2, retries=0))


def postgresql_down(tmp_path: Path) -> JobPauses:
    engine = create_engine(
        "postgresql+psycopg://postgres@127.0.0.1:1/test", connect_args={"connect_timeout": 1}
    )
    return SqlJobPauses(engine)


def sqlite_down(tmp_path: Path) -> JobPauses:
    return SqlJobPauses(sqlite_engine(tmp_path / "no such folder" / "jobs.sqlite3"))


@pytest.mark.parametrize("down", [redis_down, postgresql_down, sqlite_down])
def test_every_command_of_a_store_that_cannot_be_reached_raises_connection_error(
    tmp_path: Path, down: Callable[[Path], JobPauses]
) -> None:
    pauses = down(tmp_path)
    at = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)

    with pytest.raises(ConnectionError):
        pauses.paused()
    with pytest.raises(ConnectionError):
        pauses.pause("billing.send-payment-reminders", by="ada", at=at)
    with pytest.raises(ConnectionError):
        pauses.resume("billing.send-payment-reminders")
