"""``jobs history``, ``run-now --at`` and ``run-now --on-workers``, as an operator runs them.

``celery -A ops_history_app jobs ...`` in processes of their own, with the scheduled jobs' stores
on the real Redis or on the real PostgreSQL (the broker is Redis either way), and a real
``celery worker`` for the occurrence sent to the workers. Each test keeps its Redis keys (the
broker's included) under a prefix of its own, and its tables under a prefix of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cli_support import app_env, run_jobs, write_app
from services import DATABASE_URL, REDIS_URL
from sqlalchemy import create_engine

from ddd_celery.declarations import parse_job_schedule
from ddd_celery.declarations.cron_evaluator import latest_occurrence, next_occurrence
from ddd_celery.kernel.instants import iso_ms
from ddd_celery.sql import drop_tables

pytestmark = pytest.mark.processes

APP = '''
"""An app module as a project writes it, for `celery -A ops_history_app`."""

import os

from celery import Celery
from sqlalchemy import create_engine

from ddd_celery.celery import install_jobs
from ddd_celery.declarations import scheduled
from ddd_celery.kernel import SystemClock
from ddd_celery.sql import (
    SqlJobCheckpoints,
    SqlJobLastRuns,
    SqlJobRunState,
    SqlLock,
    create_tables,
)


@scheduled("ops.close-day", cron="30 2 * * *", time_zone="Europe/Paris")
class CloseDayJob:
    def run(self, execution):
        if os.environ.get("FAIL_FOR_TEST"):
            raise RuntimeError("day 42 cannot close")
        print("closed", execution.scheduled_at.isoformat())


app = Celery("ops_history_app", broker=os.environ["BROKER_URL_FOR_TEST"])
app.conf.broker_transport_options = {"global_keyprefix": os.environ["PREFIX_FOR_TEST"]}
app.conf.ddd_celery_key_prefix = os.environ["PREFIX_FOR_TEST"]
stores = {}
if os.environ.get("SQL_FOR_TEST"):
    engine = create_engine(os.environ["SQL_FOR_TEST"])
    prefix = os.environ["SQL_PREFIX_FOR_TEST"]
    create_tables(engine, prefix)
    clock = SystemClock()
    stores = {
        "lock": SqlLock(engine, clock, prefix=prefix),
        "run_state": SqlJobRunState(engine, clock, prefix=prefix),
        "checkpoints": SqlJobCheckpoints(engine, prefix=prefix),
        "last_runs": SqlJobLastRuns(engine, prefix=prefix),
    }
install_jobs(app, jobs=[CloseDayJob], **stores)
'''

JOB = "ops.close-day"
SCHEDULE = parse_job_schedule({"cron": "30 2 * * *", "time_zone": "Europe/Paris"})
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

Run = Callable[..., subprocess.CompletedProcess[str]]


class Ops:
    """The app's directory and environment, ``celery -A ops_history_app <args>`` run in it."""

    def __init__(self, directory: Path, env: dict[str, str]) -> None:
        self.directory = directory
        self.env = env

    def jobs(self, *args: str, **environ: str) -> subprocess.CompletedProcess[str]:
        return run_jobs("ops_history_app", self.directory, {**self.env, **environ}, *args)

    def history(self, *args: str) -> list[dict[str, Any]]:
        shown = self.jobs("history", JOB, "--json", *args)
        assert shown.returncode == 0, shown.stderr
        runs: list[dict[str, Any]] = json.loads(shown.stdout)["runs"]
        return runs

    @contextmanager
    def worker(self) -> Iterator[None]:
        """A real ``celery worker`` of the job's queue while the block runs; its output in
        ``worker.log``."""
        with (self.directory / "worker.log").open("ab") as log:
            worker = subprocess.Popen(
                [
                    *(sys.executable, "-m", "celery", "-A", "ops_history_app", "worker"),
                    *("-l", "INFO", "-P", "solo", "-Q", "ops"),
                    *("-n", f"ops-{uuid.uuid4().hex[:8]}@%h"),
                    *("--without-mingle", "--without-gossip", "--without-heartbeat"),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.directory,
            )
            try:
                yield
            finally:
                worker.terminate()
                try:
                    worker.wait(10)
                except subprocess.TimeoutExpired:
                    worker.kill()
                    worker.wait(10)

    def worker_log(self) -> str:
        return (self.directory / "worker.log").read_text()


@pytest.fixture(params=["redis", pytest.param("postgresql", marks=pytest.mark.postgres)])
def ops(request: pytest.FixtureRequest, tmp_path: Path, redis_prefix: str) -> Iterator[Ops]:
    """The app on the stores of the param: Redis (the broker's), or PostgreSQL."""
    write_app(tmp_path, "ops_history_app", APP)
    env = app_env(
        tmp_path,
        {
            "PYTHONPATH": os.pathsep.join([str(tmp_path), os.getcwd()]),
            "BROKER_URL_FOR_TEST": REDIS_URL,
            "PREFIX_FOR_TEST": redis_prefix,
        },
    )
    sql_prefix = f"test_{uuid.uuid4().hex[:12]}_"
    if request.param == "postgresql":
        env.update(SQL_FOR_TEST=DATABASE_URL, SQL_PREFIX_FOR_TEST=sql_prefix)
    yield Ops(tmp_path, env)
    if request.param == "postgresql":
        engine = create_engine(DATABASE_URL)
        drop_tables(engine, sql_prefix)
        engine.dispose()


def occurrences_before(now: datetime, count: int) -> list[datetime]:
    """The ``count`` latest instants of the job's schedule before ``now``, oldest first."""
    found: list[datetime] = []
    at = now
    for _ in range(count):
        latest = latest_occurrence(SCHEDULE, after=EPOCH, not_after=at)
        assert latest is not None
        found.insert(0, latest)
        at = latest - timedelta(microseconds=1)
    return found


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_after_a_run_now_the_list_tells_one_story_and_the_history_shows_the_run(
    ops: Ops,
) -> None:
    ran = ops.jobs("run-now", JOB)
    listed = ops.jobs("list", "--json")
    table = ops.jobs("list")
    history = ops.jobs("history", JOB)

    assert ran.returncode == 0, ran.stderr
    assert listed.returncode == 0, listed.stderr
    [job] = json.loads(listed.stdout)["jobs"]
    assert job["last_outcome"]["outcome"] == "succeeded"
    assert job["last_handled"] == job["last_outcome"]["scheduled_at"]
    header, row = table.stdout.splitlines()[:2]
    handled = row[header.index("LAST HANDLED") :].split()[0]
    assert row.endswith(f"succeeded {handled}")
    assert history.returncode == 0, history.stderr
    title, columns, line = history.stdout.splitlines()
    assert title == f"{JOB}: cron 30 2 * * * (Europe/Paris); the newest record, newest first"
    assert columns.split("  ")[0] == "SCHEDULED AT (UTC)"
    assert line.startswith(f"{handled}  succeeded  -  ")
    assert line.endswith("off schedule")  # run at the instant asked, not one of the cron's
    [record] = ops.history()
    assert record["on_schedule"] is False
    assert record["scheduled_at"] == handled


def test_run_now_at_replays_an_occurrence_and_refuses_an_instant_not_of_the_schedule(
    ops: Ops,
) -> None:
    now = datetime.now(UTC)
    older, latest = occurrences_before(now, 2)

    replayed = ops.jobs("run-now", JOB, "--at", iso_ms(older))
    off = ops.jobs("run-now", JOB, "--at", iso_ms(latest + timedelta(minutes=1)))
    ahead = ops.jobs("run-now", JOB, "--at", iso_ms(next_occurrence(SCHEDULE, now)))
    naive = ops.jobs("run-now", JOB, "--at", "2026-03-02T01:30:00")
    failed = ops.jobs("run-now", JOB, "--at", iso_ms(latest), FAIL_FOR_TEST="1")

    assert replayed.returncode == 0, replayed.stderr
    assert f"closed {older.isoformat()}" in replayed.stdout
    assert f"(scheduled_at {iso_ms(older)}, replayed, correlation id " in replayed.stdout
    assert off.returncode == 1
    assert one_line(off) == (
        f"ddd_celery: jobs run-now refused: NotAnOccurrenceError: {JOB}: "
        f"{iso_ms(latest + timedelta(minutes=1))} is not an instant of its schedule "
        f"(cron 30 2 * * * (Europe/Paris)); the nearest are {iso_ms(latest)} and "
        f"{iso_ms(next_occurrence(SCHEDULE, latest))}"
    )
    assert ahead.returncode == 1
    assert "is still to come" in one_line(ahead)
    assert naive.returncode == 2
    assert "has no UTC offset" in naive.stderr
    assert failed.returncode == 1
    assert "day 42" not in failed.stderr  # the code and type only, as the log line
    history = ops.history()
    assert [(r["scheduled_at"], r["outcome"], r["error_code"]) for r in history] == [
        (iso_ms(latest), "failed", "UNEXPECTED_ERROR"),
        (iso_ms(older), "succeeded", None),
    ]
    assert all(record["on_schedule"] for record in history)


@pytest.mark.parametrize(
    "at", ["0001-01-01T00:00:00+01:00", "0001-01-01T00:00:00Z", "9999-12-31T23:59:59-01:00"]
)
def test_run_now_at_an_instant_no_date_can_hold_is_a_usage_error_not_a_traceback(
    ops: Ops, at: str
) -> None:
    refused = ops.jobs("run-now", JOB, "--at", at)

    assert refused.returncode == 2, refused.stderr
    assert "Traceback" not in refused.stderr
    assert refused.stderr.splitlines()[-1] == (
        f"Error: Invalid value for '--at': {at!r} is not between 1970-01-01 and 9999-12-31 in UTC"
    )
    assert ops.history() == []


def test_the_history_shows_the_newest_records_up_to_its_limit(ops: Ops) -> None:
    instants = occurrences_before(datetime.now(UTC), 3)
    for at in instants:
        assert ops.jobs("run-now", JOB, "--at", iso_ms(at)).returncode == 0

    shown = ops.jobs("history", JOB, "--limit", "2")
    unknown = ops.jobs("history", "ops.renamed")

    assert shown.returncode == 0, shown.stderr
    rows = shown.stdout.splitlines()[2:]
    assert [row.split()[0] for row in rows] == [iso_ms(instants[2]), iso_ms(instants[1])]
    assert [r["scheduled_at"] for r in ops.history("--limit", "5")] == [
        iso_ms(at) for at in reversed(instants)
    ]
    assert unknown.returncode == 2
    assert f"the jobs are: {JOB}" in unknown.stderr


def test_run_now_on_workers_sends_the_occurrence_under_its_lock_and_a_worker_runs_it(
    ops: Ops,
) -> None:
    [at] = occurrences_before(datetime.now(UTC), 1)

    sent = ops.jobs("run-now", JOB, "--on-workers", "--at", iso_ms(at))
    again = ops.jobs("run-now", JOB, "--on-workers", "--at", iso_ms(at))

    assert sent.returncode == 0, sent.stderr
    first = sent.stdout.splitlines()[0]
    assert first.startswith(f"{JOB}: sent the occurrence of {iso_ms(at)} to the workers: task ")
    assert "queue ops, correlation id " in first
    assert f"lock job:{JOB}:{iso_ms(at)}, expires " in first
    correlation_id = first.split("correlation id ")[1].split(",")[0]
    assert again.returncode == 1
    assert one_line(again) == (
        f"ddd_celery: jobs run-now refused: OccurrenceNotSentError: {JOB}: another beat or "
        f"run-now holds the occurrence of {iso_ms(at)} (its lock job:{JOB}:{iso_ms(at)} is "
        "taken); nothing was sent"
    )
    task_id = first.split("task ")[1].split(",")[0]
    with ops.worker():
        deadline = time.monotonic() + 60
        while not ops.history() and time.monotonic() < deadline:
            time.sleep(0.5)
    [record] = ops.history()
    log = ops.worker_log()
    assert record["outcome"] == "succeeded", log
    assert record["scheduled_at"] == iso_ms(at)
    assert record["correlation_id"] == correlation_id
    assert f"Task {JOB}[{task_id}] received" in log
    assert f"scheduled_at={iso_ms(at)}" in log
    [job] = json.loads(ops.jobs("list", "--json").stdout)["jobs"]
    assert job["last_handled"] == iso_ms(at)  # the checkpoint written with the lock, as beat's


def test_run_now_on_workers_without_an_instant_sends_the_latest_occurrence(ops: Ops) -> None:
    [at] = occurrences_before(datetime.now(UTC), 1)

    sent = ops.jobs("run-now", JOB, "--on-workers")

    assert sent.returncode == 0, sent.stderr
    assert f"sent the occurrence of {iso_ms(at)} to the workers" in sent.stdout


def test_a_paused_job_is_listed_paused_with_who_and_why_until_it_is_resumed(ops: Ops) -> None:
    paused = ops.jobs("pause", JOB, "--reason", "month-end freeze", "--by", "alice")
    table = ops.jobs("list")
    listed = ops.jobs("list", "--json")
    resumed = ops.jobs("resume", JOB)
    after = ops.jobs("list")

    assert paused.returncode == 0, paused.stderr
    assert table.returncode == 0, table.stderr
    header, row, note = table.stdout.splitlines()
    assert row[header.index("ENABLED") :].split()[0] == "paused"
    assert note.startswith(f"{JOB} is paused since ")
    assert note.endswith(f" by alice: month-end freeze (`jobs resume {JOB}` resumes it)")
    document = json.loads(listed.stdout)
    [job] = document["jobs"]
    assert job["paused"]["by"] == "alice"
    assert job["paused"]["reason"] == "month-end freeze"
    assert note.split(" is paused since ")[1].startswith(job["paused"]["at"])
    assert document["stores"]["pauses"]["adapter"] in {"RedisJobPauses", "SqlJobPauses"}
    assert resumed.returncode == 0, resumed.stderr
    header, row = after.stdout.splitlines()
    assert row[header.index("ENABLED") :].split()[0] == "yes"
