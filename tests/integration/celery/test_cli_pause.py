"""``celery -A app jobs pause NAME`` and ``resume NAME``, as an operator runs them.

Each command runs in a process of its own (marked ``processes``; a system job's refusal runs
through click's runner, on an app whose relay is installed) on an app module written as a
project writes it, its stores on the real Redis (through the broker's URL), on PostgreSQL
(``SqlLock``), or in process memory; what the command kept is read from the store itself, as a
beat reads it.
"""

from __future__ import annotations

import getpass
import socket
import subprocess
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from celery import Celery
from celery.bin.base import CLIContext
from cli_support import app_env, run_jobs, write_app
from click.testing import CliRunner
from redis import Redis
from services import DATABASE_URL, REDIS_URL
from sqlalchemy import Engine

from ddd_celery.celery import install_jobs
from ddd_celery.celery.background.relay import RELAY_JOB
from ddd_celery.celery.cli import jobs
from ddd_celery.celery.registry import CeleryJob
from ddd_celery.declarations.schedule import parse_job_schedule
from ddd_celery.kernel import FixedClock, InMemoryLock
from ddd_celery.kernel.instants import iso_ms
from ddd_celery.redis.pauses import RedisJobPauses
from ddd_celery.sql import create_tables, drop_tables
from ddd_celery.sql.pauses import SqlJobPauses

APP = '''
"""An app module as a project writes it, for `celery -A pause_app`."""

import os

from celery import Celery
from sqlalchemy import create_engine

from ddd_celery.celery import install_jobs
from ddd_celery.declarations import scheduled
from ddd_celery.kernel import InMemoryLock, SystemClock
from ddd_celery.sql import SqlLock


@scheduled("ops.close-day", cron="30 2 * * *", time_zone="Europe/Paris")
class CloseDayJob:
    def run(self, execution):
        pass


@scheduled("ops.archive", every="1h", enabled=False)
class ArchiveJob:
    def run(self, execution):
        pass


clock = SystemClock()
app = Celery("pause_app", broker=os.environ["BROKER_URL_FOR_TEST"])
app.conf.ddd_celery_key_prefix = os.environ["PREFIX_FOR_TEST"]
store = os.environ["STORE_FOR_TEST"]
if store == "redis":
    lock = None  # the broker's Redis: the stores of app.conf
elif store == "postgresql":
    engine = create_engine(os.environ["SQL_URL_FOR_TEST"], connect_args={"connect_timeout": 2})
    lock = SqlLock(engine, clock, prefix=os.environ["SQL_PREFIX_FOR_TEST"])
else:
    lock = InMemoryLock(clock)
install_jobs(app, jobs=[CloseDayJob, ArchiveJob], lock=lock, clock=clock)
'''

Run = Callable[..., subprocess.CompletedProcess[str]]
JOB = "ops.close-day"
AT = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)


@pytest.fixture
def sql_prefix(engine: Engine) -> Iterator[str]:
    prefix = f"test_{uuid.uuid4().hex[:12]}_"
    create_tables(engine, prefix)
    yield prefix
    drop_tables(engine, prefix)


def runner(tmp_path: Path, redis_prefix: str, **environ: str) -> Run:
    write_app(tmp_path, "pause_app", APP)

    def run(*args: str, broker: str = REDIS_URL) -> subprocess.CompletedProcess[str]:
        env = app_env(
            tmp_path, {"BROKER_URL_FOR_TEST": broker, "PREFIX_FOR_TEST": redis_prefix, **environ}
        )
        return run_jobs("pause_app", tmp_path, env, *args)

    return run


@pytest.fixture
def on_redis(tmp_path: Path, redis_prefix: str) -> Run:
    return runner(tmp_path, redis_prefix, STORE_FOR_TEST="redis")


@pytest.fixture
def pauses(redis_client: Redis, redis_prefix: str) -> RedisJobPauses:
    """The pauses as every beat of the app reads them."""
    return RedisJobPauses(redis_client, prefix=redis_prefix)


@pytest.mark.processes
def test_pause_keeps_who_when_and_why_where_every_beat_reads_it_and_resume_removes_it(
    on_redis: Run, pauses: RedisJobPauses
) -> None:
    paused = on_redis("pause", JOB, "--reason", "invoices wrong")
    kept = pauses.paused()[JOB]
    again = on_redis("pause", JOB, "--by", "grace", "--reason", "me too")
    resumed = on_redis("resume", JOB)
    left = dict(pauses.paused())
    resumed_again = on_redis("resume", JOB)

    assert paused.returncode == 0, paused.stderr
    assert kept.by == f"{getpass.getuser()}@{socket.gethostname()}"
    assert kept.reason == "invoices wrong"
    told = f"by {kept.by} at {iso_ms(kept.at)} (invoices wrong)"
    first, second = paused.stdout.splitlines()
    assert first == f"paused {JOB} {told}"
    assert second.startswith("its next occurrence, ")
    assert second.endswith(", is skipped unless it is resumed before")
    assert paused.stderr == ""
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0] == f"{JOB} was already paused {told}; nothing changed"
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.splitlines()[0] == (
        f"resumed {JOB} (it was paused by {kept.by} at {iso_ms(kept.at)}; reason: invoices wrong)"
    )
    assert resumed.stdout.splitlines()[1].startswith("its next occurrence runs: ")
    assert left == {}
    assert resumed_again.returncode == 0, resumed_again.stderr
    assert resumed_again.stdout.splitlines()[0] == f"{JOB} was not paused; nothing changed"


