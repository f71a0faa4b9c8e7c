"""Where each generated file goes in a project laid out as the docs recommend.

::

    pyproject.toml
    <package>/                      the application: one top package (or src/<package>/)
      app.py                        the composition root: the Celery app, install_jobs (yours)
      worker.py                     generate worker: the worker deployment's entry point
      platform/job_settings.py      JOBS, job_settings(environ), run_jobs(environ)
      <context>/application/
        commands/<command>.py       the command a job sends (yours; written when missing)
        scheduling/<job>_job.py     generate job: one @scheduled job per module
        background/<job>_job.py     generate background-job: one @background job per module
    tests/
      scheduling/test_<context>_<job>_job.py   its spec on the manual scheduler
      background/test_<context>_<job>_job.py   its spec on QueueWorker and ManualJobTimers

One top package rather than contexts at the root, because ``platform`` (the seeds' name for the
shared wiring) is also a module of the standard library: at the root, it would shadow it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ddd_celery.generate.errors import NO_PACKAGE, NO_PROJECT, GenerationRefusedError
from ddd_celery.generate.names import JobNames, check_package

_NOT_THE_APPLICATION = frozenset({"tests", "test", "docs", "bench", "scripts", "examples"})


@dataclass(frozen=True, slots=True)
class Layout:
    """The project at ``root`` whose application is the package ``package`` in ``source``."""

    root: Path
    source: Path
    """The folder the top package sits in: the root, or ``root/src``."""
    package: str

    @property
    def package_dir(self) -> Path:
        return self.source.joinpath(*self.package.split("."))

    def module_path(self, module: str) -> Path:
        """The file of ``module``, a dotted name inside the top package."""
        return self.package_dir.joinpath(*module.split(".")).with_suffix(".py")

    def packages_down_to(self, module: str) -> list[Path]:
        """The ``__init__.py`` of every package from the top one to the one holding ``module``."""
        parts = [*self.package.split("."), *module.split(".")[:-1]]
        return [
            self.source.joinpath(*parts[:depth], "__init__.py")
            for depth in range(1, len(parts) + 1)
        ]

    def job_module(self, names: JobNames, kind: str) -> str:
        """``<context>.application.<kind>.<job>_job``, inside the top package."""
        return f"{names.context}.application.{kind}.{names.module}"

    def command_module(self, names: JobNames) -> str:
        return f"{names.context}.application.commands.{names.command_module}"

    def spec_path(self, names: JobNames, kind: str) -> Path:
        return self.root / "tests" / kind / f"test_{names.context}_{names.module}.py"

    def dotted(self, module: str) -> str:
        """The importable name of ``module``."""
        return f"{self.package}.{module}"


def find_layout(root: Path, package: str | None) -> Layout:
    """The layout of the project at ``root``; its top package is ``package`` or the only one.

    Without ``package``, the top package is the one folder with an ``__init__.py`` at the root
    or under ``src/`` (``tests``, ``docs`` and the like aside); none or several is refused with
    ``GenerationRefusedError``, saying to name it with ``--package``.
    """
    root = root.resolve()
    if not root.is_dir():
        raise GenerationRefusedError(
            f"the project root {root.name!r} is not a folder", code=NO_PROJECT
        )
    src = root / "src"
    if package is not None:
        check_package(package)
        top = package.split(".")[0]
        in_src = src.is_dir() and ((src / top).is_dir() or not (root / top).is_dir())
        return Layout(root=root, source=src if in_src else root, package=package)
    found = [
        folder
        for source in (root, src)
        if source.is_dir()
        for folder in sorted(source.iterdir())
        if (folder / "__init__.py").is_file() and folder.name not in _NOT_THE_APPLICATION
    ]
    if len(found) != 1:
        seen = ", ".join(folder.name for folder in found) or "none"
        raise GenerationRefusedError(
            f"name the application's top package with --package (packages at the root: {seen})",
            code=NO_PACKAGE,
        )
    return Layout(root=root, source=found[0].parent, package=found[0].name)
