"""A Mailer that writes a log line instead of a mail: the demo shows it in the worker's output."""

from __future__ import annotations

import logging

from examples.clinic.notification.application.mailer import Mailer

logger = logging.getLogger(__name__)


class LoggingMailer(Mailer):
    """Logs ``Reminder sent to <address>`` at INFO, once per reminder sent."""

    def send_reminder(self, *, to: str, reminder_id: str, appointment_id: str) -> None:
        logger.info(
            "Reminder sent to %s (reminder %s, appointment %s)", to, reminder_id, appointment_id
        )
