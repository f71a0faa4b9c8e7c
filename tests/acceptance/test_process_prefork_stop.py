"""A prefork worker stopped with SIGTERM: its children survive the grace signal and end cleanly.

``ddd_celery.celery.shutdown`` sends each pool child ``SIGUSR2`` as the worker stops. Billiard,
once a child's initialiser has run, points every signal the child handles at its own exit
handler, so a child that handled the signal from ``worker_process_init`` on died of it while
idle (``exitcode 70``); one that died holding the pool's queue lock left the worker waiting for
that lock for ever. No broker server: kombu's filesystem transport in the test's folder.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes

APP = """\
from celery import Celery

import ddd_celery.celery  # noqa: F401  (its worker hooks: the grace of every run)

folder = {folder!r}
app = Celery("prefork_stop", broker="filesystem://")
app.conf.update(
    broker_transport_options={{
        "data_folder_in": folder,
        "data_folder_out": folder,
        "processed_folder": folder,
    }},
    task_ignore_result=True,
)
"""


def test_a_stopped_prefork_worker_s_idle_children_outlive_the_grace_signal(
    tmp_path: Path,
) -> None:
    (tmp_path / "broker").mkdir()
    (tmp_path / "prefork_stop_app.py").write_text(APP.format(folder=str(tmp_path / "broker")))
    log = tmp_path / "worker.log"
    with log.open("w") as output:
        worker = subprocess.Popen(
            [
                *("timeout", "--foreground", "-s", "KILL", "120", sys.executable, "-m", "celery"),
                *("-A", "prefork_stop_app", "worker", "--pool=prefork", "--concurrency=2"),
                "--loglevel=INFO",
            ],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(tmp_path), "PYTHONUNBUFFERED": "1"},
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while "ready." not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "ready." in log.read_text(), log.read_text()

        worker.send_signal(signal.SIGTERM)  # timeout passes it on to celery, and to no child
        status = worker.wait(timeout=30)
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()

    text = log.read_text()
    assert status == 0, text
    assert "Warm shutdown" in text
    assert "exited with" not in text, text  # "Process 'ForkPoolWorker-1' ... exitcode 70"
