"""Every process of an app with jobs refuses a ``ddd_celery_*`` setting it cannot use, at start.

As a user runs them: ``celery -A bg_app worker`` and ``celery -A bg_app jobs background stats``
in processes of their own, on an app with background jobs only (the worker of such an app never
asks the scheduled jobs' registry, which is where the settings used to be read).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from services import REDIS_URL

pytestmark = pytest.mark.processes

BACKGROUND_APP = '''
"""An app with background jobs only, as a project writes it, for `celery -A bg_app`."""

import json
import os

from celery import Celery
from pydantic import BaseModel

from ddd_celery.background import InMemoryJobStore
from ddd_celery.celery import install_jobs
from ddd_celery.celery.background import install_background_jobs
from ddd_celery.declarations import background
from ddd_celery.kernel import InMemoryLock, SystemClock


class Note(BaseModel):
    text: str


@background("bg.note")
class NoteJob:
    def run(self, payload, execution):
        print("noted", payload.text)


app = Celery("bg_app", broker=os.environ["BROKER_URL_FOR_TEST"])
app.conf.broker_transport_options = {"global_keyprefix": os.environ["PREFIX_FOR_TEST"]}
install_jobs(app, jobs=[], lock=InMemoryLock(SystemClock()))
install_background_jobs(app, jobs=[NoteJob], store=InMemoryJobStore())
app.conf.update(json.loads(os.environ["SETTINGS_FOR_TEST"]))  # as a config_from_object after
'''

BAD_SETTINGS = [
    ({"ddd_celery_redis_uri": "redis://x"}, "ddd_celery_redis_uri: not a setting of ddd_celery"),
    ({"ddd_celery_lease_ms": 30_000}, "ddd_celery_lease_ms: not a setting of ddd_celery"),
    ({"ddd_celery_grace_ms": "30s"}, "ddd_celery_grace_ms: Input should be a valid integer"),
    ({"ddd_celery_key_prefix": 5}, "ddd_celery_key_prefix: Input should be a valid string"),
]
IDS = ["typo", "unknown", "grace-as-text", "prefix-as-int"]


def celery(
    tmp_path: Path, prefix: str, settings: dict[str, object], *args: str
) -> subprocess.Popen[str]:
    (tmp_path / "bg_app.py").write_text(textwrap.dedent(BACKGROUND_APP))
    env = {
        **os.environ,
        "PYTHONPATH": str(tmp_path),
        "BROKER_URL_FOR_TEST": REDIS_URL,
        "PREFIX_FOR_TEST": prefix,
        "SETTINGS_FOR_TEST": json.dumps(settings),
        "C_FORCE_ROOT": "1",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "bg_app", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=tmp_path,
    )


def finished(process: subprocess.Popen[str], timeout_s: float) -> tuple[int | None, str]:
    """The exit code (None if still running after ``timeout_s``, then killed) and the output."""
    try:
        output, _ = process.communicate(timeout=timeout_s)
        return process.returncode, output
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        return None, output


@pytest.mark.parametrize(("settings", "problem"), BAD_SETTINGS, ids=IDS)
def test_a_worker_does_not_start_on_a_setting_it_cannot_use_and_says_which(
    tmp_path: Path, redis_prefix: str, settings: dict[str, object], problem: str
) -> None:
    worker = celery(tmp_path, redis_prefix, settings, "worker", "--pool", "solo", "-l", "info")

    code, output = finished(worker, timeout_s=60)

    assert code not in (None, 0), output
    assert f"ddd_celery refuses to start: app.conf cannot be read: {problem}" in output
    assert "ready." not in output


def test_a_beat_does_not_start_on_a_setting_it_cannot_use_and_says_which(
    tmp_path: Path, redis_prefix: str
) -> None:
    settings, problem = BAD_SETTINGS[2]
    beat = celery(tmp_path, redis_prefix, settings, "beat", "-l", "info")

    code, output = finished(beat, timeout_s=60)

    assert code not in (None, 0), output
    assert f"ddd_celery refuses to start: app.conf cannot be read: {problem}" in output


@pytest.mark.parametrize(("settings", "problem"), BAD_SETTINGS, ids=IDS)
def test_background_stats_refuses_a_setting_it_cannot_use_in_one_line_and_exits_one(
    tmp_path: Path, redis_prefix: str, settings: dict[str, object], problem: str
) -> None:
    stats = celery(tmp_path, redis_prefix, settings, "jobs", "background", "stats")

    code, output = finished(stats, timeout_s=60)

    assert code == 1, output
    [line] = output.splitlines()
    assert line.startswith(
        f"ddd_celery refuses the configuration: app.conf cannot be read: {problem}"
    )


def test_with_the_settings_right_the_same_commands_run(tmp_path: Path, redis_prefix: str) -> None:
    """The refusals above are the settings', not the app's."""
    settings = {"ddd_celery_grace_ms": 5_000, "ddd_celery_max_payload_bytes": 65_536}
    stats = celery(tmp_path, redis_prefix, settings, "jobs", "background", "stats")

    code, output = finished(stats, timeout_s=60)

    assert code == 0, output
    assert ["(all)", "0", "0", "0", "0", "0", "0"] in [line.split() for line in output.splitlines()]
