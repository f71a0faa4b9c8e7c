"""``celery -A app jobs list`` and ``celery -A app jobs run-now <name>``."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from celery.bin.base import CLIContext
from celery_support import AppFactory, Runs
from cli_support import app_env, run_jobs, write_app
from click.testing import CliRunner, Result
from probe_jobs import ASYNC, SYNC, AsyncProbeJob, Probe, SyncProbeJob
from redis import Redis
from services import REDIS_URL

from ddd_celery.celery import CeleryJobs, OccurrenceMessage, install_jobs
from ddd_celery.celery.cli import jobs
from ddd_celery.celery.tasks import run_message
from ddd_celery.declarations import JobExecution
from ddd_celery.kernel import DomainError, FixedClock, InMemoryLock
from ddd_celery.redis import RedisJobCheckpoints, RedisJobLastRuns, RedisJobRunState, connect
from ddd_celery.scheduling.last_runs import InMemoryJobLastRuns, JobLastRuns
from ddd_celery.scheduling.outcomes import JobRun, Outcome
from ddd_celery.sql import SqlJobLastRuns, sqlite_engine

NOW = datetime(2026, 3, 2, 9, 58, 30, tzinfo=UTC)
RAN_AT = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def wire(make_app: AppFactory, probe: Probe, **overrides: Any) -> tuple[Any, CeleryJobs]:
    app = make_app()
    clock = FixedClock(NOW)
    options: dict[str, Any] = {
        "jobs": [SyncProbeJob, AsyncProbeJob],
        "providers": {Probe: lambda: probe},
        "lock": InMemoryLock(clock),
        "clock": clock,
        "on_run": Runs(),
        "environ": {},
    }
    return app, install_jobs(app, **(options | overrides))


def invoke(app: Any, *args: str) -> Result:
    """Run the ``jobs`` command as ``celery -A app`` would, with the app already loaded."""
    context = CLIContext(app=app, no_color=True, workdir=None, quiet=False)
    return CliRunner().invoke(jobs, list(args), obj=context)


def row_of(output: str, name: str) -> list[str]:
    [line] = [line for line in output.splitlines() if line.startswith(name + " ")]
    return [cell for cell in line.split("  ") if cell.strip()]


def test_list_shows_each_jobs_schedule_enabled_queue_and_next_run(make_app: AppFactory) -> None:
    app, _ = wire(make_app, Probe(), settings={ASYNC: {"schedule": {"cron": "0 7 * * 1-5"}}})

    result = invoke(app, "list")

    assert result.exit_code == 0, result.output
    assert [c.strip() for c in row_of(result.output, "NAME")] == [
        "NAME",
        "SCHEDULE",
        "ENABLED",
        "QUEUE",
        "NEXT RUN (UTC)",
        "NEXT RUN (JOB'S ZONE)",
        "RUNNING",
        "LAST HANDLED",
        "LAST OUTCOME",
    ]
    assert [c.strip() for c in row_of(result.output, SYNC)][:6] == [
        SYNC,
        "every 1h",
        "yes",
        "probe",
        "2026-03-02T10:00:00.000Z",
        "2026-03-02T10:00:00+00:00 UTC",
    ]
    assert [c.strip() for c in row_of(result.output, ASYNC)][:6] == [
        ASYNC,
        "cron 0 7 * * 1-5 (UTC)",
        "yes",
        "probe",
        "2026-03-03T07:00:00.000Z",
        "2026-03-03T07:00:00+00:00 UTC",
    ]


def test_list_shows_each_next_run_on_the_clocks_of_the_jobs_zone_too(
    make_app: AppFactory,
) -> None:
    paris = {"schedule": {"cron": "0 7 * * 1-5", "time_zone": "Europe/Paris"}}
    app, _ = wire(make_app, Probe(), settings={ASYNC: paris})

    result = invoke(app, "list")

    assert [c.strip() for c in row_of(result.output, ASYNC)][4:6] == [
        "2026-03-03T06:00:00.000Z",
        "2026-03-03T07:00:00+01:00 CET",
    ]


def test_list_shows_a_disabled_job_as_never_run_by_time(make_app: AppFactory) -> None:
    app, _ = wire(make_app, Probe(), environ={"JOB_PROBE_SYNC_ENABLED": "false"})

    result = invoke(app, "list")

    assert [c.strip() for c in row_of(result.output, SYNC)][2:6] == [
        "no",
        "probe",
        "never by time",
        "never by time",
    ]


def test_list_says_what_a_process_cannot_know_without_shared_stores(
    make_app: AppFactory,
) -> None:
    app, _ = wire(make_app, Probe())

    result = invoke(app, "list")

    assert [c.strip() for c in row_of(result.output, SYNC)][6:] == ["unknown"] * 3
    assert "RedisJobRunState" in result.output
    assert "RedisJobCheckpoints" in result.output
    assert "RedisJobLastRuns" in result.output


def test_list_shows_the_run_in_progress_the_last_handled_and_the_last_outcome_from_redis(
    make_app: AppFactory, redis_client: Redis, redis_prefix: str
) -> None:
    run_state = RedisJobRunState(redis_client, prefix=f"{redis_prefix}run:")
    checkpoints = RedisJobCheckpoints(redis_client, prefix=f"{redis_prefix}checkpoint:")
    last_runs = RedisJobLastRuns(redis_client, prefix=f"{redis_prefix}last-run:")
    app, _ = wire(
        make_app, Probe(), run_state=run_state, checkpoints=checkpoints, last_runs=last_runs
    )
    run_state.claim(SYNC, RAN_AT, queue=False, ttl_ms=60_000)
    checkpoints.write(SYNC, RAN_AT)
    last_runs.write(
        JobRun(
            job=SYNC,
            scheduled_at=RAN_AT - timedelta(hours=1),
            outcome=Outcome.FAILED,
            context="probe",
            error_code="JOB_TIMEOUT",
            error_type="JobTimeoutError",
        )
    )

    result = invoke(app, "list")

    assert [c.strip() for c in row_of(result.output, SYNC)][6:] == [
        "2026-03-02T09:00:00.000Z",
        "2026-03-02T09:00:00.000Z",
        "failed JOB_TIMEOUT 2026-03-02T08:00:00.000Z",
    ]
    assert [c.strip() for c in row_of(result.output, ASYNC)][6:] == ["no", "never", "none yet"]
    assert "install_jobs(" not in result.output


def a_store(kind: str, request: pytest.FixtureRequest) -> JobLastRuns:
    """A new adapter on the test's store, as a process of its own would build it."""
    if kind == "redis":
        prefix: str = request.getfixturevalue("redis_prefix")
        client = connect(REDIS_URL)
        request.addfinalizer(client.close)
        return RedisJobLastRuns(client, prefix=f"{prefix}last-run:")
    directory: Path = request.getfixturevalue("tmp_path")
    engine = sqlite_engine(directory / "jobs.sqlite3")
    request.addfinalizer(engine.dispose)
    return SqlJobLastRuns(engine)


