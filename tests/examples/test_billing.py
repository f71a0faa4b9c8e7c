"""The month close: once per tenant and month, whatever runs it and however often."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ddd_celery.celery import run_now
from ddd_celery.kernel import FixedClock, system_actor
from examples.clinic.app import CLINICS, create_app
from examples.clinic.billing.application.commands.close_month import (
    CloseMonth,
    CloseMonthHandler,
)
from examples.clinic.billing.domain.month import Month
from examples.clinic.billing.infrastructure.sqlite_closed_months import SqliteClosedMonths

JOB = "billing.close-month"
ACTOR = system_actor(JOB)
FIRST_OF_APRIL = datetime(2026, 4, 1, 0, 0, tzinfo=UTC)  # 02:00 in Paris (UTC+2)


def closed_months(database: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(database) as connection:
        rows = connection.execute("SELECT tenant_id, month FROM closed_months ORDER BY 1, 2")
        return [(tenant, month) for tenant, month in rows]


def test_the_job_closes_the_month_that_ended_once_per_tenant(
    environ: dict[str, str], database: Path
) -> None:
    app = create_app(environ, clock=FixedClock(FIRST_OF_APRIL))

    run_now(app, JOB)

    assert closed_months(database) == [(tenant, "2026-03") for tenant in CLINICS]


def test_the_same_occurrence_run_twice_closes_each_tenant_s_month_once(
    environ: dict[str, str], database: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(environ, clock=FixedClock(FIRST_OF_APRIL))
    caplog.set_level("INFO", logger="examples.clinic")

    run_now(app, JOB)
    run_now(app, JOB)

    assert closed_months(database) == [(tenant, "2026-03") for tenant in CLINICS]
    assert [record.getMessage() for record in caplog.records if "Month" in record.message] == [
        "Month 2026-03 closed for tenant clinic-lyon",
        "Month 2026-03 closed for tenant clinic-paris",
        "Month 2026-03 already closed for tenant clinic-lyon",
        "Month 2026-03 already closed for tenant clinic-paris",
    ]


def test_the_handler_is_idempotent_by_tenant_and_month(database: Path) -> None:
    handler = CloseMonthHandler(SqliteClosedMonths(database))

    assert handler(CloseMonth(ACTOR, "clinic-lyon", FIRST_OF_APRIL)) is True
    assert handler(CloseMonth(ACTOR, "clinic-lyon", datetime(2026, 4, 20, tzinfo=UTC))) is False
    assert handler(CloseMonth(ACTOR, "clinic-paris", FIRST_OF_APRIL)) is True
    assert handler(CloseMonth(ACTOR, "clinic-lyon", datetime(2026, 5, 1, tzinfo=UTC))) is True
    assert closed_months(database) == [
        ("clinic-lyon", "2026-03"),
        ("clinic-lyon", "2026-04"),
        ("clinic-paris", "2026-03"),
    ]


@pytest.mark.parametrize(
    ("instant", "closed"),
    [
        (datetime(2026, 4, 1, 0, 0, tzinfo=UTC), Month(2026, 3)),  # 02:00 on 1 April in Paris
        (datetime(2026, 3, 31, 21, 59, tzinfo=UTC), Month(2026, 2)),  # 23:59 on 31 March
        (datetime(2026, 1, 1, 1, 0, tzinfo=UTC), Month(2025, 12)),  # 02:00 on 1 January
    ],
)
def test_the_month_closed_is_the_last_that_ended_on_the_clinic_s_clocks(
    instant: datetime, closed: Month
) -> None:
    assert Month.closed_by(instant) == closed


def test_a_month_reads_as_year_and_month() -> None:
    assert str(Month(2026, 3)) == "2026-03"
    with pytest.raises(ValueError, match="1 to 12"):
        Month(2026, 13)
