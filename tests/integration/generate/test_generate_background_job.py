"""``ddd-celery generate background-job``: a payload, a job, its command and a spec that runs."""

from __future__ import annotations

import sys

import pytest

from ddd_celery import DeclarationError, background
from tests.integration.generate.conftest import Project


def test_the_job_its_payload_its_command_and_its_spec_are_written_and_pass(
    project: Project,
) -> None:
    result = project.generate("background-job", "billing", "CompileStatements")

    assert result.code == 0, result.err
    listed = project.python(
        "from ddd_celery import collect_background_jobs\n"
        "[job] = collect_background_jobs('shop')\n"
        "print(job.name, job.queue, job.job_class.__name__, job.payload_type.__name__)\n"
    )
    assert listed.stdout.split() == [
        "billing.compile-statements",
        "billing",
        "CompileStatementsJob",
        "CompileStatementsPayload",
    ]
    specs = project.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
    assert "1 passed" in specs.stdout.splitlines()[-1]


def test_a_background_job_has_no_line_in_the_job_settings(project: Project) -> None:
    project.generate("background-job", "billing", "CompileStatements")

    assert not (project.root / "shop/platform/job_settings.py").exists()


def test_a_second_run_changes_nothing(project: Project) -> None:
    project.generate("background-job", "billing", "CompileStatements")
    before = project.files()

    again = project.generate("background-job", "billing", "CompileStatements")

    assert again.code == 0
    assert project.files() == before


@pytest.mark.parametrize("context", ["Billing", "9billing", "bil.ling"])
def test_a_bad_name_is_refused_with_the_declarations_message(
    project: Project, context: str
) -> None:
    with pytest.raises(DeclarationError) as raised:
        background(f"{context}.compile-statements")
    before = project.files()

    result = project.generate("background-job", context, "CompileStatements")

    assert result.code == 1
    assert result.err == f"ddd-celery: nothing written: {raised.value}\n"
    assert project.files() == before
