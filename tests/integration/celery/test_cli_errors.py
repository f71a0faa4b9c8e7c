"""Every ``celery -A app jobs`` command fails the same way: one line naming what is wrong, exit 1.

Run as an operator runs them, ``celery -A ops_errors_app jobs ...`` in a process of its own,
with the job store on Redis or on PostgreSQL at a port nothing listens on, and with an
environment variable the wiring cannot read. No traceback, no Celery "Unable to load".
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_support import app_env, run_jobs, write_app
from services import REDIS_URL

pytestmark = pytest.mark.processes

APP = """
import os

from celery import Celery
from sqlalchemy import create_engine

from ddd_celery.celery import install_jobs
from ddd_celery.celery.background import install_background_jobs
from ddd_celery.declarations import JobExecution, scheduled
from ddd_celery.declarations.background import BackgroundJobExecution, background
from ddd_celery.redis import connect
from ddd_celery.redis.job_store import RedisJobStore
from ddd_celery.sql import SqlJobStore


@scheduled(name="ops.close-day", cron="0 2 * * *")
class CloseDayJob:
    def run(self, execution: JobExecution) -> None:
        print("closed")


@background("ops.send-mail")
class SendMailJob:
    def run(self, payload: object, execution: BackgroundJobExecution) -> None:
        print("sent")


app = Celery("ops_errors_app", broker=os.environ["REDIS_FOR_TEST"])
app.conf.ddd_celery_key_prefix = os.environ["PREFIX_FOR_TEST"]
install_jobs(app, jobs=[CloseDayJob])
if os.environ.get("SQL_FOR_TEST"):
    store = SqlJobStore(create_engine(os.environ["SQL_FOR_TEST"]), prefix="ops_errors_")
else:
    redis = connect(os.environ["REDIS_FOR_TEST"])
    store = RedisJobStore(redis, prefix=os.environ["PREFIX_FOR_TEST"])
install_background_jobs(app, jobs=[SendMailJob], store=store)
"""

SCHEDULED = [("history", "ops.close-day"), ("run-now", "ops.close-day", "--on-workers")]
"""The scheduled commands that need a store (``next`` needs none; ``run-now`` run here needs
one only to keep its record: its own test below)."""
BACKGROUND = [
    ("background", "stats"),
    ("background", "dead"),
    ("background", "find", "job-1"),
    ("background", "cancel", "job-1"),
    ("background", "retry-dead", "job-1"),
]

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def celery_jobs(tmp_path: Path, redis_prefix: str) -> Run:
    write_app(tmp_path, "ops_errors_app", APP)

    def run(*args: str, **environ: str) -> subprocess.CompletedProcess[str]:
        env = app_env(
            tmp_path,
            {
                "PYTHONPATH": os.pathsep.join([str(tmp_path), os.getcwd()]),
                "REDIS_FOR_TEST": REDIS_URL,
                "PREFIX_FOR_TEST": redis_prefix,
                **environ,
            },
        )
        return run_jobs("ops_errors_app", tmp_path, env, *args)

    return run


def _error_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    """What a failed command printed on stderr, once its exit code is known to be 1."""
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    return [line for line in result.stderr.splitlines() if line.strip()]


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = _error_lines(result)
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_list_whose_redis_is_down_lists_what_it_knows_and_names_each_store_in_a_line(
    celery_jobs: Run, closed_port_url: str
) -> None:
    result = celery_jobs("list", REDIS_FOR_TEST=closed_port_url)

    lines = _error_lines(result)
    assert [line.split(" could not be asked: ")[0] for line in lines] == [
        "The run state (RedisJobRunState)",
        "The checkpoints (RedisJobCheckpoints)",
        "The last runs (RedisJobLastRuns)",
        "The pauses (RedisJobPauses)",
    ]
    assert "ops.close-day" in result.stdout


@pytest.mark.parametrize("command", SCHEDULED + BACKGROUND, ids=" ".join)
def test_a_command_whose_redis_is_down_says_so_in_one_line(
    celery_jobs: Run, closed_port_url: str, command: tuple[str, ...]
) -> None:
    line = _one_line(celery_jobs(*command, REDIS_FOR_TEST=closed_port_url))

    path = " ".join(command[:2] if command[0] == "background" else command[:1])
    assert line.startswith(f"ddd_celery: jobs {path} failed: "), line
    assert "ConnectionError" in line or "could not be asked" in line, line
    address = closed_port_url.removeprefix("redis://").removesuffix("/0")
    assert address in line or "RedisJob" in line, line


def test_run_now_whose_record_cannot_be_kept_says_it_ran_unrecorded_and_exits_1(
    celery_jobs: Run, closed_port_url: str
) -> None:
    result = celery_jobs("run-now", "ops.close-day", REDIS_FOR_TEST=closed_port_url)

    line = _one_line(result)
    assert "closed" in result.stdout.splitlines()  # the job ran
    assert result.stdout.splitlines()[-1].startswith("ops.close-day succeeded in ")
    assert line.startswith(
        "ddd_celery: jobs run-now: ops.close-day succeeded but its record could not be kept in "
        "the last runs (RedisJobLastRuns), so its history will not show it: "
        "StoreUnavailableError: "
    ), line
    address = closed_port_url.removeprefix("redis://").removesuffix("/0")
    assert address in line, line


@pytest.mark.postgres
@pytest.mark.parametrize("command", BACKGROUND, ids=" ".join)
def test_a_background_command_whose_postgresql_is_down_says_so_in_one_line(
    celery_jobs: Run, closed_port_url: str, command: tuple[str, ...]
) -> None:
    port = closed_port_url.rsplit(":", 1)[1].removesuffix("/0")
    down = f"postgresql+psycopg://postgres@127.0.0.1:{port}/test?connect_timeout=2"

    line = _one_line(celery_jobs(*command, SQL_FOR_TEST=down))

    assert line.startswith(f"ddd_celery: jobs {' '.join(command[:2])} failed: "), line
    assert port in line, line


@pytest.mark.parametrize(
    ("variable", "command"),
    [
        ("JOB_OPS_CLOSE_DAY_ENABLED", ("list",)),
        ("JOB_OPS_CLOSE_DAY_ENABLED", ("background", "stats")),
        ("RUN_JOBS", ("next", "ops.close-day")),
    ],
)
def test_an_environment_variable_that_cannot_be_read_is_one_line_naming_it(
    celery_jobs: Run, variable: str, command: tuple[str, ...]
) -> None:
    line = _one_line(celery_jobs(*command, **{variable: "maybe"}))

    assert line.startswith("ddd_celery refuses the configuration: "), line
    assert f"{variable}='maybe'" in line, line


def test_the_traceback_option_shows_what_the_line_sums_up(
    celery_jobs: Run, closed_port_url: str
) -> None:
    result = celery_jobs("--traceback", "background", "stats", REDIS_FOR_TEST=closed_port_url)

    assert result.returncode == 1
    assert "Traceback" in result.stderr
    assert (
        result.stderr.rstrip()
        .splitlines()[-1]
        .startswith("ddd_celery: jobs background stats failed: ")
    )