@pytest.mark.parametrize("kind", ["redis", "sqlite"])
def test_list_shows_the_outcome_a_worker_recorded_on_the_shared_store(
    make_app: AppFactory, request: pytest.FixtureRequest, kind: str
) -> None:
    def refuse(execution: JobExecution) -> None:
        if execution.scheduled_at == RAN_AT:
            raise DomainError("NOTHING_DUE", "nothing is due for client 42")

    worker, _ = wire(make_app, Probe(behaviour=refuse), last_runs=a_store(kind, request))
    run_message(worker, SYNC, (), OccurrenceMessage(RAN_AT, "corr-1").to_kwargs())
    earlier = RAN_AT - timedelta(hours=1)
    run_message(worker, ASYNC, (), OccurrenceMessage(earlier, "corr-2").to_kwargs())
    cli, _ = wire(make_app, Probe(), last_runs=a_store(kind, request))

    result = invoke(cli, "list")

    assert result.exit_code == 0, result.output
    assert [c.strip() for c in row_of(result.output, SYNC)][8:] == [
        "failed NOTHING_DUE 2026-03-02T09:00:00.000Z"
    ]
    assert [c.strip() for c in row_of(result.output, ASYNC)][8:] == [
        "succeeded 2026-03-02T08:00:00.000Z"
    ]
    assert "client 42" not in result.output


def test_list_shows_the_outcome_of_a_run_now_of_the_command(make_app: AppFactory) -> None:
    app, _ = wire(make_app, Probe(), last_runs=InMemoryJobLastRuns())

    invoke(app, "run-now", SYNC)
    result = invoke(app, "list")

    assert [c.strip() for c in row_of(result.output, SYNC)][8:] == [
        "succeeded 2026-03-02T09:58:30.000Z"
    ]


def test_list_shows_a_beat_schedule_entry_on_its_own_task_with_no_run_tracked(
    make_app: AppFactory,
) -> None:
    app = make_app(beat_schedule={"flush": {"task": "cache.flush", "schedule": 900}})
    clock = FixedClock(NOW)
    install_jobs(
        app,
        jobs=[],
        lock=InMemoryLock(clock),
        clock=clock,
        environ={},
        last_runs=InMemoryJobLastRuns(),
    )

    result = invoke(app, "list")

    assert [c.strip() for c in row_of(result.output, "beat.flush")][3:] == [
        "(task's own)",
        "2026-03-02T10:00:00.000Z",
        "2026-03-02T10:00:00+00:00 UTC",
        "untracked",
        "unknown",
        "untracked",
    ]


