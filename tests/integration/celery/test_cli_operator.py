"""The operator's commands: ``list --json``, ``next``, ``run-now --traceback``, and exit codes.

Through ``celery -A <module> jobs ...`` in a process of its own (marked ``processes``), and
through click's runner on the same command with the app loaded, as ``celery -A`` loads it.
"""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from celery.bin.base import CLIContext
from celery_support import AppFactory
from cli_support import app_env, run_jobs, write_app
from click.testing import CliRunner, Result
from probe_jobs import ASYNC, SYNC, AsyncProbeJob, Probe, SyncProbeJob
from services import REDIS_URL

from ddd_celery.celery import install_jobs
from ddd_celery.celery.cli import jobs
from ddd_celery.declarations import JobExecution
from ddd_celery.kernel import FixedClock, InMemoryLock
from ddd_celery.redis import RedisJobLastRuns, connect
from ddd_celery.scheduling.last_runs import InMemoryJobLastRuns
from ddd_celery.scheduling.outcomes import JobRun, Outcome

NOW = datetime(2026, 3, 2, 9, 58, 30, tzinfo=UTC)
PARIS = {"schedule": {"cron": "30 2 * * *", "time_zone": "Europe/Paris"}}


def wire(make_app: AppFactory, probe: Probe, **overrides: Any) -> Celery:
    app = make_app()
    clock = FixedClock(overrides.pop("now", NOW))
    options: dict[str, Any] = {
        "jobs": [SyncProbeJob, AsyncProbeJob],
        "providers": {Probe: lambda: probe},
        "lock": InMemoryLock(clock),
        "clock": clock,
        "environ": {},
    }
    install_jobs(app, **(options | overrides))
    return app


def invoke(app: Celery, *args: str) -> Result:
    context = CLIContext(app=app, no_color=True, workdir=None, quiet=False)
    return CliRunner().invoke(jobs, list(args), obj=context)


def test_list_json_gives_each_job_and_the_stores_as_data(make_app: AppFactory) -> None:
    app = wire(make_app, Probe(), settings={ASYNC: PARIS})

    result = invoke(app, "list", "--json")

    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    assert listed["now"] == "2026-03-02T09:58:30.000Z"
    by_name = {job["name"]: job for job in listed["jobs"]}
    assert by_name[ASYNC] == {
        "name": ASYNC,
        "schedule": "cron 30 2 * * * (Europe/Paris)",
        "time_zone": "Europe/Paris",
        "enabled": True,
        "queue": "probe",
        "next_run_at": "2026-03-03T01:30:00.000Z",
        "next_run_local": "2026-03-03T02:30:00+01:00 CET",
        "paused": "unknown",
        "running": "unknown",
        "last_handled": "unknown",
        "last_outcome": "unknown",
    }
    assert by_name[SYNC]["time_zone"] == "UTC"
    assert listed["stores"]["run_state"] == {
        "adapter": "InMemoryJobRunState",
        "unavailable": None,
    }
    assert listed["stores"]["last_runs"] == {"adapter": None, "unavailable": None}


def test_list_json_says_which_store_is_unavailable_and_exits_one(
    make_app: AppFactory, closed_port_url: str
) -> None:
    app = wire(make_app, Probe(), last_runs=RedisJobLastRuns(connect(closed_port_url)))

    result = invoke(app, "list", "--json")

    assert result.exit_code == 1
    listed = json.loads(result.stdout)
    assert {job["last_outcome"] for job in listed["jobs"]} == {"unavailable"}
    assert listed["stores"]["last_runs"]["adapter"] == "RedisJobLastRuns"
    assert listed["stores"]["last_runs"]["unavailable"].startswith("StoreUnavailableError")
    assert "The last runs (RedisJobLastRuns) could not be asked" in result.stderr


def test_list_of_an_app_without_jobs_says_so_and_how_to_fix_it(make_app: AppFactory) -> None:
    app = make_app()
    install_jobs(app, jobs=[], lock=InMemoryLock(FixedClock(NOW)), environ={})

    result = invoke(app, "list")

    assert result.exit_code == 0
    assert result.stdout.startswith(f"No job is installed on app {app.main!r}.")
    assert "__init__.py" in result.stdout
    assert "@scheduled" in result.stdout
    assert "NAME" not in result.stdout


