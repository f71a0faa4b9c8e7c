"""Reminders: each due reminder is mailed once, however often the same occurrence runs."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from clinic_fakes import NOW, RecordingMailer

from ddd_celery.celery import run_now
from ddd_celery.kernel import DomainError, FixedClock, system_actor
from examples.clinic.app import create_app
from examples.clinic.notification.application.commands.send_due_reminders import (
    SendDueReminders,
    SendDueRemindersHandler,
)
from examples.clinic.notification.domain.reminder import (
    REMINDER_NOT_DUE,
    Reminder,
    StaleReminderError,
)
from examples.clinic.notification.infrastructure.sqlite_reminders import (
    SqliteReminderRepository,
)

JOB = "notification.send-due-reminders"
ACTOR = system_actor(JOB)


def a_reminder(number: int, due_at: timedelta = timedelta(0)) -> Reminder:
    return Reminder.plan(
        f"reminder-{number}",
        appointment_id=f"appointment-{number}",
        recipient=f"patient-{number}@example.test",
        due_at=NOW + due_at,
    )


def delivery(number: int) -> tuple[str, str, str]:
    return (f"patient-{number}@example.test", f"reminder-{number}", f"appointment-{number}")


def test_the_job_mails_each_due_reminder_once_when_the_same_occurrence_runs_twice(
    environ: dict[str, str], clock: FixedClock, mailer: RecordingMailer, database: Path
) -> None:
    app = create_app(environ, clock=clock, mailer=mailer)
    SqliteReminderRepository(database).save(a_reminder(1, due_at=-timedelta(hours=1)))

    run_now(app, JOB)
    run_now(app, JOB)

    assert mailer.delivered == [delivery(1)]


def test_the_job_sends_the_reminders_due_at_its_occurrence_and_not_later_ones(
    environ: dict[str, str], clock: FixedClock, mailer: RecordingMailer, database: Path
) -> None:
    app = create_app(environ, clock=clock, mailer=mailer)
    reminders = SqliteReminderRepository(database)
    reminders.save(a_reminder(1))
    reminders.save(a_reminder(2, due_at=timedelta(milliseconds=1)))

    run_now(app, JOB)

    assert mailer.delivered == [delivery(1)]


def test_a_reminder_not_due_at_one_run_is_mailed_by_a_later_one(
    database: Path, mailer: RecordingMailer
) -> None:
    reminders = SqliteReminderRepository(database)
    reminders.save(a_reminder(1, due_at=timedelta(minutes=10)))
    handler = SendDueRemindersHandler(reminders, mailer)

    assert handler(SendDueReminders(ACTOR, NOW)) == 0
    assert handler(SendDueReminders(ACTOR, NOW + timedelta(minutes=15))) == 1
    assert mailer.delivered == [delivery(1)]


def test_a_reminder_missed_for_days_is_still_mailed_once(
    database: Path, mailer: RecordingMailer
) -> None:
    reminders = SqliteReminderRepository(database)
    reminders.save(a_reminder(1, due_at=-timedelta(days=3)))
    handler = SendDueRemindersHandler(reminders, mailer)

    handler(SendDueReminders(ACTOR, NOW))
    handler(SendDueReminders(ACTOR, NOW + timedelta(minutes=15)))

    assert mailer.delivered == [delivery(1)]


def test_of_two_runs_that_read_the_same_due_reminder_only_the_first_to_save_mails_it(
    database: Path, mailer: RecordingMailer
) -> None:
    reminders = SqliteReminderRepository(database)
    reminders.save(a_reminder(1))
    [read_by_first] = reminders.find_due(NOW)
    [read_by_second] = reminders.find_due(NOW)
    SendDueRemindersHandler(reminders, mailer)(SendDueReminders(ACTOR, NOW))
    read_by_second.send(NOW)

    with pytest.raises(StaleReminderError):
        reminders.save(read_by_second)
    assert read_by_first.version == read_by_second.version
    assert mailer.delivered == [delivery(1)]


def test_a_reminder_is_due_until_it_is_sent() -> None:
    reminder = a_reminder(1)

    assert not reminder.is_due(NOW - timedelta(milliseconds=1))
    assert reminder.is_due(NOW)
    reminder.send(NOW)
    assert not reminder.is_due(NOW + timedelta(days=1))
    assert reminder.sent_at == NOW


def test_sending_a_reminder_that_is_not_due_is_refused_with_reminder_not_due() -> None:
    reminder = a_reminder(1, due_at=timedelta(minutes=1))

    with pytest.raises(DomainError) as refused:
        reminder.send(NOW)

    assert refused.value.code == REMINDER_NOT_DUE
    assert refused.value.details == {"reminder_id": "reminder-1"}
    assert reminder.sent_at is None
