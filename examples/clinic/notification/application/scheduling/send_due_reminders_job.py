"""Every 15 minutes, send the reminders due at that occurrence: the job only sends the command."""

from __future__ import annotations

from ddd_celery import JobExecution, scheduled
from ddd_celery.kernel import CommandBus, system_actor
from examples.clinic.notification.application.commands.send_due_reminders import (
    SendDueReminders,
)


@scheduled("notification.send-due-reminders", every="15m")
class SendDueRemindersJob:
    """Sends ``SendDueReminders`` as the job's system actor, as of the instant it was due."""

    def __init__(self, commands: CommandBus) -> None:
        self._commands = commands

    def run(self, execution: JobExecution) -> None:
        self._commands.execute(
            SendDueReminders(
                system_actor("notification.send-due-reminders"), execution.scheduled_at
            )
        )
