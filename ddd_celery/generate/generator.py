"""``generate job``, ``generate background-job`` and ``generate worker``, as functions.

Each checks its arguments the way the declaration will (the same rules, the same messages),
plans every file, and writes them all or none (``files.apply``). None imports Celery: they
only write files, so the generator runs in a project that has not installed Celery yet.
"""

from __future__ import annotations

from pathlib import Path

from ddd_celery.declarations.background import background
from ddd_celery.declarations.scheduled import scheduled
from ddd_celery.generate import settings_file, templates
from ddd_celery.generate.errors import FILE_EXISTS, GenerationRefusedError
from ddd_celery.generate.files import Planned, Written, apply, kept, owned, packages
from ddd_celery.generate.layout import Layout, find_layout
from ddd_celery.generate.names import JobNames, check_app, job_names

SCHEDULING = "scheduling"
BACKGROUND = "background"
SETTINGS_MODULE = "platform.job_settings"
WORKER_MODULE = "worker"


def generate_job(
    root: Path,
    context: str,
    job_class: str,
    *,
    cron: str | None = None,
    every: str | None = None,
    time_zone: str = "UTC",
    command: str | None = None,
    package: str | None = None,
) -> list[Written]:
    """Write a ``@scheduled`` job, its command when missing, its spec and its settings line.

    The name and schedule go through ``@scheduled`` itself before any file is written, so a
    ``DeclarationError`` here carries the message the declaration would raise at import.
    """
    names = job_names(context, job_class, command)
    schedule = _schedule(cron=cron, every=every, time_zone=time_zone)
    scheduled(names.name, **schedule)  # type: ignore[arg-type] # checks, declares nothing
    layout = find_layout(root, package)
    _refuse_the_other_kind(layout, names, BACKGROUND)
    job_module = layout.job_module(names, SCHEDULING)
    command_module = layout.command_module(names)
    settings = layout.module_path(SETTINGS_MODULE)
    return apply(
        layout.root,
        [
            *_packages(layout, job_module, command_module, SETTINGS_MODULE),
            kept(layout.module_path(command_module), templates.scheduled_command_module(names)),
            owned(
                layout.module_path(job_module),
                templates.scheduled_job_module(
                    names, command_module=layout.dotted(command_module), schedule=schedule
                ),
            ),
            owned(
                layout.spec_path(names, SCHEDULING),
                templates.scheduled_job_spec(
                    names,
                    job_module=layout.dotted(job_module),
                    command_module=layout.dotted(command_module),
                ),
            ),
            Planned(settings, lambda current: settings_file.with_job(current, names.name)),
        ],
    )


def generate_background_job(
    root: Path,
    context: str,
    job_class: str,
    *,
    command: str | None = None,
    package: str | None = None,
) -> list[Written]:
    """Write a ``@background`` job with its payload model, its command when missing, its spec.

    No settings line: ``JOB_<CONTEXT>_<JOB>_ENABLED`` switches scheduled jobs, and a
    background job runs when a use case enqueues it.
    """
    names = job_names(context, job_class, command)
    background(names.name)  # checks the name as the declaration does, declares nothing
    layout = find_layout(root, package)
    _refuse_the_other_kind(layout, names, SCHEDULING)
    job_module = layout.job_module(names, BACKGROUND)
    command_module = layout.command_module(names)
    return apply(
        layout.root,
        [
            *_packages(layout, job_module, command_module),
            kept(layout.module_path(command_module), templates.background_command_module(names)),
            owned(
                layout.module_path(job_module),
                templates.background_job_module(
                    names, command_module=layout.dotted(command_module)
                ),
            ),
            owned(
                layout.spec_path(names, BACKGROUND),
                templates.background_job_spec(
                    names,
                    job_module=layout.dotted(job_module),
                    command_module=layout.dotted(command_module),
                ),
            ),
        ],
    )


def generate_worker(
    root: Path, *, app: str | None = None, package: str | None = None
) -> list[Written]:
    """Write the worker's entry point and turn ``RUN_JOBS`` off by default for the API.

    ``app`` is ``module.path:attribute`` of the application's Celery app, ``<package>.app:app``
    by default; anything else is refused (``ValueError``), as it would be code in the module.
    The worker module turns ``RUN_JOBS`` on before importing it; the job settings'
    ``RUN_JOBS_BY_DEFAULT`` becomes False, so every other process importing the app (the API)
    starts no job unless ``RUN_JOBS=true`` says so.
    """
    given = None if app is None else check_app(app)
    layout = find_layout(root, package)
    app_module, attribute = given or (f"{layout.package}.app", "app")
    settings = layout.module_path(SETTINGS_MODULE)
    return apply(
        layout.root,
        [
            *_packages(layout, WORKER_MODULE, SETTINGS_MODULE),
            owned(
                layout.module_path(WORKER_MODULE),
                templates.worker_module(
                    package=layout.package,
                    app_module=app_module,
                    app_attribute=attribute,
                ),
            ),
            Planned(settings, settings_file.with_jobs_off_by_default),
        ],
    )


def _schedule(*, cron: str | None, every: str | None, time_zone: str) -> dict[str, object]:
    """The schedule's keyword arguments as the job will declare them (``time_zone`` if not UTC).

    ``every`` stays text, unit included (``'900000ms'``, ``'15m'``): ``'15'`` is refused as
    the declaration refuses it, rather than read as 15 ms.
    """
    schedule: dict[str, object] = {}
    if every is not None:
        schedule["every"] = every
    if cron is not None:
        schedule["cron"] = cron
    if time_zone != "UTC":
        schedule["time_zone"] = time_zone
    return schedule


def _packages(layout: Layout, *modules: str) -> list[Planned]:
    return packages(path for module in modules for path in layout.packages_down_to(module))


def _refuse_the_other_kind(layout: Layout, names: JobNames, other: str) -> None:
    """A scheduled and a background job cannot share a name (``@scheduled`` refuses it)."""
    path = layout.module_path(layout.job_module(names, other))
    if path.exists():
        raise GenerationRefusedError(
            f"job {names.name!r}: the name must be unique in the application; the {other} job "
            f"in {path.relative_to(layout.root)} already has it",
            code=FILE_EXISTS,
        )
