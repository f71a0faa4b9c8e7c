"""``ddd-celery generate job``: a job, its command, its spec and its switch, that run as written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ddd_celery import DeclarationError, scheduled
from tests.integration.generate.conftest import Project

REMINDERS = ("job", "notifications", "SendReminders", "--cron", "0 7 * * *")
PARIS = ("--time-zone", "Europe/Paris", "--command", "SendReminders")


def test_the_job_its_command_its_spec_and_its_settings_line_are_written(
    project: Project,
) -> None:
    result = project.generate(*REMINDERS, *PARIS)

    assert result.code == 0, result.err
    created = {line.split()[1] for line in result.out.splitlines() if line.split()[0] == "created"}
    assert created == {
        "shop/notifications/__init__.py",
        "shop/notifications/application/__init__.py",
        "shop/notifications/application/commands/__init__.py",
        "shop/notifications/application/commands/send_reminders.py",
        "shop/notifications/application/scheduling/__init__.py",
        "shop/notifications/application/scheduling/send_reminders_job.py",
        "shop/platform/__init__.py",
        "shop/platform/job_settings.py",
        "tests/scheduling/test_notifications_send_reminders_job.py",
    }
    assert (
        '@scheduled("notifications.send-reminders", cron="0 7 * * *", time_zone="Europe/Paris")'
        in project.read("shop/notifications/application/scheduling/send_reminders_job.py")
    )


def test_what_is_written_imports_and_declares_the_job_as_asked(project: Project) -> None:
    project.generate(*REMINDERS, *PARIS)
    project.generate("job", "billing", "CloseMonthJob", "--every", "15m")

    done = project.python(
        "from ddd_celery import collect_scheduled_jobs, describe_job_schedule\n"
        "for job in collect_scheduled_jobs('shop'):\n"
        "    print(job.name, job.job_class.__name__, job.schedule.rule.description)\n"
    )

    assert done.stdout.splitlines() == [
        "billing.close-month CloseMonthJob every 15m",
        "notifications.send-reminders SendRemindersJob cron 0 7 * * * (Europe/Paris)",
    ]


def test_the_settings_switch_each_job_off_by_its_variable(project: Project) -> None:
    project.generate(*REMINDERS, *PARIS)
    project.generate("job", "billing", "CloseMonth", "--every", "900000ms")

    done = project.python(
        "import os\n"
        "from shop.platform.job_settings import JOBS, job_settings\n"
        "print(JOBS)\n"
        "print(job_settings(os.environ))\n",
        JOB_BILLING_CLOSE_MONTH_ENABLED="false",
    )

    assert done.stdout.splitlines() == [
        "['notifications.send-reminders', 'billing.close-month']",
        "{'billing.close-month': JobSettings(enabled=False, schedule=None, overlap=None, "
        "missed=None, timeout_ms=None, jitter_ms=None, single_instance=None, tenancy=None, "
        "tenant_runs=None)}",
    ]


def test_the_generated_specs_pass_on_the_manual_scheduler(project: Project) -> None:
    project.generate(*REMINDERS, *PARIS)
    project.generate("job", "billing", "CloseMonth", "--every", "1d")

    done = project.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])

    assert "2 passed" in done.stdout.splitlines()[-1]


def test_a_second_run_changes_nothing_and_says_so(project: Project) -> None:
    project.generate(*REMINDERS, *PARIS)
    project.generate("job", "billing", "CloseMonth", "--every", "15m")
    before = project.files()

    again = project.generate(*REMINDERS, *PARIS)

    assert again.code == 0, again.err
    assert project.files() == before
    assert {line.split()[0] for line in again.out.splitlines()} == {"unchanged"}
    assert (
        project.read("shop/platform/job_settings.py").count('"notifications.send-reminders"') == 1
    )


@pytest.mark.parametrize(
    ("arguments", "declared"),
    [
        (
            ("Notifications", "SendReminders", "--every", "15m"),
            {"name": "Notifications.send-reminders", "every": "15m"},
        ),
        (("notifications", "SendReminders", "--every", "0m"), {"every": "0m"}),
        (("notifications", "SendReminders", "--every", "15"), {"every": "15"}),
        (("notifications", "SendReminders", "--cron", "0 0 30 2 *"), {"cron": "0 0 30 2 *"}),
        (("notifications", "SendReminders", "--cron", "@daily"), {"cron": "@daily"}),
        (
            (
                "notifications",
                "SendReminders",
                "--cron",
                "0 7 * * *",
                "--time-zone",
                "Mars/Olympus",
            ),
            {"cron": "0 7 * * *", "time_zone": "Mars/Olympus"},
        ),
        (("notifications", "SendReminders"), {}),
        (
            ("notifications", "SendReminders", "--every", "15m", "--cron", "0 7 * * *"),
            {"every": "15m", "cron": "0 7 * * *"},
        ),
        (
            ("notifications", "SendReminders", "--every", "15m", "--time-zone", "Europe/Paris"),
            {"every": "15m", "time_zone": "Europe/Paris"},
        ),
    ],
)
def test_a_bad_name_or_schedule_is_refused_with_the_declarations_message_and_nothing_written(
    project: Project, arguments: tuple[str, ...], declared: dict[str, object]
) -> None:
    name = str(declared.pop("name", "notifications.send-reminders"))
    with pytest.raises(DeclarationError) as raised:
        scheduled(name, **declared)  # type: ignore[arg-type]
    before = project.files()

    result = project.generate("job", *arguments)

    assert result.code == 1
    assert result.err == f"ddd-celery: nothing written: {raised.value}\n"
    assert project.files() == before


def test_a_class_name_that_is_not_cap_words_is_refused(project: Project) -> None:
    result = project.generate("job", "billing", "close_month", "--every", "15m")

    assert result.code == 1
    assert "the job class is written in CapWords, such as SendReminders" in result.err


def test_a_context_that_cannot_be_a_package_is_refused_naming_the_job(project: Project) -> None:
    result = project.generate("job", "patient-records", "Archive", "--every", "1d")

    assert result.code == 1
    assert "job 'patient-records.archive': the context 'patient-records' is a Python package" in (
        result.err
    )


def test_a_file_that_differs_is_never_overwritten_and_nothing_else_is_written(
    project: Project,
) -> None:
    project.write("tests/scheduling/test_billing_close_month_job.py", "# mine\n")
    before = project.files()

    result = project.generate("job", "billing", "CloseMonth", "--every", "15m")

    assert result.code == 1
    assert (
        "tests/scheduling/test_billing_close_month_job.py: test_billing_close_month_job.py exists"
        in result.err
    )
    assert "never overwrites a file" in result.err
    assert project.files() == before


def test_a_command_the_project_has_is_used_as_it_is(project: Project) -> None:
    mine = (
        "from dataclasses import dataclass\nfrom datetime import datetime\n\n\n"
        "@dataclass\nclass CloseMonth:\n    actor: object\n    as_of: datetime\n"
    )
    project.write("shop/billing/application/commands/close_month.py", mine)

    result = project.generate("job", "billing", "CloseMonth", "--every", "15m")

    assert result.code == 0, result.err
    assert project.read("shop/billing/application/commands/close_month.py") == mine


def test_the_settings_a_project_edited_keep_their_text_and_gain_one_line(project: Project) -> None:
    mine = (
        '"""Ours."""\n\nfrom ddd_celery.scheduling.settings import job_settings_from_env\n\n'
        'JOBS = ["billing.close-month"]  # kept\n\n\n'
        "def job_settings(environ):\n    return job_settings_from_env(environ, JOBS)\n"
    )
    project.write("shop/platform/job_settings.py", mine)

    project.generate(*REMINDERS, *PARIS)
    project.generate(*REMINDERS, *PARIS)

    assert project.read("shop/platform/job_settings.py") == mine.replace(
        'JOBS = ["billing.close-month"]  # kept',
        'JOBS = [\n    "billing.close-month",\n'
        '    "notifications.send-reminders",  # JOB_NOTIFICATIONS_SEND_REMINDERS_ENABLED=false'
        " switches it off\n]  # kept",
    )


def test_settings_without_a_jobs_list_are_refused_and_nothing_is_written(project: Project) -> None:
    project.write("shop/platform/job_settings.py", "SETTINGS = {}\n")
    before = project.files()

    result = project.generate(*REMINDERS, *PARIS)

    assert result.code == 1
    assert "shop/platform/job_settings.py: has no `JOBS = [...]` list" in result.err
    assert project.files() == before


def test_a_scheduled_job_cannot_take_the_name_of_a_background_job(project: Project) -> None:
    project.generate("background-job", "billing", "CloseMonth")

    result = project.generate("job", "billing", "CloseMonth", "--every", "15m")

    assert result.code == 1
    assert "job 'billing.close-month': the name must be unique in the application" in result.err


def test_the_top_package_is_named_when_the_root_holds_several(project: Project) -> None:
    (project.root / "other").mkdir()
    (project.root / "other" / "__init__.py").write_text("")

    refused = project.generate("job", "billing", "CloseMonth", "--every", "15m")
    named = project.generate("job", "billing", "CloseMonth", "--every", "15m", "--package", "other")

    assert refused.code == 1
    assert (
        "name the application's top package with --package (packages at the root: other, shop)"
        in refused.err
    )
    assert named.code == 0, named.err
    assert (project.root / "other/billing/application/scheduling/close_month_job.py").is_file()


def test_a_src_layout_is_followed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "src" / "shop").mkdir(parents=True)
    (tmp_path / "src" / "shop" / "__init__.py").write_text("")
    project = Project(tmp_path, capsys)

    result = project.generate("job", "billing", "CloseMonth", "--every", "15m")

    assert result.code == 0, result.err
    assert (tmp_path / "src/shop/billing/application/scheduling/close_month_job.py").is_file()
    assert (tmp_path / "tests/scheduling/test_billing_close_month_job.py").is_file()


def test_what_is_written_passes_ruff_at_its_defaults(project: Project) -> None:
    project.generate(*REMINDERS, *PARIS)
    project.generate("background-job", "billing", "CompileStatements")
    project.generate("worker")
    ruff = Path(sys.executable).with_name("ruff")

    project.run([str(ruff), "check", "--isolated", "."])
    project.run([str(ruff), "format", "--isolated", "--check", "."])


def test_what_is_written_passes_mypy_strict(project: Project) -> None:
    project.generate(*REMINDERS, *PARIS)
    project.generate("background-job", "billing", "CompileStatements")
    project.generate("worker")
    root = Path(__file__).parents[3]

    done = project.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--ignore-missing-imports",  # celery ships no types
            "--cache-dir",
            str(project.root / ".mypy_cache"),
            "shop",
            "tests",
        ],
        MYPYPATH=str(root),  # the package is installed editable, which mypy cannot follow
    )

    assert done.stdout.startswith("Success: no issues found")


def test_the_console_script_runs_the_generator_without_importing_celery(project: Project) -> None:
    script = Path(sys.executable).with_name("ddd-celery")
    done = project.run([str(script), "generate", *REMINDERS, *PARIS])
    assert "created  shop/notifications/application/scheduling/send_reminders_job.py" in done.stdout

    imported = project.python(
        "import sys\n"
        "from ddd_celery.generate.cli import main\n"
        "main(['generate', 'job', 'billing', 'CloseMonth', '--every', '15m'])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('celery', 'kombu', 'redis')))\n"
    )
    assert imported.stdout.splitlines()[-1] == "[]"


def test_a_command_line_that_cannot_be_read_exits_2(project: Project) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ddd_celery.generate", "generate", "cron"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "invalid choice: 'cron'" in done.stderr
