"""``./dev example`` on Redis: keys of its own, and a clean start whatever a run left behind."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis
from services import REDIS_URL

from examples.clinic.demo import PATIENTS, WEB_PORT
from examples.clinic.platform.backend import BACKEND, DATA, DEFAULT_PREFIX, PREFIX, Backend

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def prefix() -> Iterator[str]:
    """A prefix of this test's own, and a key outside it that must survive."""
    prefix = f"test:example:{uuid.uuid4().hex}:"
    client = Redis.from_url(REDIS_URL)
    client.set(f"{prefix[:-1]}-neighbour", "kept")
    yield prefix
    for key in client.scan_iter(match=f"{prefix[:-1]}*"):
        client.delete(key)
    client.close()


def test_a_clean_start_deletes_the_example_s_keys_and_no_other(tmp_path: Path, prefix: str) -> None:
    client = Redis.from_url(REDIS_URL)
    client.set(f"{prefix}run:notification.send-due-reminders", "1")
    client.rpush(f"{prefix}notification", "an old message")
    backend = Backend("redis", tmp_path, REDIS_URL, prefix)

    deleted = backend.start_clean()

    assert deleted == 2
    assert list(client.scan_iter(match=f"{prefix}*")) == []
    assert client.get(f"{prefix[:-1]}-neighbour") == b"kept"
    client.close()


@pytest.mark.processes
def test_a_run_after_another_starts_clean_with_no_burst_and_no_stale_skip(
    tmp_path: Path, prefix: str
) -> None:
    environ = {
        "PATH": "/usr/bin:/bin",
        WEB_PORT: "0",
        BACKEND: "redis",
        DATA: str(tmp_path),
        PREFIX: prefix,
        "REDIS_URL": REDIS_URL,
    }
    client = Redis.from_url(REDIS_URL)
    # what a run killed mid-way leaves: a run in progress, an old checkpoint, a queued message
    client.hset(f"{prefix}run:notification.send-due-reminders", "running", "1")
    client.set(f"{prefix}checkpoint:notification.send-due-reminders", "1")
    client.rpush(f"{prefix}notification", "stale")
    client.close()

    finished = subprocess.run(
        [sys.executable, "-m", "examples.clinic.demo", "--for", "20"],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )

    output = finished.stdout
    assert finished.returncode == 0, output + finished.stderr
    assert f"keys under {prefix}" in output
    assert "skipped" not in output
    assert "Scheduled job missed" not in output
    assert "Scheduled job failed" not in output
    sent = re.findall(r"Sending due task notification\.send-due-reminders .* of (\S+)", output)
    assert len(sent) == len(set(sent)) >= 1


@pytest.mark.processes
def test_two_runs_at_once_on_one_redis_keep_to_their_own_keys_and_folders() -> None:
    # each run picks its own prefix and data folder: none is given
    # started together, both would find 8000 free: each page on a port of its own
    environ = {"PATH": "/usr/bin:/bin", BACKEND: "redis", "REDIS_URL": REDIS_URL, WEB_PORT: "0"}
    client = Redis.from_url(REDIS_URL)
    neighbour = f"{DEFAULT_PREFIX}neighbour-{uuid.uuid4().hex}"
    client.set(neighbour, "kept", ex=600)  # under the default prefix, another run's key
    command = ["timeout", "-s", "KILL", "120", sys.executable, "-m", "examples.clinic.demo"]
    runs = [
        subprocess.Popen(
            [*command, "--for", "30"],
            cwd=ROOT,
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=150)[0] for run in runs]

    prefixes = []
    for run, output in zip(runs, outputs, strict=True):
        assert run.returncode == 0, output
        mailed = Counter(re.findall(r"worker Reminder sent to (\S+) ", output))
        assert mailed == dict.fromkeys(PATIENTS, 1), output
        assert "skipped" not in output
        prefixes.append(re.findall(r"keys under (\S+) ", output)[0])
    assert prefixes[0] != prefixes[1]
    assert all(prefix.startswith(DEFAULT_PREFIX) for prefix in prefixes)
    for prefix in prefixes:
        assert list(client.scan_iter(match=f"{prefix}*")) == []  # deleted at its end
    assert client.get(neighbour) == b"kept"
    client.delete(neighbour)
    client.close()
