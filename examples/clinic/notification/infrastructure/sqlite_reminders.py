"""Reminders in the clinic's SQLite file, shared by the worker, beat and the demo."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from examples.clinic.notification.domain.reminder import (
    Reminder,
    ReminderRepository,
    StaleReminderError,
)
from examples.clinic.platform.database import from_text, to_text, transaction

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS reminders (
        id TEXT PRIMARY KEY,
        appointment_id TEXT NOT NULL,
        recipient TEXT NOT NULL,
        due_at TEXT NOT NULL,
        sent_at TEXT,
        version INTEGER NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS reminders_not_sent ON reminders (due_at) WHERE sent_at IS NULL",
)


class SqliteReminderRepository(ReminderRepository):
    """One row per reminder; a save is refused when the row's version moved since the read."""

    def __init__(self, path: Path) -> None:
        self._path = path

    def find_due(self, as_of: datetime) -> list[Reminder]:
        with transaction(self._path, _SCHEMA) as db:
            rows = db.execute(
                "SELECT id, appointment_id, recipient, due_at, version FROM reminders "
                "WHERE sent_at IS NULL AND due_at <= ? ORDER BY due_at, id",
                (to_text(as_of),),
            ).fetchall()
        return [
            Reminder(
                id,
                appointment_id=appointment_id,
                recipient=recipient,
                due_at=from_text(due_at),
                version=version,
            )
            for id, appointment_id, recipient, due_at, version in rows
        ]

    def save(self, reminder: Reminder) -> None:
        sent_at = None if reminder.sent_at is None else to_text(reminder.sent_at)
        with transaction(self._path, _SCHEMA) as db:
            saved = db.execute(
                "INSERT INTO reminders VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET sent_at = excluded.sent_at, "
                "version = excluded.version WHERE reminders.version = ?",
                (
                    reminder.id,
                    reminder.appointment_id,
                    reminder.recipient,
                    to_text(reminder.due_at),
                    sent_at,
                    reminder.version + 1,
                    reminder.version,
                ),
            ).rowcount
        if saved != 1:
            raise StaleReminderError(f"reminder {reminder.id} was saved by another run first")
        reminder.version += 1
