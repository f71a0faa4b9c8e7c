"""Statements in the clinic's SQLite file, behind an archive that is down at each first try.

The first try of each statement fails with ``ArchiveUnavailableError``, as an archive service
that was briefly down would: the demo shows its background job retried after its backoff.
"""

from __future__ import annotations

from pathlib import Path

from examples.clinic.billing.domain.month import Month
from examples.clinic.billing.domain.statement_archive import (
    ArchiveUnavailableError,
    StatementArchive,
)
from examples.clinic.platform.database import transaction

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS statements (
        tenant_id TEXT NOT NULL,
        month TEXT NOT NULL,
        tries INTEGER NOT NULL,
        compiled INTEGER NOT NULL,
        PRIMARY KEY (tenant_id, month)
    )""",
)


class SqliteStatementArchive(StatementArchive):
    """One row per (tenant, month): its tries, and whether it is compiled."""

    def __init__(self, path: Path) -> None:
        self._path = path

    def compile(self, tenant_id: str, month: Month) -> bool:
        with transaction(self._path, _SCHEMA) as db:
            db.execute(
                "INSERT INTO statements VALUES (?, ?, 1, 0) ON CONFLICT (tenant_id, month) "
                "DO UPDATE SET tries = tries + 1",
                (tenant_id, str(month)),
            )
            tries, compiled = db.execute(
                "SELECT tries, compiled FROM statements WHERE tenant_id = ? AND month = ?",
                (tenant_id, str(month)),
            ).fetchone()
            if compiled:
                return False
            if tries > 1:
                db.execute(
                    "UPDATE statements SET compiled = 1 WHERE tenant_id = ? AND month = ?",
                    (tenant_id, str(month)),
                )
                return True
        raise ArchiveUnavailableError("the statement archive did not answer")
