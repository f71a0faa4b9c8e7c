"""The Reminder aggregate: it knows whether it is still due, so sending twice finds nothing left."""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime

from ddd_celery.kernel import DomainError, require_aware

REMINDER_NOT_DUE = "REMINDER_NOT_DUE"


class ReminderError(DomainError):
    """A refusal of the Reminder aggregate."""

    @classmethod
    def not_due(cls, reminder_id: str) -> ReminderError:
        return cls(
            REMINDER_NOT_DUE, f"Reminder {reminder_id} is not due.", {"reminder_id": reminder_id}
        )


class Reminder:
    """A reminder of an appointment, sent to the patient once it falls due.

    ``version`` counts the saves of the aggregate, so a store can refuse a save made from a
    stale read (see ``ReminderRepository.save``).
    """

    def __init__(
        self,
        id: str,
        *,
        appointment_id: str,
        recipient: str,
        due_at: datetime,
        sent_at: datetime | None = None,
        version: int = 0,
    ) -> None:
        self.id = id
        self.appointment_id = appointment_id
        self.recipient = recipient
        self.due_at = require_aware(due_at, "due_at")
        self._sent_at = sent_at
        self.version = version

    @classmethod
    def plan(cls, id: str, *, appointment_id: str, recipient: str, due_at: datetime) -> Reminder:
        """A reminder not sent yet, due at ``due_at``."""
        return cls(id, appointment_id=appointment_id, recipient=recipient, due_at=due_at)

    @property
    def sent_at(self) -> datetime | None:
        """The instant the reminder was sent as of, None while it was not."""
        return self._sent_at

    def is_due(self, as_of: datetime) -> bool:
        """Due and not yet sent: a second run finds nothing left to do."""
        return self._sent_at is None and self.due_at <= require_aware(as_of, "as_of")

    def send(self, as_of: datetime) -> None:
        """Mark the reminder sent as of ``as_of``; refused (REMINDER_NOT_DUE) unless due."""
        if not self.is_due(as_of):
            raise ReminderError.not_due(self.id)
        self._sent_at = as_of


class StaleReminderError(Exception):
    """The reminder was saved by someone else since it was read: this save is refused."""


class ReminderRepository(ABC):
    """Where reminders are kept, shared by every process of the application."""

    @abstractmethod
    def find_due(self, as_of: datetime) -> list[Reminder]:
        """Every reminder due at that instant and not sent yet, whatever day it was due."""

    @abstractmethod
    def save(self, reminder: Reminder) -> None:
        """Insert a new reminder or update the one read, then count the save in its version.

        Raises ``StaleReminderError`` when the stored version is no longer the one read: two
        runs that read the same due reminder cannot both record it sent.
        """