def test_list_still_lists_when_the_stores_cannot_be_asked_and_says_which_and_why(
    make_app: AppFactory, closed_port_url: str
) -> None:
    down = connect(closed_port_url)
    app, _ = wire(
        make_app,
        Probe(),
        run_state=RedisJobRunState(down),
        checkpoints=RedisJobCheckpoints(down),
        last_runs=RedisJobLastRuns(down),
    )

    result = invoke(app, "list")

    assert result.exit_code == 1, result.output
    assert [c.strip() for c in row_of(result.stdout, SYNC)][6:] == ["unavailable"] * 3
    errors = result.stderr.splitlines()
    assert [line.split(":")[0] for line in errors] == [
        "The run state (RedisJobRunState) could not be asked",
        "The checkpoints (RedisJobCheckpoints) could not be asked",
        "The last runs (RedisJobLastRuns) could not be asked",
    ]
    assert all("StoreUnavailableError: Redis could not be asked" in line for line in errors)
    assert all("caused by ConnectionError: Error 111" in line for line in errors)


def test_run_now_runs_the_job_here_and_says_it_succeeded(make_app: AppFactory) -> None:
    probe = Probe()
    app, _ = wire(make_app, probe)

    result = invoke(app, "run-now", SYNC)

    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"{SYNC} succeeded")
    assert "scheduled_at 2026-03-02T09:58:30.000Z" in result.stdout
    assert len(probe.seen) == 1


def test_run_now_of_a_failing_job_exits_non_zero_with_its_code(make_app: AppFactory) -> None:
    def refuse(execution: JobExecution) -> None:
        raise DomainError("NOTHING_DUE", "nothing is due for client 42")

    app, _ = wire(make_app, Probe(behaviour=refuse))

    result = invoke(app, "run-now", SYNC)

    assert result.exit_code == 1
    assert f"{SYNC} failed: NOTHING_DUE (DomainError)" in result.stderr
    assert "client 42" not in result.output


def test_run_now_of_an_unknown_name_exits_non_zero_naming_the_jobs(make_app: AppFactory) -> None:
    app, _ = wire(make_app, Probe())

    result = invoke(app, "run-now", "probe.renamed")

    assert result.exit_code == 2
    assert "no job is named 'probe.renamed'" in result.stderr
    assert f"the jobs are: {ASYNC}, {SYNC}" in result.stderr


def test_the_commands_on_an_app_without_jobs_say_to_install_them(make_app: AppFactory) -> None:
    result = invoke(make_app(), "list")

    assert result.exit_code == 2
    assert "install_jobs" in result.stderr


CLI_APP = '''
"""An app module as a project writes it, for `celery -A cli_app`."""

import os

from celery import Celery

from ddd_celery.celery import install_jobs
from ddd_celery.declarations import scheduled
from ddd_celery.kernel import InMemoryLock, SystemClock


@scheduled("cli.say-hello", every="15m")
class SayHelloJob:
    def run(self, execution):
        print("hello from", execution.scheduled_at.isoformat())


app = Celery("cli_app", broker=os.environ["BROKER_URL_FOR_TEST"])
app.conf.ddd_celery_redis_url = None  # the stores in this process's memory, the lock given
install_jobs(app, jobs=[SayHelloJob], lock=InMemoryLock(SystemClock()))
'''


def celery_command(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    write_app(tmp_path, "cli_app", CLI_APP)
    return run_jobs(
        "cli_app", tmp_path, app_env(tmp_path, {"BROKER_URL_FOR_TEST": REDIS_URL}), *args
    )


@pytest.mark.processes
def test_the_celery_command_lists_the_jobs_of_the_app_it_loads(tmp_path: Path) -> None:
    listed = celery_command(tmp_path, "list")

    assert listed.returncode == 0, listed.stderr
    assert "cli.say-hello" in listed.stdout
    assert "every 15m" in listed.stdout


@pytest.mark.processes
def test_the_celery_command_runs_a_job_now_and_refuses_an_unknown_one(tmp_path: Path) -> None:
    ran = celery_command(tmp_path, "run-now", "cli.say-hello")
    unknown = celery_command(tmp_path, "run-now", "cli.renamed")

    assert ran.returncode == 0, ran.stderr
    assert "hello from" in ran.stdout
    assert "cli.say-hello succeeded" in ran.stdout
    assert unknown.returncode == 2
    assert "no job is named 'cli.renamed'" in unknown.stderr
