"""SendDueReminders: the use case the job triggers, where the loop and the rule belong."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ddd_celery.kernel import Actor, require_aware
from examples.clinic.notification.application.mailer import Mailer
from examples.clinic.notification.domain.reminder import ReminderRepository


@dataclass(frozen=True, slots=True)
class SendDueReminders:
    """Send every reminder due at ``as_of`` and not sent yet."""

    actor: Actor
    as_of: datetime
    """The instant the reminders are due at: the occurrence of the job, never when it ran."""

    def __post_init__(self) -> None:
        require_aware(self.as_of, "as_of")


class SendDueRemindersHandler:
    """Sends each due reminder once, however many times the command is sent for one instant.

    The work is derived from the state: a reminder sent is no longer due, so a second run of
    the same occurrence finds nothing left. The save comes before the mail and is refused when
    another run saved the reminder first, so two runs at once cannot both mail it.
    """

    def __init__(self, reminders: ReminderRepository, mailer: Mailer) -> None:
        self._reminders = reminders
        self._mailer = mailer

    def __call__(self, command: SendDueReminders) -> int:
        """Send the due reminders; returns how many were sent."""
        sent = 0
        for reminder in self._reminders.find_due(command.as_of):
            reminder.send(command.as_of)
            self._reminders.save(reminder)
            self._mailer.send_reminder(
                to=reminder.recipient,
                reminder_id=reminder.id,
                appointment_id=reminder.appointment_id,
            )
            sent += 1
        return sent
