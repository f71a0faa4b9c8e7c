"""@scheduled is typed: a decorated class keeps its type, and a bad job is a type error.

mypy --strict runs on a small module of jobs, as a user's checker would see them.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from mypy import api

JOBS = """
from ddd_celery.declarations import JobExecution, scheduled


@scheduled("billing.send-payment-reminders", cron="0 7 * * 1-5", time_zone="Europe/Paris")
class SendPaymentRemindersJob:
    def __init__(self, commands: int) -> None:
        self.commands = commands

    def run(self, execution: JobExecution) -> None: ...


@scheduled("billing.close-month", every="1d", overlap="queue", tenancy="per-tenant")
class CloseMonthJob:
    async def run(self, execution: JobExecution) -> None: ...


reveal_type(SendPaymentRemindersJob)
reveal_type(SendPaymentRemindersJob(commands=1).commands)
reveal_type(CloseMonthJob)


@scheduled("billing.bad-option", every="15m", overlap="later")
class BadOption:
    def run(self, execution: JobExecution) -> None: ...


@scheduled("billing.no-run", every="15m")
class NoRun:
    pass


@scheduled("billing.wrong-run", every="15m")
class WrongRun:
    def run(self, execution: int) -> str:
        return ""
"""


def test_mypy_strict_keeps_the_decorated_class_and_refuses_a_bad_job(tmp_path: Path) -> None:
    module = tmp_path / "jobs.py"
    module.write_text(textwrap.dedent(JOBS))
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\n")

    report, errors, _ = api.run(
        [
            str(module),
            "--strict",
            "--config-file",
            str(config),
            "--cache-dir",
            str(tmp_path / "cache"),
        ]
    )

    lines = [line.split(": ", 1)[1] for line in report.splitlines() if line.startswith(str(module))]
    assert errors == ""
    assert lines[:3] == [
        'note: Revealed type is "def (commands: int) -> jobs.SendPaymentRemindersJob"',
        'note: Revealed type is "int"',
        'note: Revealed type is "def () -> jobs.CloseMonthJob"',
    ]
    assert len(lines) == 6
    assert lines[3].startswith('error: Argument "overlap" to "scheduled"')
    assert lines[3].endswith("[arg-type]")
    assert "type[NoRun]" in lines[4]
    assert "type[WrongRun]" in lines[5]
    assert lines[4].endswith("[type-var]")
    assert lines[5].endswith("[type-var]")
