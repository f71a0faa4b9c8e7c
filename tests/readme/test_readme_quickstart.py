"""The README's quickstart, followed literally in a new directory, as a newcomer would.

Its code blocks are read from README.md itself, so the page and what is proven cannot drift:
the shell block that makes the packages runs in bash, each block whose first line names a file
(``# app.py``) becomes that file, and the ``celery -A app jobs`` commands it shows run in
processes of their own. Then the spec it shows runs under pytest, by the command step 7 shows.
All of it runs in a new virtualenv where the wheel is installed with the extras step 7 names
(``installed``, in conftest.py), so a package the steps need and no extra brings fails here.
"""

from __future__ import annotations

import os
import re
import subprocess
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from redis import Redis

if TYPE_CHECKING:
    from tests.readme.conftest import Installed

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "## A first job in five minutes"
README_REDIS = "redis://localhost:6379/0"
JOB = "billing.send-payment-reminders"
_BLOCK = re.compile(r"^(?P<indent> *)```(?P<lang>\w+)\n(?P<body>.*?)^(?P=indent)```$", re.M | re.S)
_FILE = re.compile(r"^# (?P<path>[\w./-]+\.(?:py|ini))$")


@dataclass(frozen=True)
class Block:
    lang: str
    body: str

    @property
    def path(self) -> str | None:
        match = _FILE.match(self.body.splitlines()[0])
        return match["path"] if match else None


def quickstart_blocks() -> list[Block]:
    text = README.read_text(encoding="utf-8")
    start = text.index(SECTION)
    section = text[start : text.index("\n## ", start + len(SECTION))]
    return [
        Block(match["lang"], textwrap.dedent(match["body"])) for match in _BLOCK.finditer(section)
    ]


def jobs_commands(blocks: list[Block]) -> list[list[str]]:
    """Every ``celery -A app jobs ...`` line of the shell blocks, without its comment."""
    lines = [line for block in blocks if block.lang == "bash" for line in block.body.splitlines()]
    return [
        line.split("  #")[0].split() for line in lines if line.startswith("celery -A app jobs ")
    ]


def shell_lines(blocks: list[Block]) -> list[str]:
    return [
        line.split("  #")[0].strip()
        for block in blocks
        if block.lang == "bash"
        for line in block.body.splitlines()
    ]


def spec_command(blocks: list[Block]) -> list[str]:
    """The line of step 7 that runs the specs."""
    (line,) = (line for line in shell_lines(blocks) if line.startswith("python -m pytest"))
    return line.split()


def test_every_code_block_of_the_quickstart_is_a_file_or_a_command() -> None:
    blocks = quickstart_blocks()

    files = [block.path for block in blocks if block.lang in ("python", "ini")]

    assert None not in files
    assert files == [
        "billing/application/commands.py",
        "billing/application/scheduling/send_payment_reminders_job.py",
        "app.py",
        "pytest.ini",
        "test_jobs.py",
    ]
    assert [command[4] for command in jobs_commands(blocks)] == ["list", "run-now", "next"]
    assert 'pip install -e "path/to/ddd_celery[celery,test]"' in shell_lines(blocks)
    assert spec_command(blocks)[:3] == ["python", "-m", "pytest"]


def test_the_quickstart_pytest_ini_sets_what_pytest_asyncio_warns_about() -> None:
    (ini,) = (block for block in quickstart_blocks() if block.path == "pytest.ini")

    assert "asyncio_mode = auto" in ini.body
    assert "asyncio_default_fixture_loop_scope = function" in ini.body


@pytest.fixture
def redis_url() -> str:
    return os.environ.get("REDIS_URL", README_REDIS)


@pytest.fixture
def newcomer(tmp_path: Path, redis_url: str) -> Iterator[Path]:
    """A new directory holding what the quickstart says to create, and nothing else."""
    blocks = quickstart_blocks()
    setup = next(block for block in blocks if block.lang == "bash")
    subprocess.run(["bash", "-euc", setup.body], cwd=tmp_path, check=True, timeout=30)
    for block in blocks:
        if block.path is not None:
            target = tmp_path / block.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.body.replace(README_REDIS, redis_url), encoding="utf-8")
    yield tmp_path
    client = Redis.from_url(redis_url)
    for key in client.scan_iter(match=f"ddd_celery:*{JOB}*"):
        client.delete(key)
    client.close()


def run(installed: Installed, directory: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """``python -m <command>`` in the newcomer's venv, as its activated shell would run it."""
    environ = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    environ["PATH"] = os.pathsep.join([str(installed.bin), environ.get("PATH", "")])
    environ.pop("VIRTUAL_ENV", None)
    return subprocess.run(
        [installed.bin / "python", "-m", *command],
        cwd=directory,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.processes
def test_the_quickstart_followed_literally_lists_runs_and_tests_the_job(
    newcomer: Path, installed: Installed
) -> None:
    blocks = quickstart_blocks()

    listed, ran, upcoming = (
        run(installed, newcomer, *command) for command in jobs_commands(blocks)
    )
    spec = run(installed, newcomer, *spec_command(blocks)[2:])

    assert listed.returncode == 0, listed.stderr
    assert f"{JOB}  cron 0 7 * * 1-5 (Europe/Paris)" in listed.stdout
    assert ran.returncode == 0, ran.stderr
    assert "Reminding the invoices due at 20" in ran.stdout
    assert f"{JOB} succeeded" in ran.stdout
    assert upcoming.returncode == 0, upcoming.stderr
    assert "07:00:00+0" in upcoming.stdout
    assert spec.returncode == 0, spec.stdout + spec.stderr
    assert "2 passed" in spec.stdout
    assert "warning" not in (spec.stdout + spec.stderr).lower(), spec.stdout
