"""Compile a tenant's monthly statement, enqueued by the month close, retried when it fails."""

from __future__ import annotations

import logging

from pydantic import BaseModel

from ddd_celery import BackgroundJobExecution, background
from examples.clinic.billing.domain.month import Month
from examples.clinic.billing.domain.statement_archive import StatementArchive

logger = logging.getLogger(__name__)


class CompileStatementPayload(BaseModel):
    """The statement of ``month`` (``2026-03``); the tenant is the job's own."""

    month: str


@background(
    "billing.compile-monthly-statement", max_attempts=3, backoff_ms=2_000, max_backoff_ms=2_000
)
class CompileMonthlyStatementJob:
    """Safe to run twice: the archive keeps one statement per tenant and month."""

    def __init__(self, archive: StatementArchive) -> None:
        self._archive = archive

    def run(self, payload: CompileStatementPayload, execution: BackgroundJobExecution) -> None:
        if execution.tenant_id is None:
            raise ValueError("a statement is compiled for the tenant that closed its month")
        year, month = payload.month.split("-")
        compiled = self._archive.compile(execution.tenant_id, Month(int(year), int(month)))
        logger.info(
            "Statement %s %s for tenant %s (attempt %s)",
            payload.month,
            "compiled" if compiled else "already compiled",
            execution.tenant_id,
            execution.attempt,
        )
