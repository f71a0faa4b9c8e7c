"""``celery -A app jobs background stats | dead | find | cancel | retry-dead``."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from background_jobs import EchoJob, Seen
from celery import Celery
from celery.bin.base import CLIContext
from click.testing import CliRunner, Result

from ddd_celery.background import InMemoryJobStore
from ddd_celery.celery import install_jobs
from ddd_celery.celery.background import BackgroundJobs, install_background_jobs
from ddd_celery.celery.cli import jobs
from ddd_celery.kernel import (
    Actor,
    ExecutionContext,
    FixedClock,
    FixedExecutionScope,
    InMemoryLock,
)

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@pytest.fixture
def registry() -> BackgroundJobs:
    app = Celery(f"cli-{uuid.uuid4().hex[:8]}", broker="memory://", set_as_current=False)
    clock = FixedClock(NOW)
    install_jobs(app, jobs=[], lock=InMemoryLock(clock), clock=clock, environ={})
    return install_background_jobs(
        app, jobs=[EchoJob], store=InMemoryJobStore(), providers={Seen: Seen}
    )


def invoke(registry: BackgroundJobs, *args: str) -> Result:
    context = CLIContext(app=registry.app, no_color=True, workdir=None, quiet=False)
    return CliRunner().invoke(jobs, ["background", *args], obj=context)


def enqueue(registry: BackgroundJobs, tenant: str | None = None, **options: Any) -> str:
    scope = FixedExecutionScope()
    context = ExecutionContext("http", Actor("user", "ada"), "corr-1", tenant_id=tenant)
    with scope.open(context):
        return registry.queue(scope=scope).enqueue(EchoJob, {"text": "x"}, **options)


def make_dead(registry: BackgroundJobs, job_id: str) -> None:
    claimed = registry.store.claim_job(job_id, now=NOW, lease_ms=1_000)
    assert claimed is not None
    registry.store.fail(
        claimed.lease, now=NOW, error_code="UNEXPECTED_ERROR", error_type="KeyError", retry_at=None
    )


def lines(result: Result) -> list[list[str]]:
    return [line.split() for line in result.output.splitlines()]


def test_stats_counts_each_queues_jobs_per_status_with_a_total(registry: BackgroundJobs) -> None:
    enqueue(registry)
    make_dead(registry, enqueue(registry))

    result = invoke(registry, "stats")

    assert result.exit_code == 0, result.output
    assert lines(result) == [
        ["QUEUE", "QUEUED", "RUNNING", "FAILED", "DEAD", "SUCCEEDED", "CANCELLED"],
        ["celerybg", "1", "0", "0", "1", "0", "0"],
        ["(all)", "1", "0", "0", "1", "0", "0"],
    ]


def test_find_shows_status_attempts_run_at_progress_last_error_and_tenant(
    registry: BackgroundJobs,
) -> None:
    job_id = enqueue(registry, tenant="clinic-a", delay_ms=60_000)

    result = invoke(registry, "find", job_id)

    assert result.exit_code == 0, result.output
    shown = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in result.output.splitlines())
    assert shown["status"] == "queued"
    assert shown["attempts"] == "0/3"
    assert shown["run at"] == "2026-03-02T09:01:00.000Z"
    assert shown["progress"] == "-"
    assert shown["last error"] == "-"
    assert shown["tenant"] == "clinic-a"
    assert shown["actor"] == "user:ada"


def test_find_of_an_unknown_id_or_another_tenants_job_fails_with_a_clear_message(
    registry: BackgroundJobs,
) -> None:
    job_id = enqueue(registry, tenant="clinic-a")

    unknown = invoke(registry, "find", "no-such-id")
    other = invoke(registry, "find", job_id, "--tenant", "clinic-b")

    assert unknown.exit_code == 1
    assert "no background job has the id 'no-such-id'" in unknown.output
    assert other.exit_code == 1
    assert "no background job of tenant 'clinic-b'" in other.output


def test_cancel_cancels_a_queued_job_answers_so_again_and_says_why_it_cannot_cancel_a_dead_one(
    registry: BackgroundJobs,
) -> None:
    """A repeated cancel answers as the first (a cancel is safe to send twice)."""
    job_id = enqueue(registry)
    dead_id = enqueue(registry)
    make_dead(registry, dead_id)

    first = invoke(registry, "cancel", job_id)
    second = invoke(registry, "cancel", job_id)
    dead = invoke(registry, "cancel", dead_id)

    assert (first.exit_code, first.output) == (0, f"{job_id} cancelled\n")
    assert (second.exit_code, second.output) == (0, f"{job_id} cancelled\n")
    assert dead.exit_code == 1
    assert "is dead: only a queued, failed or running job is cancelled" in dead.output


def test_dead_lists_dead_jobs_and_retry_dead_queues_one_again(registry: BackgroundJobs) -> None:
    job_id = enqueue(registry)
    make_dead(registry, job_id)

    listed = invoke(registry, "dead")
    retried = invoke(registry, "retry-dead", job_id)
    again = invoke(registry, "retry-dead", job_id)
    empty = invoke(registry, "dead")

    assert listed.exit_code == 0, listed.output
    assert lines(listed)[0] == [
        "ID",
        "NAME",
        "ATTEMPTS",
        "LAST",
        "ERROR",
        "FINISHED",
        "AT",
        "TENANT",
    ]
    assert lines(listed)[1] == [
        job_id,
        "celerybg.echo",
        "1/3",
        "UNEXPECTED_ERROR",
        "(KeyError)",
        "2026-03-02T09:00:00.000Z",
        "-",
    ]
    assert retried.exit_code == 0
    assert "queued again" in retried.output
    assert again.exit_code == 1
    assert "is queued: only a dead job is retried" in again.output
    assert empty.output == "no dead job\n"
    found = registry.store.find(job_id, tenant_id=None)
    assert found is not None
    assert (found.status.value, found.attempts) == ("queued", 0)


def test_the_commands_of_an_app_without_background_jobs_say_how_to_install_them() -> None:
    app = Celery("plain", broker="memory://", set_as_current=False)
    install_jobs(app, jobs=[], lock=InMemoryLock(FixedClock(NOW)), environ={})
    context = CLIContext(app=app, no_color=True, workdir=None, quiet=False)

    result = CliRunner().invoke(jobs, ["background", "stats"], obj=context)

    assert result.exit_code == 2
    assert "install_background_jobs" in result.output


FORGED = "ada\nstatus          succeeded\x1b[2K\x1b[1A\u202e"


def test_find_and_dead_print_what_the_store_holds_with_control_characters_escaped(
    registry: BackgroundJobs,
) -> None:
    """A newline or a terminal escape in a stored value would otherwise forge lines."""
    scope = FixedExecutionScope()
    context = ExecutionContext("http", Actor("user", FORGED), "corr\r\n1", tenant_id="t\x1bA")
    with scope.open(context):
        job_id = registry.queue(scope=scope).enqueue(EchoJob, {"text": "x"})
    claimed = registry.store.claim_job(job_id, now=NOW, lease_ms=1_000)
    assert claimed is not None
    registry.store.fail(
        claimed.lease,
        now=NOW,
        error_code="UNEXPECTED_ERROR",
        error_type="E\n\x1b[31m",
        retry_at=None,
    )

    found = invoke(registry, "find", job_id)
    dead = invoke(registry, "dead")

    assert found.exit_code == 0, found.output
    shown = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in found.output.splitlines())
    assert shown["actor"] == "user:ada\\nstatus          succeeded\\x1b[2K\\x1b[1A\\u202e"
    assert shown["correlation id"] == "corr\\r\\n1"
    assert shown["tenant"] == "t\\x1bA"
    assert shown["last error"] == "UNEXPECTED_ERROR (E\\n\\x1b[31m)"
    assert len(found.output.splitlines()) == 13
    assert "\x1b" not in found.output + dead.output
    assert [line.split()[0] for line in dead.output.splitlines()] == ["ID", job_id]
    assert "(E\\n\\x1b[31m)" in dead.output


def test_an_empty_tenant_is_refused_in_one_line_rather_than_read_as_no_tenant(
    registry: BackgroundJobs,
) -> None:
    job_id = enqueue(registry)

    for command in (["find", job_id], ["cancel", job_id], ["retry-dead", job_id], ["dead"]):
        result = invoke(registry, *command, "--tenant", "")

        assert result.exit_code == 2, command
        assert result.output.splitlines() == [
            "--tenant '' names no tenant: give a tenant's id, or leave --tenant out to reach "
            "every job"
        ]
    found = registry.store.find(job_id, tenant_id=None)
    assert found is not None
    assert found.status.value == "queued"


@pytest.mark.parametrize(
    ("setting", "value", "problem"),
    [
        ("ddd_celery_redis_uri", "redis://x", "ddd_celery_redis_uri: not a setting of ddd_celery"),
        ("ddd_celery_grace_ms", "30s", "ddd_celery_grace_ms: Input should be a valid integer"),
        ("ddd_celery_key_prefix", 5, "ddd_celery_key_prefix: Input should be a valid string"),
        ("accept_content", ["json", "pickle"], "accept_content=['json', 'pickle'] allows pickle"),
    ],
)
def test_each_command_refuses_a_configuration_that_cannot_be_used_in_one_line(
    registry: BackgroundJobs, setting: str, value: object, problem: str
) -> None:
    """The store is given to ``install_background_jobs``, but a typo in a setting is no less
    a typo: every process of the app refuses it, the CLI too."""
    job_id = enqueue(registry)
    registry.app.conf.update({setting: value})

    for command in (["stats"], ["dead"], ["find", job_id], ["cancel", job_id]):
        result = invoke(registry, *command)

        assert result.exit_code == 1, command
        [line] = result.output.splitlines()
        assert line.startswith("ddd_celery refuses the configuration: "), line
        assert problem in line
    found = registry.store.find(job_id, tenant_id=None)
    assert found is not None
    assert found.status.value == "queued"
