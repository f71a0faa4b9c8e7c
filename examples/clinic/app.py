"""The clinic on Celery: ``celery -A examples.clinic.app worker`` and ``... beat``.

The composition root: it builds the adapters, binds them to the ports the handlers take, and
installs the declared jobs with one ``install_jobs`` call, then the background jobs with
``install_background_jobs``. Every scheduled job gets a ``CommandBus``, the month close a
``JobQueue`` for its statement; nothing else of the application knows about Celery.
Configuration, not code, decides the rest: the backend (``platform/backend.py``), the tenants,
and with ``DEMO=1`` the job settings of ``demo.toml``.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from celery import Celery

from ddd_celery import collect_background_jobs, collect_scheduled_jobs
from ddd_celery.celery import install_background_jobs, install_jobs
from ddd_celery.kernel import (
    Clock,
    CommandBus,
    InMemoryCommandBus,
    InMemoryTenantDirectory,
    InMemoryUnitOfWork,
    SystemClock,
)
from examples.clinic.billing.application.commands.close_month import (
    CloseMonth,
    CloseMonthHandler,
)
from examples.clinic.billing.domain.statement_archive import StatementArchive
from examples.clinic.billing.infrastructure.sqlite_closed_months import SqliteClosedMonths
from examples.clinic.billing.infrastructure.sqlite_statement_archive import (
    SqliteStatementArchive,
)
from examples.clinic.notification.application.commands.send_due_reminders import (
    SendDueReminders,
    SendDueRemindersHandler,
)
from examples.clinic.notification.application.mailer import Mailer
from examples.clinic.notification.infrastructure.logging_mailer import LoggingMailer
from examples.clinic.notification.infrastructure.sqlite_reminders import (
    SqliteReminderRepository,
)
from examples.clinic.platform.backend import choose_backend
from examples.clinic.platform.background import job_store

CLINICS = ("clinic-lyon", "clinic-paris")
"""The tenants: each clinic closes its own books."""

DEMO_SETTINGS = Path(__file__).with_name("demo.toml")


def create_app(
    environ: Mapping[str, str], *, clock: Clock | None = None, mailer: Mailer | None = None
) -> Celery:
    """The clinic's Celery app for ``environ``; ``clock`` and ``mailer`` are for tests."""
    backend = choose_backend(environ)
    backend.prepare()
    clock = clock or SystemClock()
    mailer = mailer or LoggingMailer()
    database = backend.clinic_database

    unit_of_work = InMemoryUnitOfWork()

    def command_bus() -> CommandBus:
        bus = InMemoryCommandBus()
        bus.register(
            SendDueReminders,
            SendDueRemindersHandler(SqliteReminderRepository(database), mailer),
        )
        statements = background.queue(unit_of_work=unit_of_work)
        bus.register(
            CloseMonth, CloseMonthHandler(SqliteClosedMonths(database), statements, unit_of_work)
        )
        return bus

    app = Celery("clinic")
    app.conf.update(backend.celery_settings(), task_ignore_result=True, enable_utc=True)
    stores = backend.stores(clock)  # None on Redis: app.conf describes them
    install_jobs(
        app,
        jobs=collect_scheduled_jobs("examples.clinic.notification", "examples.clinic.billing"),
        providers={CommandBus: command_bus},
        **({} if stores is None else stores.arguments()),
        tenants=InMemoryTenantDirectory(CLINICS),
        settings=job_settings(environ),
        environ=environ,
        clock=clock,
    )
    background = install_background_jobs(
        app,
        jobs=collect_background_jobs("examples.clinic.billing"),
        store=job_store(backend),
        providers={StatementArchive: lambda: SqliteStatementArchive(database)},
    )
    return app


def job_settings(environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings of this environment: ``demo.toml`` with ``DEMO=1``, else the declarations."""
    if environ.get("DEMO") != "1":
        return {}
    with DEMO_SETTINGS.open("rb") as file:
        return tomllib.load(file)


app = create_app(os.environ)
