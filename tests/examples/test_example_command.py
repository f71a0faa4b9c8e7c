"""``./dev example`` on the embedded default: a real worker and beat, each reminder mailed once."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from examples.clinic.demo import PATIENTS
from examples.clinic.platform.backend import BACKEND, DATA

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.processes
def test_the_example_mails_each_reminder_once_and_closes_each_tenant_s_month_once(
    tmp_path: Path,
) -> None:
    environ = {"PATH": "/usr/bin:/bin", BACKEND: "embedded", DATA: str(tmp_path)}

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
