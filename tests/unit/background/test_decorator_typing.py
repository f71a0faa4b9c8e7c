"""@background is typed: a decorated class keeps its type, and a bad job is a type error.

mypy --strict runs on a small module of jobs, as a user's checker would see them; the decorator
is imported from the top level, where it shares its name with the package ddd_celery.background.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from mypy import api

JOBS = """
from pydantic import BaseModel

from ddd_celery import BackgroundJobExecution, background
from ddd_celery.background import StoredJobQueue


class CompileStatementsPayload(BaseModel):
    month: str


@background("billing.compile-statements", max_attempts=3, timeout_ms=60_000)
class CompileStatementsJob:
    def __init__(self, statements: int) -> None:
        self.statements = statements

    def run(self, payload: CompileStatementsPayload, execution: BackgroundJobExecution) -> None:
        ...


@background("billing.archive", queue="slow")
class ArchiveJob:
    async def run(self, payload: dict[str, str], execution: BackgroundJobExecution) -> None: ...


reveal_type(CompileStatementsJob)
reveal_type(CompileStatementsJob(statements=1).statements)
reveal_type(ArchiveJob)
reveal_type(StoredJobQueue.enqueue)


@background("billing.bad-option", max_attempts="3")
class BadOption:
    def run(self, payload: object, execution: BackgroundJobExecution) -> None: ...


@background("billing.no-run")
class NoRun:
    pass
"""


def test_mypy_strict_keeps_the_decorated_class_and_refuses_a_bad_job(tmp_path: Path) -> None:
    module = tmp_path / "jobs.py"
    module.write_text(textwrap.dedent(JOBS))
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\nplugins = pydantic.mypy\n")

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
        'note: Revealed type is "def (statements: int) -> jobs.CompileStatementsJob"',
        'note: Revealed type is "int"',
        'note: Revealed type is "def () -> jobs.ArchiveJob"',
    ]
    assert lines[3].startswith('note: Revealed type is "def (self: ddd_celery.background.queue')
    assert len(lines) == 6
    assert lines[4].startswith('error: Argument "max_attempts" to "background"')
    assert "type[NoRun]" in lines[5]
    assert lines[5].endswith("[type-var]")
