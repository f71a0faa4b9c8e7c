"""A new project in ``tmp_path`` laid out as the docs recommend, and ways to run what is in it.

What the generator wrote is imported and run in subprocesses with the project on
``PYTHONPATH``: the jobs it declares would otherwise stay in this process's registries.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from ddd_celery.generate.cli import main


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str


class Project:
    """A project at ``root`` whose top package is ``shop``."""

    def __init__(self, root: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.root = root
        self._capsys = capsys

    def generate(self, *arguments: str) -> Result:
        """``ddd-celery generate <arguments>`` in this project, in this process."""
        self._capsys.readouterr()
        code = main(["generate", *arguments, "--project-root", str(self.root)])
        captured = self._capsys.readouterr()
        return Result(code, captured.out, captured.err)

    def python(self, code: str, **environ: str) -> subprocess.CompletedProcess[str]:
        """Run ``code`` in a new interpreter, the project importable; a failure fails the test."""
        return self.run([sys.executable, "-c", code], **environ)

    def run(self, command: list[str], **environ: str) -> subprocess.CompletedProcess[str]:
        env = {
            key: value
            for key, value in os.environ.items()
            if key != "RUN_JOBS" and not key.startswith("JOB_")
        }
        env.update(PYTHONPATH=str(self.root), **environ)
        done = subprocess.run(
            command,
            check=False,
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    def files(self) -> dict[str, bytes]:
        """Every file of the project and its bytes, to compare a project before and after."""
        return {
            str(path.relative_to(self.root)): path.read_bytes()
            for path in sorted(self.root.rglob("*"))
            if path.is_file() and "__pycache__" not in path.parts
        }

    def read(self, path: str) -> str:
        return (self.root / path).read_text(encoding="utf-8")

    def write(self, path: str, text: str) -> None:
        (self.root / path).parent.mkdir(parents=True, exist_ok=True)
        (self.root / path).write_text(text, encoding="utf-8")


@pytest.fixture
def project(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Project:
    root = tmp_path / "project"
    (root / "shop").mkdir(parents=True)
    (root / "shop" / "__init__.py").write_text("")
    (root / "pyproject.toml").write_text('[project]\nname = "shop"\nversion = "0"\n')
    return Project(root, capsys)
