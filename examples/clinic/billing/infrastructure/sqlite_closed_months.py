"""Closed months in the clinic's SQLite file: the primary key (tenant, month) is the guard."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from examples.clinic.billing.domain.closed_months import ClosedMonths
from examples.clinic.billing.domain.month import Month
from examples.clinic.platform.database import to_text, transaction

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS closed_months (
        tenant_id TEXT NOT NULL,
        month TEXT NOT NULL,
        closed_as_of TEXT NOT NULL,
        PRIMARY KEY (tenant_id, month)
    )""",
)


class SqliteClosedMonths(ClosedMonths):
    """``INSERT OR IGNORE`` on the key: whatever any process believes, a month closes once."""

    def __init__(self, path: Path) -> None:
        self._path = path

    def close(self, tenant_id: str, month: Month, closed_as_of: datetime) -> bool:
        with transaction(self._path, _SCHEMA) as db:
            inserted = db.execute(
                "INSERT OR IGNORE INTO closed_months VALUES (?, ?, ?)",
                (tenant_id, str(month), to_text(closed_as_of)),
            ).rowcount
        return inserted == 1
