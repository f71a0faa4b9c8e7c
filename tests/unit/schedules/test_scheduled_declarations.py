"""@scheduled: what it checks when a module is imported, and how declared jobs are found."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ddd_celery.declarations import (
    DeclarationError,
    IntervalRule,
    JobExecution,
    JobOptions,
    OverlapPolicy,
    ParsedJobSchedule,
    ScheduledJobDeclaration,
    Tenancy,
    collect_scheduled_jobs,
    declaration_of,
    parse_job_schedule,
    scheduled,
)
from ddd_celery.kernel import AbortController


def test_a_declared_job_keeps_its_class_and_carries_its_declaration() -> None:
    @scheduled("billing.send-payment-reminders", cron="0 7 * * 1-5", time_zone="Europe/Paris")
    class SendPaymentRemindersJob:
        def __init__(self, commands: object) -> None:
            self.commands = commands

        def run(self, execution: JobExecution) -> None:
            pass

    declaration = declaration_of(SendPaymentRemindersJob)

    assert declaration == ScheduledJobDeclaration(
        name="billing.send-payment-reminders",
        context="billing",
        schedule=parse_job_schedule({"cron": "0 7 * * 1-5", "time_zone": "Europe/Paris"}),
        job_class=SendPaymentRemindersJob,
    )
    assert SendPaymentRemindersJob.__scheduled_job__ is declaration  # type: ignore[attr-defined]
    assert declaration.schedule.description == "cron 0 7 * * 1-5 (Europe/Paris)"


def test_an_async_run_and_the_options_are_accepted() -> None:
    @scheduled(
        "archive.archive-old-records",
        every="1h",
        overlap="queue",
        timeout_ms=600_000,
        jitter_ms=1_000,
        enabled=False,
        single_instance=False,
        tenancy="per-tenant",
    )
    class ArchiveOldRecordsJob:
        async def run(self, execution: JobExecution) -> None:
            pass

    assert declaration_of(ArchiveOldRecordsJob).schedule == ParsedJobSchedule(
        IntervalRule(3_600_000),
        JobOptions(
            overlap=OverlapPolicy.QUEUE,
            timeout_ms=600_000,
            jitter_ms=1_000,
            enabled=False,
            single_instance=False,
            tenancy=Tenancy.PER_TENANT,
        ),
    )


@pytest.mark.parametrize(
    "name",
    [
        "billing",
        "billing.",
        ".send",
        "Billing.send",
        "billing.Send",
        "billing.send.reminders",
        "billing.send reminders",
        "1billing.send",
        "billing.-send",
        "billing/send",
        "",
        42,
    ],
)
def test_a_name_that_is_not_context_dot_job_in_lower_case_is_refused(name: Any) -> None:
    with pytest.raises(
        DeclarationError, match=r"a job is named '<context>.<job-name>' in lower case"
    ) as refused:
        scheduled(name, every="15m")

    assert refused.value.job == str(name)


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({}, "a schedule needs 'every'"),
        ({"every": "15m", "cron": "0 * * * *"}, "not both"),
        ({"every": 0}, "'every' must be positive"),
        (
            {"every": "15m", "time_zone": "Europe/Paris"},
            "'time_zone' ('Europe/Paris') goes with 'cron' only",
        ),
        ({"time_zone": "Europe/Paris"}, "a schedule needs 'every'"),
        ({"cron": "0 0 30 2 *"}, "never fires"),
        ({"cron": "@daily"}, "nicknames such as @daily are not supported"),
        ({"cron": "0 7 * * *", "time_zone": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
        ({"every": "15m", "overlap": "later"}, "'overlap' must be one of 'skip', 'queue'"),
        ({"every": "15m", "missed": "all"}, "'missed' must be one of 'skip', 'run-once'"),
        ({"every": "15m", "timeout_ms": 0}, "'timeout_ms' must be positive"),
        ({"every": "15m", "jitter_ms": -5}, "'jitter_ms' must be zero or more"),
        ({"every": "15m", "enabled": "no"}, "'enabled' must be True or False"),
        ({"every": "15m", "single_instance": 1}, "'single_instance' must be True or False"),
        ({"every": "15m", "tenancy": "all"}, "'tenancy' must be one of 'global', 'per-tenant'"),
    ],
)
def test_a_bad_schedule_or_option_is_refused_at_declaration_naming_the_job(
    options: dict[str, Any], problem: str
) -> None:
    with pytest.raises(DeclarationError, match=r"^job 'billing\.bad-job': ") as refused:
        scheduled("billing.bad-job", **options)

    assert problem in str(refused.value)


def test_every_with_the_default_zone_is_accepted() -> None:
    @scheduled("billing.every-with-utc", every="15m", time_zone="UTC")
    class Job:
        def run(self, execution: JobExecution) -> None:
            pass

    assert declaration_of(Job).schedule.description == "every 15m"


class NoRun:
    pass


class RunIsNotCallable:
    run = 5


class RunTakesNoExecution:
    def run(self) -> None:
        pass


class RunTakesTwoArguments:
    def run(self, execution: JobExecution, extra: int) -> None:
        pass


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        (NoRun, "NoRun has no method run(self, execution)"),
        (RunIsNotCallable, "RunIsNotCallable has no method run(self, execution)"),
        (RunTakesNoExecution, "RunTakesNoExecution.run must take the execution"),
        (RunTakesTwoArguments, "RunTakesTwoArguments.run must take the execution"),
        (lambda execution: None, "@scheduled decorates a class, not function"),
    ],
)
def test_a_class_without_a_run_that_takes_the_execution_is_refused(
    target: Any, problem: str
) -> None:
    with pytest.raises(DeclarationError, match=r"^job 'billing\.no-run': ") as refused:
        scheduled("billing.no-run", every="15m")(target)

    assert problem in str(refused.value)


def test_a_run_with_optional_parameters_or_a_static_run_is_accepted() -> None:
    @scheduled("billing.optional-run", every="15m")
    class Optional:
        def run(self, execution: JobExecution, dry_run: bool = False) -> None:
            pass

    @scheduled("billing.static-run", every="15m")
    class Static:
        @staticmethod
        def run(execution: JobExecution) -> None:
            pass

    assert declaration_of(Optional).job_class is Optional
    assert declaration_of(Static).job_class is Static


def test_a_name_is_unique_in_the_application() -> None:
    @scheduled("billing.unique-name", every="15m")
    class First:
        def run(self, execution: JobExecution) -> None:
            pass

    class Second:
        def run(self, execution: JobExecution) -> None:
            pass

    with pytest.raises(DeclarationError, match="must be unique in the application") as refused:
        scheduled("billing.unique-name", every="1h")(Second)

    assert refused.value.job == "billing.unique-name"
    assert "First" in str(refused.value)
    assert "Second" in str(refused.value)


def test_an_undeclared_class_has_no_declaration() -> None:
    class NotAJob:
        def run(self, execution: JobExecution) -> None:
            pass

    with pytest.raises(DeclarationError, match="NotAJob is not declared with @scheduled"):
        declaration_of(NotAJob)


@pytest.fixture
def contexts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on sys.path for the packages of a test, whose modules are forgotten after."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]


def write(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


JOB = """
from ddd_celery.declarations import JobExecution, scheduled

