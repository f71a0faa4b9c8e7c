"""``@scheduled``: a job says when it runs, next to the use case it triggers.

Everything is checked when the module that declares the job is imported (the name, the schedule,
every option, the ``run`` method), so a job that cannot run never deploys. Declarations are kept
in one registry per process, which is how a name stays unique in the application and how
``collect_scheduled_jobs`` finds the jobs of a context without a list to maintain.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, Protocol, TypeVar

from ddd_celery.declarations.errors import DeclarationError
from ddd_celery.declarations.execution import JobExecution
from ddd_celery.declarations.names import check_job_name, reserve_job_name
from ddd_celery.declarations.options import MissedPolicy, OverlapPolicy, Tenancy, TenantRuns
from ddd_celery.declarations.schedule import ParsedJobSchedule, parse_job_schedule


class ScheduledJob(Protocol):
    """A class of the application layer that triggers a use case at each occurrence.

    ``run`` may be a plain or an ``async def``; it receives the occurrence, never the clock.
    """

    def run(self, execution: JobExecution) -> Awaitable[None] | None: ...


_J = TypeVar("_J", bound=type[ScheduledJob])


@dataclass(frozen=True, slots=True)
class ScheduledJobDeclaration:
    """A declared job: its name (``<context>.<job-name>``), its context, schedule and class."""

    name: str
    context: str
    schedule: ParsedJobSchedule
    job_class: type[ScheduledJob]


_REGISTRY: dict[str, ScheduledJobDeclaration] = {}


def scheduled(
    name: str,
    *,
    every: int | str | timedelta | None = None,
    cron: str | None = None,
    time_zone: str = "UTC",
    overlap: OverlapPolicy | Literal["skip", "queue"] = OverlapPolicy.SKIP,
    missed: MissedPolicy | Literal["skip", "run-once"] = MissedPolicy.SKIP,
    timeout_ms: int | None = None,
    jitter_ms: int = 0,
    enabled: bool = True,
    single_instance: bool = True,
    tenancy: Tenancy | Literal["global", "per-tenant"] = Tenancy.GLOBAL,
    tenant_runs: TenantRuns | Literal["in-turn", "spread"] = TenantRuns.IN_TURN,
) -> Callable[[_J], _J]:
    """Declare the decorated class a scheduled job named ``name``; the class is returned as is.

    Takes the keys of a schedule mapping (see ``parse_job_schedule``) as keyword arguments.
    ``time_zone`` goes with ``cron``; with ``every``, anything but the default ``"UTC"`` is
    refused, since an interval follows no zone. Raises ``DeclarationError`` naming the job.
    """
    check_job_name(name)
    schedule: dict[str, Any] = {
        "overlap": overlap,
        "missed": missed,
        "timeout_ms": timeout_ms,
        "jitter_ms": jitter_ms,
        "enabled": enabled,
        "single_instance": single_instance,
        "tenancy": tenancy,
        "tenant_runs": tenant_runs,
    }
    if every is not None:
        schedule["every"] = every
    if cron is not None or time_zone != "UTC":
        schedule["cron"] = cron
        schedule["time_zone"] = time_zone
    parsed = parse_job_schedule(schedule, job=name)

    def declare(job_class: _J) -> _J:
        _check_run(job_class, name)
        declaration = ScheduledJobDeclaration(name, name.partition(".")[0], parsed, job_class)
        _register(declaration)
        setattr(job_class, "__scheduled_job__", declaration)  # noqa: B010 - no such attribute in the type
        return job_class

    return declare


def declaration_of(job_class: type[object]) -> ScheduledJobDeclaration:
    """The declaration ``@scheduled`` attached to ``job_class``; ``DeclarationError`` if none."""
    declaration = job_class.__dict__.get("__scheduled_job__")
    if not isinstance(declaration, ScheduledJobDeclaration):
        raise DeclarationError(f"{_where(job_class)} is not declared with @scheduled")
    return declaration


def collect_scheduled_jobs(*modules: ModuleType | str) -> list[ScheduledJobDeclaration]:
    """Import ``modules`` (packages recursively) and return the jobs declared in them, by name.

    A context lists its package, not its jobs: adding a ``*.job`` module is enough. What an
    import raises (a ``DeclarationError`` of a bad job, an ``ImportError``) propagates. A
    folder of the package without ``__init__.py`` whose modules use ``@scheduled`` is refused
    with a ``DeclarationError`` naming it: Python's walk skips such a folder, so its jobs would
    be left out without a word. Other folders without one (scripts, templates) are left alone.
    """
    names: set[str] = set()
    for module in modules:
        root = importlib.import_module(module) if isinstance(module, str) else module
        names.update(imported.__name__ for imported in _walk(root))
    found = [d for d in _REGISTRY.values() if d.job_class.__module__ in names]
    return sorted(found, key=lambda declaration: declaration.name)


def _walk(module: ModuleType) -> Iterator[ModuleType]:
    yield module
    folders = [Path(folder) for folder in getattr(module, "__path__", ())]
    _refuse_folders_without_init(module.__name__, folders)
    for info in pkgutil.iter_modules([str(f) for f in folders], f"{module.__name__}."):
        yield from _walk(importlib.import_module(info.name))


def _refuse_folders_without_init(package: str, folders: list[Path]) -> None:
    for folder in folders:
        for child in sorted(folder.iterdir()) if folder.is_dir() else ():
            if (
                child.is_dir()
                and child.name.isidentifier()
                and not (child / "__init__.py").exists()
                and _declares_jobs(child)
            ):
                raise DeclarationError(
                    f"folder {package}.{child.name} holds @scheduled jobs but no __init__.py, "
                    f"so collect_scheduled_jobs cannot see them: add an empty "
                    f"{child.name}/__init__.py"
                )


def _declares_jobs(folder: Path) -> bool:
    """Whether a module under ``folder`` mentions ``@scheduled``: read, never imported."""
    return any(
        "@scheduled" in module.read_text(encoding="utf-8", errors="replace")
        for module in folder.rglob("*.py")
    )


def _check_run(job_class: object, name: str) -> None:
    if not inspect.isclass(job_class):
        raise DeclarationError(
            f"@scheduled decorates a class, not {type(job_class).__name__}", job=name
        )
    run = getattr(job_class, "run", None)
    if not callable(run):
        raise DeclarationError(f"{_where(job_class)} has no method run(self, execution)", job=name)
    bound = isinstance(inspect.getattr_static(job_class, "run"), (staticmethod, classmethod))
    try:
        inspect.signature(run).bind(*([None] if bound else [None, None]))
    except TypeError:
        raise DeclarationError(
            f"{_where(job_class)}.run must take the execution: run(self, execution)", job=name
        ) from None
    except ValueError:  # no signature to read (a builtin): trust it
        return


def _register(declaration: ScheduledJobDeclaration) -> None:
    reserve_job_name(declaration.name, "scheduled job", declaration.job_class)
    _REGISTRY[declaration.name] = declaration


def _where(job_class: Any) -> str:
    return f"{job_class.__module__}.{job_class.__qualname__}"
