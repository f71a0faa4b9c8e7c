"""``python -m examples.clinic.booking.demo`` runs the booking for real and says what happened."""

from __future__ import annotations

import subprocess
import sys

import pytest
from process_support import HERE

pytestmark = pytest.mark.processes


def test_the_booking_demo_confirms_the_paid_booking_and_releases_the_unpaid_slot() -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "examples.clinic.booking.demo"],
        cwd=HERE.parents[1],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    lines = ran.stdout.splitlines()
    assert [line.split("] ", 1)[1].split("(")[0] for line in lines if "command " in line] == [
        "command RequestPayment",
        "command RequestPayment",
        "command ConfirmAppointment",
        "command ReleaseSlot",
    ]
    assert "bookings: {'a-1': 'confirmed', 'a-2': 'released'}" in lines[-1]