@scheduled({name!r}, {schedule})
class Job:
    def run(self, execution: JobExecution) -> None:
        pass
"""


def test_collecting_a_context_imports_its_modules_and_returns_its_jobs_by_name(
    contexts: Path,
) -> None:
    write(
        contexts,
        {
            "shipping_ctx/__init__.py": "",
            "shipping_ctx/application/__init__.py": "",
            "shipping_ctx/application/scheduling/__init__.py": "",
            "shipping_ctx/application/scheduling/purge.py": JOB.format(
                name="shipping.purge", schedule="every='1d'"
            ),
            "shipping_ctx/application/scheduling/dispatch.py": JOB.format(
                name="shipping.dispatch", schedule="cron='*/5 * * * *'"
            ),
            "shipping_ctx/domain.py": "PARCEL = 'parcel'\n",
            "other_ctx/__init__.py": "",
            "other_ctx/tick.py": JOB.format(name="other.tick", schedule="every='1m'"),
        },
    )

    jobs = collect_scheduled_jobs("shipping_ctx")

    assert [job.name for job in jobs] == ["shipping.dispatch", "shipping.purge"]
    assert [job.context for job in jobs] == ["shipping", "shipping"]
    assert "shipping_ctx.domain" in sys.modules
    assert "other_ctx.tick" not in sys.modules
    module = importlib.import_module("shipping_ctx.application.scheduling.purge")
    assert collect_scheduled_jobs(module) == [declaration_of(module.Job)]
    assert [job.name for job in collect_scheduled_jobs("other_ctx", "shipping_ctx.domain")] == [
        "other.tick"
    ]


def test_a_bad_job_fails_the_collection_of_its_context(contexts: Path) -> None:
    write(
        contexts,
        {
            "broken_ctx/__init__.py": "",
            "broken_ctx/late.py": JOB.format(name="broken.late", schedule="cron='0 0 31 2 *'"),
        },
    )

    with pytest.raises(
        DeclarationError, match=r"^job 'broken\.late': cron '0 0 31 2 \*' never fires"
    ):
        collect_scheduled_jobs("broken_ctx")


def test_importing_a_module_again_declares_its_job_again(contexts: Path) -> None:
    write(
        contexts,
        {"again_ctx.py": JOB.format(name="again.job", schedule="every='1m'")},
    )
    module = importlib.import_module("again_ctx")

    reloaded = importlib.reload(module)

    assert collect_scheduled_jobs(reloaded) == [declaration_of(reloaded.Job)]


def test_an_execution_tells_the_run_its_occurrence() -> None:
    signal = AbortController().signal
    due, started = datetime(2026, 3, 2, 6, tzinfo=UTC), datetime(2026, 3, 2, 6, 0, 3, tzinfo=UTC)

    execution = JobExecution(scheduled_at=due, started_at=started, signal=signal)

    assert (execution.scheduled_at, execution.started_at, execution.signal) == (
        due,
        started,
        signal,
    )
    assert (execution.attempt, execution.tenant_id) == (1, None)
    assert JobExecution(due, started, signal, attempt=2, tenant_id="acme").tenant_id == "acme"


def test_an_execution_refuses_naive_instants_and_an_attempt_below_one() -> None:
    signal, aware = AbortController().signal, datetime(2026, 3, 2, 6, tzinfo=UTC)

    with pytest.raises(ValueError, match="scheduled_at must be an aware datetime"):
        JobExecution(datetime(2026, 3, 2, 6), aware, signal)
    with pytest.raises(ValueError, match="started_at must be an aware datetime"):
        JobExecution(aware, datetime(2026, 3, 2, 6), signal)
    with pytest.raises(ValueError, match="attempt counts from 1"):
        JobExecution(aware, aware, signal, attempt=0)


def test_the_time_core_imports_no_celery_redis_or_sqlalchemy() -> None:
    code = (
        "import sys, ddd_celery.declarations, ddd_celery.declarations.cron_evaluator\n"
        "adapters = {'celery', 'kombu', 'redis', 'sqlalchemy'}\n"
        "print(sorted({name.split('.')[0] for name in sys.modules} & adapters))"
    )

    imported = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )

    assert imported.stdout.strip() == "[]"
