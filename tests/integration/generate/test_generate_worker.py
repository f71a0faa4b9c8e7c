"""``ddd-celery generate worker``: the same app with jobs on, and ``RUN_JOBS`` off for the API."""

from __future__ import annotations

import pytest

from tests.integration.generate.conftest import Project

APP = '''\
"""The composition root of the shop, wired as the job settings' docstring says."""

import os

from celery import Celery

from ddd_celery import collect_scheduled_jobs
from ddd_celery.celery import install_jobs
from ddd_celery.kernel import CommandBus, InMemoryCommandBus, InMemoryLock, SystemClock
from shop.platform.job_settings import job_settings, run_jobs

app = Celery("shop", broker="memory://")
install_jobs(
    app,
    jobs=collect_scheduled_jobs("shop.billing"),  # the contexts, not the top package
    providers={CommandBus: InMemoryCommandBus},
    lock=InMemoryLock(SystemClock()),
    settings=job_settings(os.environ),
    start=run_jobs(os.environ),
)
'''

SHOW = (
    "from ddd_celery.celery import jobs_of\n"
    "from {module} import app\n"
    "jobs = jobs_of(app)\n"
    "enabled = jobs.jobs['billing.close-month'].schedule.options.enabled\n"
    "print(jobs.start, sorted(jobs.jobs), enabled)\n"
)


@pytest.fixture
def shop(project: Project) -> Project:
    project.generate("job", "billing", "CloseMonth", "--cron", "0 2 1 * *")
    project.write("shop/app.py", APP)
    return project


def test_before_the_worker_every_process_runs_the_jobs(shop: Project) -> None:
    done = shop.python(SHOW.format(module="shop.app"))

    assert done.stdout.split()[0] == "True"


@pytest.mark.parametrize(
    ("module", "environ", "starts"),
    [
        ("shop.app", {}, "False"),
        ("shop.worker", {}, "True"),
        ("shop.worker", {"RUN_JOBS": "false"}, "False"),
        ("shop.app", {"RUN_JOBS": "true"}, "True"),
    ],
)
def test_the_worker_runs_the_jobs_and_the_api_does_not_unless_run_jobs_says_so(
    shop: Project, module: str, environ: dict[str, str], starts: str
) -> None:
    result = shop.generate("worker")
    assert result.code == 0, result.err

    done = shop.python(SHOW.format(module=module), **environ)

    assert done.stdout.split() == [starts, "['billing.close-month']", "True"]


def test_the_worker_reads_the_jobs_switches_as_the_api_does(shop: Project) -> None:
    shop.generate("worker")

    done = shop.python(SHOW.format(module="shop.worker"), JOB_BILLING_CLOSE_MONTH_ENABLED="false")

    assert done.stdout.split() == ["True", "['billing.close-month']", "False"]


def test_the_worker_writes_its_entry_point_and_turns_the_default_off_once(shop: Project) -> None:
    first = shop.generate("worker")
    before = shop.files()
    second = shop.generate("worker")

    assert {line.split()[1]: line.split()[0] for line in first.out.splitlines()} == {
        "shop/__init__.py": "unchanged",
        "shop/platform/__init__.py": "unchanged",
        "shop/worker.py": "created",
        "shop/platform/job_settings.py": "edited",
    }
    assert "RUN_JOBS_BY_DEFAULT = False\n" in shop.read("shop/platform/job_settings.py")
    assert second.code == 0
    assert shop.files() == before


def test_a_worker_before_any_job_creates_the_settings_with_jobs_off_by_default(
    project: Project,
) -> None:
    project.generate("worker")
    project.generate("job", "billing", "CloseMonth", "--every", "1h")

    done = project.python(
        "from shop.platform.job_settings import JOBS, run_jobs\nprint(JOBS, run_jobs({}))\n"
    )

    assert done.stdout.split() == ["['billing.close-month']", "False"]


def test_an_app_elsewhere_is_named_with_module_and_attribute(project: Project) -> None:
    project.generate("worker", "--app", "shop.celery_app:celery")

    assert 'app = importlib.import_module("shop.celery_app").celery\n' in project.read(
        "shop/worker.py"
    )


def test_a_worker_module_of_the_projects_own_is_never_overwritten(project: Project) -> None:
    project.write("shop/worker.py", "app = None\n")
    before = project.files()

    result = project.generate("worker")

    assert result.code == 1
    assert "shop/worker.py: worker.py exists and differs" in result.err
    assert project.files() == before


@pytest.mark.parametrize(
    "app",
    [
        "shop.app:app\nimport os; os.system('id')",
        "shop.app:app; import os",
        "shop.app:",
        "shop..app:app",
        "shop.app:app:more",
        "shop.import:app",
        '"); import os; ("',
    ],
)
def test_an_app_that_is_not_module_path_and_attribute_is_refused_and_nothing_written(
    project: Project, app: str
) -> None:
    before = project.files()

    result = project.generate("worker", "--app", app)

    assert result.code == 1
    assert "is not module.path:attribute, such as 'shop.app:app'" in result.err
    assert len(result.err.splitlines()) == 1
    assert project.files() == before
