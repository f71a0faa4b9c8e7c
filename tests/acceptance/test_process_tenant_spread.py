"""A spread per-tenant job on real processes: ``celery beat`` and a prefork worker of two.

Each tenant of an occurrence runs once, in a task of its own, on either pool process; a tenant
that fails stops none of the others; the occurrence has one outcome, recorded once every tenant
had its run, failed with the first failing tenant in the directory's order (not the first in
time). A pool process killed in the middle of a tenant run still lets the occurrence end.
"""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from typing import Any

import pytest
from process_support import AppProcess, Deployment, wait_until

pytestmark = pytest.mark.processes

JOB = "tenants.close-month"
TENANTS = [f"t-{number:02d}" for number in range(30)]


def _spawn(deploy: Deployment, name: str, args: list[str], env: dict[str, str]) -> AppProcess:
    process = AppProcess("tenants_app", name, args, env, deploy.directory / f"{name}.log")
    deploy.processes.append(process)
    return process


def _start(deploy: Deployment, **more: str) -> None:
    env = deploy.environment({JOB: {"enabled": True}})
    env.update(more)
    worker = ["worker", "-l", "INFO", "-P", "prefork", "-c", "2", "-Q", deploy.queue]
    quiet = ["--without-mingle", "--without-gossip", "--without-heartbeat"]
    _spawn(deploy, "worker", [*worker, "-n", f"tenants-{deploy.prefix[-9:-1]}@%h", *quiet], env)
    _spawn(deploy, "beat", ["beat", "-l", "INFO"], env)


def _lines(deploy: Deployment, key: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in deploy.records.lrange(f"{deploy.prefix}{key}", 0, -1)]


def _ran_outcomes(deploy: Deployment) -> list[dict[str, Any]]:
    """The outcomes of occurrences that ran (beat records the ones it skipped meanwhile)."""
    return [
        line for line in _lines(deploy, "outcomes") if line["outcome"] in ("succeeded", "failed")
    ]


def _first_outcome(deploy: Deployment) -> dict[str, Any]:
    wait_until(lambda: bool(_ran_outcomes(deploy)), 60, "an outcome of the occurrence")
    return _ran_outcomes(deploy)[0]


def test_every_tenant_runs_once_over_the_pool_and_the_occurrence_has_one_outcome(
    deploy: Deployment,
) -> None:
    _start(deploy, DDD_TEST_FAIL="slow:t-03,t-21")

    first = _first_outcome(deploy)

    at = first["scheduled_at"]
    ran = [line for line in _lines(deploy, "ran") if line["scheduled_at"] == at]
    assert Counter(line["tenant"] for line in ran) == Counter(TENANTS), deploy.logs()
    assert len({line["pid"] for line in ran}) == 2, "the tenants ran on both pool processes"
    outcomes = [line for line in _lines(deploy, "outcomes") if line["scheduled_at"] == at]
    assert len(outcomes) == 1
    assert first["outcome"] == "failed"
    # t-21 failed first in time; t-03, a second later, comes first in the directory
    assert (first["tenant_id"], first["error_code"], first["error_type"]) == (
        "t-03",
        "UNEXPECTED_ERROR",
        "ValueError",
    )
    assert first["duration_ms"] >= 1000
    worker = next(process for process in deploy.processes if process.name == "worker")
    failed_lines = [
        line for line in worker.output().splitlines() if "Scheduled job tenant run failed" in line
    ]
    assert any("t-03" in line for line in failed_lines), worker.output()[-4000:]
    assert any("t-21" in line for line in failed_lines), worker.output()[-4000:]


def test_a_pool_process_killed_in_a_tenant_run_still_ends_the_occurrence(
    deploy: Deployment,
) -> None:
    _start(deploy, DDD_TEST_HANG="t-05")
    wait_until(lambda: deploy.records.llen(f"{deploy.prefix}hanging") > 0, 60, "the hanging tenant")
    os.kill(int(deploy.records.lindex(f"{deploy.prefix}hanging", 0)), signal.SIGKILL)

    first = _first_outcome(deploy)

    at = first["scheduled_at"]
    ran = {line["tenant"] for line in _lines(deploy, "ran") if line["scheduled_at"] == at}
    assert ran == set(TENANTS), deploy.logs()
    assert (first["outcome"], first["tenant_id"], first["error_type"]) == (
        "failed",
        "t-05",
        "WorkerLostError",
    )
    assert len([line for line in _lines(deploy, "outcomes") if line["scheduled_at"] == at]) == 1