def test_list_of_an_app_whose_configuration_cannot_run_jobs_says_what_to_set(
    make_app: AppFactory,
) -> None:
    app = make_app(ddd_celery_lock_ttl_ms=-1)
    install_jobs(app, jobs=[SyncProbeJob], providers={Probe: Probe}, environ={})

    result = invoke(app, "list")

    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "ddd_celery refuses the configuration: app.conf cannot be read: "
        "ddd_celery_lock_ttl_ms: Input should be greater than 0"
    ]


def test_each_command_of_an_app_whose_configuration_came_to_allow_pickle_refuses_in_one_line(
    make_app: AppFactory,
) -> None:
    """``install_jobs`` refused pickle; a ``conf.update`` after it turned it on anyway."""
    app = wire(make_app, Probe())
    app.conf.update(accept_content=["json", "pickle"])

    for command in (["list"], ["next", SYNC], ["history", SYNC], ["run-now", SYNC]):
        result = invoke(app, *command)

        assert result.exit_code == 1, command
        assert not isinstance(result.exception, ValueError), result.exception
        [line] = result.stderr.splitlines()
        assert line.startswith("ddd_celery refuses the configuration: Celery setting "), line
        assert "accept_content=['json', 'pickle'] allows pickle" in line


def test_next_shows_a_cron_across_the_spring_forward_in_utc_and_in_its_zone(
    make_app: AppFactory,
) -> None:
    app = wire(make_app, Probe(), settings={ASYNC: PARIS}, now=datetime(2026, 3, 27, tzinfo=UTC))

    result = invoke(app, "next", ASYNC, "--count", "4")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"{ASYNC}: cron 30 2 * * * (Europe/Paris)"
    assert [line.split() for line in lines[2:]] == [
        ["2026-03-27T01:30:00.000Z", "2026-03-27T02:30:00+01:00", "CET"],
        ["2026-03-28T01:30:00.000Z", "2026-03-28T02:30:00+01:00", "CET"],
        # 29 March: 02:30 does not exist in Paris, so no run that day
        ["2026-03-30T00:30:00.000Z", "2026-03-30T02:30:00+02:00", "CEST"],
        ["2026-03-31T00:30:00.000Z", "2026-03-31T02:30:00+02:00", "CEST"],
    ]


def test_next_of_a_disabled_job_says_it_never_runs_by_time(make_app: AppFactory) -> None:
    app = wire(make_app, Probe(), environ={"JOB_PROBE_SYNC_ENABLED": "false"})

    result = invoke(app, "next", SYNC, "--count", "1")

    assert "disabled: never started by time" in result.stdout
    assert "2026-03-02T10:00:00.000Z" in result.stdout


def test_next_of_an_unknown_name_exits_two_naming_the_jobs(make_app: AppFactory) -> None:
    result = invoke(wire(make_app, Probe()), "next", "probe.renamed")

    assert result.exit_code == 2
    assert f"the jobs are: {ASYNC}, {SYNC}" in result.stderr


class LedgerGoneError(RuntimeError):
    pass


def fail(execution: JobExecution) -> None:
    raise LedgerGoneError("the ledger of client 42 is gone")


def test_run_now_of_a_failing_job_shows_the_message_and_traceback_only_when_asked(
    make_app: AppFactory,
) -> None:
    app = wire(make_app, Probe(behaviour=fail))

    quiet = invoke(app, "run-now", SYNC)
    verbose = invoke(app, "run-now", SYNC, "--traceback")

    assert quiet.exit_code == verbose.exit_code == 1
    assert f"{SYNC} failed: UNEXPECTED_ERROR (LedgerGoneError)" in quiet.stderr
    assert "client 42" not in quiet.output
    assert "--traceback shows" in quiet.stderr
    assert "Traceback (most recent call last)" in verbose.stderr
    assert "LedgerGoneError: the ledger of client 42 is gone" in verbose.stderr
    assert "in fail" in verbose.stderr


