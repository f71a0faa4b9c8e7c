"""The package builds as a wheel and an sdist that twine accepts, and the wheel works installed.

No registry holds ddd-celery yet: the README says to install it from a clone or from a wheel
built with ``python -m build``. Here that wheel goes into a new venv, away from the repository,
and is imported and run there; the Lua scripts and ``py.typed`` must travel inside it.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.readme.conftest import Installed

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.processes


def test_the_wheel_and_the_sdist_pass_twine_check(installed: Installed) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", installed.wheel, installed.sdist],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASSED") == 2


def test_the_wheel_carries_the_lua_scripts_and_py_typed(installed: Installed) -> None:
    names = zipfile.ZipFile(installed.wheel).namelist()
    with tarfile.open(installed.sdist) as sdist:
        in_sdist = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}

    scripts = {str(path.relative_to(ROOT)) for path in (ROOT / "ddd_celery").rglob("*.lua")}
    assert len(scripts) > 20
    assert "ddd_celery/py.typed" in names
    assert {name for name in names if name.endswith(".lua")} == scripts
    assert scripts | {"ddd_celery/py.typed"} <= in_sdist


def test_the_installed_wheel_imports_and_its_command_runs_outside_the_repository(
    installed: Installed, tmp_path_factory: pytest.TempPathFactory
) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    code = (
        "import pathlib, ddd_celery, ddd_celery.celery, ddd_celery.redis\n"
        "root = pathlib.Path(ddd_celery.__file__).parent\n"
        "print(root)\n"
        "print(len(list(root.rglob('*.lua'))))\n"
    )

    imported = subprocess.run(
        [installed.bin / "python", "-c", code],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    helped = subprocess.run(
        [installed.bin / "ddd-celery", "--help"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert imported.returncode == 0, imported.stderr
    assert str(installed.bin.parent) in imported.stdout.splitlines()[0]  # not the clone's copy
    scripts = list((ROOT / "ddd_celery").rglob("*.lua"))
    assert int(imported.stdout.splitlines()[1]) == len(scripts)
    assert helped.returncode == 0, helped.stderr
    assert "generate" in helped.stdout


def test_the_readme_s_line_that_installs_the_wheel_installs_it(
    installed: Installed, tmp_path: Path
) -> None:
    """In a venv of its own: the quickstart may be running in the shared one meanwhile."""
    venv.create(tmp_path, with_pip=True)
    python = tmp_path / ("Scripts" if sys.platform == "win32" else "bin") / "python"
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Install\n") : text.index("\n## ", text.index("## Install\n") + 1)]
    (line,) = (line for line in section.splitlines() if "dist/ddd_celery-*.whl" in line)
    assert line.startswith("pip install ")
    clone = installed.wheel.parent.parent
    command = line.replace("path/to/ddd_celery", str(clone)).replace(
        "pip install ", f"{python} -m pip install --no-deps ", 1
    )

    done = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, timeout=300, check=False
    )

    assert done.returncode == 0, done.stdout + done.stderr
    version = installed.wheel.name.split("-")[1]
    assert f"Successfully installed ddd-celery-{version}" in done.stdout
