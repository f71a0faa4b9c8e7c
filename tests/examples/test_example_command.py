"""``./dev example`` on the embedded default: a real worker and beat, each reminder mailed once."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from examples.clinic.demo import PATIENTS, WEB_PORT
from examples.clinic.platform.backend import BACKEND, DATA

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.processes
def test_the_example_mails_each_reminder_once_and_closes_each_tenant_s_month_once(
    tmp_path: Path,
) -> None:
    environ = {"PATH": "/usr/bin:/bin", WEB_PORT: "0", BACKEND: "embedded", DATA: str(tmp_path)}

    # the Python entry ./dev example wraps, without its install step
    finished = subprocess.run(
        [sys.executable, "-m", "examples.clinic.demo", "--for", "30"],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )

    output = finished.stdout
    assert finished.returncode == 0, output + finished.stderr
    assert "Backend: the embedded default, no server" in output
    mailed = Counter(re.findall(r"worker Reminder sent to (\S+) ", output))
    assert mailed == dict.fromkeys(PATIENTS, 1)
    assert "Scheduled job failed" not in output
    succeeded = Counter(re.findall(r"Scheduled job succeeded\b.*?\bjob=(\S+)", output))
    assert succeeded["notification.send-due-reminders"] >= 2
    assert succeeded["billing.close-month"] >= 1
    closed = Counter(re.findall(r"Month (\S+) closed for tenant (\S+)", output))
    assert {tenant for _, tenant in closed} == {"clinic-lyon", "clinic-paris"}
    assert set(closed.values()) == {1}
    assert "no reminder was mailed twice" in output


@pytest.mark.processes
def test_the_example_serves_the_operator_s_page_and_prints_its_address(tmp_path: Path) -> None:
    """The page answers, read-only, on the embedded default while the example runs."""
    environ = {"PATH": "/usr/bin:/bin", WEB_PORT: "0", BACKEND: "embedded", DATA: str(tmp_path)}
    with subprocess.Popen(
        [sys.executable, "-m", "examples.clinic.demo", "--for", "25"],
        cwd=ROOT,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as demo:
        assert demo.stdout is not None
        address = None
        for line in demo.stdout:
            found = re.search(r"The operator's page: (http://127\.0\.0\.1:\d+/) \(read-only", line)
            if found:
                address = found.group(1)
                break
        try:
            assert address is not None, "the example printed no address for its page"
            page = _get_when_up(f"{address}scheduled")
        finally:
            rest, _ = demo.communicate(timeout=120)
    assert demo.returncode == 0, rest
    assert "notification.send-due-reminders" in page
    assert "billing.close-month" in page


def _get_when_up(url: str) -> str:
    """The page at ``url`` once its server answers (it starts beside the worker and beat)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                text: str = answer.read().decode()
                return text
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
