"""The Mailer port: how a patient is told, whatever sends the mail."""

from __future__ import annotations

from abc import ABC, abstractmethod


class Mailer(ABC):
    """Sends messages to patients."""

    @abstractmethod
    def send_reminder(self, *, to: str, reminder_id: str, appointment_id: str) -> None:
        """Send the reminder of ``appointment_id`` to the address ``to``."""
