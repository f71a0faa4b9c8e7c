"""The package as a newcomer gets it: built as a wheel, installed in a new venv with its extras.

Built once per session (``python -m build``, an sdist and a wheel made from it) and installed
with the ``celery`` and ``test`` extras the README names, from the machine's package index. The
README's quickstart runs in that venv, so what it needs and the extras must agree.
"""

from __future__ import annotations

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


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    dist = tmp_path_factory.mktemp("clone") / "dist"  # where python -m build puts it in a clone
    _run(sys.executable, "-m", "build", "--outdir", dist, ROOT)
    (wheel,) = dist.glob("ddd_celery-*.whl")
    (sdist,) = dist.glob("ddd_celery-*.tar.gz")
    target = tmp_path_factory.mktemp("venv")
    venv.create(target, with_pip=True)
    bin_ = target / ("Scripts" if sys.platform == "win32" else "bin")
    _run(bin_ / "python", "-m", "pip", "install", "--quiet", f"{wheel}[celery,test]")
    return Installed(wheel, sdist, bin_)
