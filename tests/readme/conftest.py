"""The package as a newcomer gets it: built as a wheel, installed in a new venv with its extras.

Built once per session (``python -m build``, an sdist and a wheel made from it) and installed
with the ``celery`` and ``test`` extras the README names, from the machine's package index. The
README's quickstart runs in that venv, so what it needs and the extras must agree.

Once per session, not once per pytest-xdist worker: ``./dev test`` runs the packaging and the
quickstart modules on two workers at once, and two builds from one source tree would share its
``build/`` and ``*.egg-info`` (and cost a minute of CPU each). The first worker to ask builds
under a file lock in the folder the workers share; the others wait for it and reuse what it made.
No test changes that venv (``test_packaging`` reinstalls the wheel in a venv of its own).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Installed:
    wheel: Path
    sdist: Path
    bin: Path
    """The venv's scripts: ``python``, ``ddd-celery``, ``celery``, ``pytest``."""


def _run(*command: str | Path, timeout: float = 600) -> None:
    subprocess.run([str(part) for part in command], check=True, timeout=timeout)


def _build_and_install(folder: Path) -> Installed:
    dist = folder / "clone" / "dist"  # where python -m build puts it in a clone
    _run(sys.executable, "-m", "build", "--outdir", dist, ROOT)
    (wheel,) = dist.glob("ddd_celery-*.whl")
    (sdist,) = dist.glob("ddd_celery-*.tar.gz")
    target = folder / "venv"
    venv.create(target, with_pip=True)
    bin_ = target / ("Scripts" if sys.platform == "win32" else "bin")
    _run(bin_ / "python", "-m", "pip", "install", "--quiet", f"{wheel}[celery,test]")
    return Installed(wheel, sdist, bin_)


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    # under xdist each worker's basetemp is a folder of the session's one, which they share
    basetemp = tmp_path_factory.getbasetemp()
    shared = (basetemp.parent if "PYTEST_XDIST_WORKER" in os.environ else basetemp) / "readme"
    shared.mkdir(exist_ok=True)
    made = shared / "installed.json"
    with (shared / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not made.exists():
            found = _build_and_install(shared)
            made.write_text(json.dumps({k: str(v) for k, v in vars(found).items()}))
        return Installed(**{k: Path(v) for k, v in json.loads(made.read_text()).items()})