CLI_APP = '''
"""An app module as a project writes it, for `celery -A ops_app`."""

import os

from celery import Celery

from ddd_celery.celery import install_jobs
from ddd_celery.declarations import scheduled


@scheduled("ops.close-day", cron="30 2 * * *", time_zone="Europe/Paris")
class CloseDayJob:
    def run(self, execution):
        if os.environ.get("FAIL_FOR_TEST"):
            raise RuntimeError("day 42 cannot close")
        print("closed", execution.scheduled_at.isoformat())


app = Celery("ops_app", broker=os.environ["BROKER_URL_FOR_TEST"])
app.conf.ddd_celery_key_prefix = os.environ["PREFIX_FOR_TEST"]
install_jobs(app, jobs=[CloseDayJob])
'''


@pytest.fixture
def celery_jobs(tmp_path: Path, redis_prefix: str) -> Any:
    """Run ``celery -A ops_app jobs <args>`` in a process of its own, on the real Redis."""
    write_app(tmp_path, "ops_app", CLI_APP)

    def run(*args: str, **environ: str) -> subprocess.CompletedProcess[str]:
        env = app_env(
            tmp_path,
            {
                "BROKER_URL_FOR_TEST": environ.pop("broker", REDIS_URL),
                "PREFIX_FOR_TEST": redis_prefix,
                **environ,
            },
        )
        return run_jobs("ops_app", tmp_path, env, *args)

    return run


@pytest.mark.processes
def test_the_celery_command_lists_as_json_and_shows_the_next_instants(celery_jobs: Any) -> None:
    listed = celery_jobs("list", "--json")
    upcoming = celery_jobs("next", "ops.close-day", "--count", "2")

    assert listed.returncode == 0, listed.stderr
    [job] = json.loads(listed.stdout)["jobs"]
    assert job["last_outcome"] is None
    assert json.loads(listed.stdout)["stores"]["last_runs"]["adapter"] == "RedisJobLastRuns"
    assert job["next_run_local"].split("T")[1].startswith("02:30:00+0")
    assert upcoming.returncode == 0, upcoming.stderr
    assert len(upcoming.stdout.splitlines()) == 4


@pytest.mark.processes
def test_the_celery_command_exits_non_zero_when_the_stores_are_down_or_the_job_fails(
    celery_jobs: Any, closed_port_url: str
) -> None:
    down = celery_jobs("list", broker=closed_port_url)
    failed = celery_jobs("run-now", "ops.close-day", "--traceback", FAIL_FOR_TEST="1")
    ran = celery_jobs("run-now", "ops.close-day")
    unknown = celery_jobs("next", "ops.renamed")

    assert down.returncode == 1
    assert "The run state (RedisJobRunState) could not be asked" in down.stderr
    assert "ops.close-day" in down.stdout
    assert failed.returncode == 1
    assert "ops.close-day failed: UNEXPECTED_ERROR (RuntimeError)" in failed.stderr
    assert "RuntimeError: day 42 cannot close" in failed.stderr
    assert ran.returncode == 0, ran.stderr
    assert "closed" in ran.stdout
    assert unknown.returncode == 2


def test_list_prints_a_stored_outcome_with_its_control_characters_escaped(
    make_app: AppFactory,
) -> None:
    """The last runs' store is written by every beat and worker: what it holds is not trusted."""
    last_runs = InMemoryJobLastRuns()
    last_runs.write(
        JobRun(
            job=SYNC,
            scheduled_at=NOW,
            outcome=Outcome.FAILED,
            context="probe",
            error_code="BOOM\nprobe.forged  every 1m  yes\x1b[2K",
            error_type="KeyError",
        )
    )
    app = wire(make_app, Probe(), last_runs=last_runs)

    result = invoke(app, "list")

    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.stdout
    assert not any(line.startswith("probe.forged") for line in result.stdout.splitlines())
    assert "failed BOOM\\nprobe.forged  every 1m  yes\\x1b[2K 2026-03-02" in result.stdout
