"""``./dev example`` stops on one Ctrl-C: cleanly, without a traceback, and goes no further.

Each run is under ``timeout`` in a process of its own, as a reader's terminal runs it; the
SIGINT reaches the demo alone (or, for ``./dev``, the whole process group, as a terminal
sends it), once the worker has run a job.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from redis import Redis
from services import REDIS_URL

from examples.clinic.demo import WEB_PORT
from examples.clinic.platform.backend import BACKEND, DATA, PREFIX

ROOT = Path(__file__).resolve().parents[2]
STARTED = "Reminder sent to"
"""A line the demo shows once its worker runs jobs."""
UNCLEAN = (
    "killed",  # "celery worker did not stop within 15 s: killed"
    "exitcode 70",  # a pool child that died of the grace signal
    "signal 9",
    "Restoring",  # kombu giving back unacknowledged messages at a cold stop
    "==> the appointment booking",
)


class Run:
    """A command in a process group of its own, under ``timeout``, its lines read as they come."""

    def __init__(self, command: list[str], environ: Mapping[str, str], cwd: Path = ROOT) -> None:
        self.process = subprocess.Popen(
            # --foreground: a SIGINT to timeout goes to the command alone, once, not to its group
            ["timeout", "--foreground", "-s", "KILL", "150", *command],
            cwd=cwd,
            env=dict(environ),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._new: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._new.put(line)
        self._new.put(None)

    def wait_for(self, text: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not any(text in line for line in self.lines):
            left = deadline - time.monotonic()
            line = self._new.get(timeout=max(left, 0.01)) if left > 0 else None
            if line is None:
                self.process.send_signal(signal.SIGINT)  # the demo stops its celery processes
                self.end(timeout_s=60)
                pytest.fail(f"no line with {text!r}:\n{self.output}")
            self.lines.append(line)

    def end(self, timeout_s: float) -> tuple[int, float]:
        """Wait for the end; the exit status and how long it took."""
        started = time.monotonic()
        try:
            status = self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            pytest.fail(f"still running {timeout_s} s after the signal:\n{self.output}")
        took_s = time.monotonic() - started
        while (line := self._new.get(timeout=10)) is not None:
            self.lines.append(line)
        assert self.process.stdout is not None
        self.process.stdout.close()
        return status, took_s

    @property
    def output(self) -> str:
        return "".join(self.lines)


def demo(environ: Mapping[str, str]) -> Run:
    return Run([sys.executable, "-m", "examples.clinic.demo", "--verbose"], environ)


def assert_stopped_cleanly(run: Run, status: int, took_s: float) -> None:
    output = run.output
    assert status == 130, output
    assert "Stopping" in output
    assert "no reminder was mailed twice" in output
    for text in UNCLEAN:
        assert text not in output, output
    # the demo's own traceback (the worker logs, indented, the statement's planned failure)
    assert not [line for line in run.lines if line.startswith("Traceback")], output
    assert "KeyboardInterrupt" not in output
    assert "CancelledError" not in output
    assert took_s < 30, output


@pytest.fixture
def prefix() -> Iterator[str]:
    """A key prefix of this test's own, its keys deleted after it."""
    prefix = f"test:example-stop:{uuid.uuid4().hex}:"
    yield prefix
    client = Redis.from_url(REDIS_URL)
    for key in client.scan_iter(match=f"{prefix}*"):
        client.delete(key)
    client.close()


@pytest.mark.processes
def test_one_sigint_stops_the_example_on_the_embedded_default(tmp_path: Path) -> None:
    run = demo({"PATH": "/usr/bin:/bin", WEB_PORT: "0", BACKEND: "embedded", DATA: str(tmp_path)})
    run.wait_for(STARTED, timeout_s=60)
    time.sleep(2)  # the month's close and its statements' first attempts under way

    run.process.send_signal(signal.SIGINT)
    status, took_s = run.end(timeout_s=60)

    assert_stopped_cleanly(run, status, took_s)


@pytest.mark.redis
@pytest.mark.processes
def test_one_sigint_stops_the_example_on_redis_and_deletes_its_keys(
    tmp_path: Path, prefix: str
) -> None:
    environ = {
        "PATH": "/usr/bin:/bin",
        WEB_PORT: "0",
        BACKEND: "redis",
        "REDIS_URL": REDIS_URL,
        DATA: str(tmp_path),
        PREFIX: prefix,
    }
    run = demo(environ)
    run.wait_for(STARTED, timeout_s=60)
    time.sleep(2)

    run.process.send_signal(signal.SIGINT)
    status, took_s = run.end(timeout_s=60)

    assert_stopped_cleanly(run, status, took_s)
    client = Redis.from_url(REDIS_URL)
    assert list(client.scan_iter(match=f"{prefix}*")) == []
    client.close()


@pytest.mark.processes
def test_one_ctrl_c_stops_dev_example_and_the_booking_never_starts(tmp_path: Path) -> None:
    # ./dev itself, on a copy of the repository whose bootstrap installs nothing
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "dev", tmp_path / "dev")
    (tmp_path / "scripts" / "bootstrap.sh").write_text(
        f'export PATH="{Path(sys.executable).parent}:$PATH"\n'
    )
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / "ddd_celery").symlink_to(ROOT / "ddd_celery")
    data = tmp_path / "data"
    environ = {"PATH": "/usr/bin:/bin", WEB_PORT: "0", BACKEND: "embedded", DATA: str(data)}
    run = Run(["bash", "dev", "example", "--verbose"], environ, cwd=tmp_path)
    run.wait_for(STARTED, timeout_s=60)

    os.killpg(run.process.pid, signal.SIGINT)  # a terminal's Ctrl-C: bash and the demo get it
    status, took_s = run.end(timeout_s=60)

    assert_stopped_cleanly(run, status, took_s)


@pytest.mark.processes
def test_one_sigint_stops_the_booking_demo_without_a_traceback() -> None:
    run = Run([sys.executable, "-m", "examples.clinic.booking.demo"], {"PATH": "/usr/bin:/bin"})
    run.wait_for("held for grace", timeout_s=60)

    run.process.send_signal(signal.SIGINT)
    status, _ = run.end(timeout_s=30)

    assert status == 130, run.output
    assert run.lines[-1] == "Stopped\n"
    assert "Traceback" not in run.output
