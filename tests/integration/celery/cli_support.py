"""``celery -A <app> jobs ...`` run as an operator runs it: the app a module written in the test's
directory, as a project writes one, and each command a process of its own.

A module of its own (not ``conftest``), so the CLI tests import it by a unique name; what each
app module reads from its environment stays the test's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

COMMAND_S = 60
"""The longest a command may take before the test fails: no command waits on anything."""


def write_app(directory: Path, module: str, source: str) -> None:
    """``source`` (indented as a test writes it) as ``<directory>/<module>.py``."""
    (directory / f"{module}.py").write_text(textwrap.dedent(source))


def app_env(directory: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """This process's environment, the app's directory on ``PYTHONPATH`` (``environ`` may give
    another), and ``environ``."""
    return {**os.environ, "PYTHONPATH": str(directory), **environ}


def run_jobs(
    app: str,
    directory: Path,
    env: Mapping[str, str],
    *args: str,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``celery -A <app> jobs <args>`` in ``directory``, its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", app, "jobs", *args],
        capture_output=True,
        text=True,
        input=stdin,
        env=dict(env),
        cwd=directory,
        timeout=COMMAND_S,
        check=False,
    )