@pytest.mark.processes
def test_pause_of_a_name_no_job_has_is_a_usage_error_naming_the_jobs_as_next_s_is(
    on_redis: Run, pauses: RedisJobPauses
) -> None:
    unknown = on_redis("pause", "ops.renamed")
    not_resumed = on_redis("resume", "ops.renamed")
    not_next = on_redis("next", "ops.renamed")

    for result in (unknown, not_resumed, not_next):
        assert result.returncode == 2
        assert result.stdout == ""
        assert result.stderr.splitlines()[-1] == (
            "Error: Invalid value for NAME: no job is named 'ops.renamed'; the jobs are: "
            "ops.archive, ops.close-day"
        ), result.stderr
    assert dict(pauses.paused()) == {}


@pytest.mark.processes
def test_a_pause_of_a_job_removed_since_can_still_be_resumed(
    on_redis: Run, pauses: RedisJobPauses
) -> None:
    pauses.pause("ops.removed", by="ada", at=AT)

    resumed = on_redis("resume", "ops.removed")

    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.splitlines()[0] == (
        "resumed ops.removed (it was paused by ada at 2026-03-02T06:00:00.000Z)"
    )
    assert dict(pauses.paused()) == {}


@pytest.mark.processes
def test_pausing_a_disabled_job_says_it_never_runs_by_time_until_enabled(
    on_redis: Run, pauses: RedisJobPauses
) -> None:
    paused = on_redis("pause", "ops.archive", "--by", "ada")

    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.splitlines()[1] == (
        "it is disabled by its settings too: beat starts it by time only once enabled"
    )
    assert set(pauses.paused()) == {"ops.archive"}


@pytest.mark.processes
def test_what_the_store_holds_is_printed_escaped(on_redis: Run, pauses: RedisJobPauses) -> None:
    pauses.pause(JOB, by="ada\x1b[2J", at=AT, reason="line\nforged")

    resumed = on_redis("resume", JOB)

    assert resumed.returncode == 0, resumed.stderr
    assert "\x1b" not in resumed.stdout
    assert resumed.stdout.splitlines()[0] == (
        f"resumed {JOB} (it was paused by ada\\x1b[2J at 2026-03-02T06:00:00.000Z; "
        "reason: line\\nforged)"
    )


@pytest.mark.processes
def test_a_store_that_cannot_be_asked_is_one_line_and_exit_1(
    on_redis: Run, closed_port_url: str
) -> None:
    for command in ("pause", "resume"):
        down = on_redis(command, JOB, broker=closed_port_url)

        assert down.returncode == 1
        assert down.stderr.count("\n") == 1, down.stderr
        assert down.stderr.startswith(f"ddd_celery: jobs {command} failed: StoreUnavailableError")
        assert "Connection refused" in down.stderr


@pytest.mark.processes
@pytest.mark.postgres
def test_with_a_sql_lock_the_pauses_live_in_its_database(
    tmp_path: Path, redis_prefix: str, engine: Engine, sql_prefix: str
) -> None:
    run = runner(
        tmp_path,
        redis_prefix,
        STORE_FOR_TEST="postgresql",
        SQL_URL_FOR_TEST=DATABASE_URL,
        SQL_PREFIX_FOR_TEST=sql_prefix,
    )

    paused = run("pause", JOB, "--by", "ada", broker="memory://")

    assert paused.returncode == 0, paused.stderr
    assert SqlJobPauses(engine, prefix=sql_prefix).paused()[JOB].by == "ada"
    resumed = run("resume", JOB, broker="memory://")
    assert resumed.returncode == 0, resumed.stderr
    assert dict(SqlJobPauses(engine, prefix=sql_prefix).paused()) == {}


@pytest.mark.processes
def test_pauses_no_beat_would_read_are_refused_in_one_line(
    tmp_path: Path, redis_prefix: str
) -> None:
    run = runner(tmp_path, redis_prefix, STORE_FOR_TEST="memory")

    refused = run("pause", JOB, broker="memory://")

    assert refused.returncode == 1
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert refused.stderr.startswith("ddd_celery: jobs pause failed: NotPausableError: ")
    assert "the lock is InMemoryLock" in refused.stderr


def test_the_relay_a_system_job_is_refused_in_one_line() -> None:
    app = Celery(f"pause-{uuid.uuid4().hex}", broker="memory://", set_as_current=False)
    clock = FixedClock(AT)
    registry = install_jobs(app, jobs=[], lock=InMemoryLock(clock), clock=clock, environ={})
    registry.add_system_job(
        CeleryJob(
            name=RELAY_JOB,
            schedule=parse_job_schedule({"every": "1s"}, job=RELAY_JOB),
            task_name=RELAY_JOB,
            queue=None,
            inline=lambda at: None,
        )
    )
    context = CLIContext(app=app, no_color=True, workdir=None, quiet=False)

    refused = CliRunner().invoke(jobs, ["pause", RELAY_JOB], obj=context)
    not_resumed = CliRunner().invoke(jobs, ["resume", RELAY_JOB], obj=context)

    assert refused.exit_code == 1
    assert refused.stdout == ""
    assert refused.stderr == (
        f"ddd_celery: jobs pause failed: NotPausableError: {RELAY_JOB!r} is a system job of "
        "ddd_celery (it publishes the background jobs that are due): pausing it would leave "
        "them unpublished\n"
    )
    assert not_resumed.exit_code == 1
    assert not_resumed.stderr == (
        f"ddd_celery: jobs resume failed: NotPausableError: {RELAY_JOB!r} is a system job of "
        "ddd_celery (it publishes the background jobs that are due): it is never paused, so "
        "there is nothing to resume\n"
    )
