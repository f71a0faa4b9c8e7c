"""Test doubles of the clinic's ports, shared by its specs."""

from __future__ import annotations

from datetime import UTC, datetime

from examples.clinic.notification.application.mailer import Mailer

NOW = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
"""The instant of the fixed clock in the clinic's specs."""


class RecordingMailer(Mailer):
    """Keeps what it was asked to send, as (address, reminder, appointment)."""

    def __init__(self) -> None:
        self.delivered: list[tuple[str, str, str]] = []

    def send_reminder(self, *, to: str, reminder_id: str, appointment_id: str) -> None:
        self.delivered.append((to, reminder_id, appointment_id))
