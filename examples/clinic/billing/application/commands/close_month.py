"""CloseMonth: close a tenant's books for the month that had ended at an instant."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from ddd_celery.kernel import Actor, InMemoryUnitOfWork, JobQueue, UnitOfWork, require_aware
from examples.clinic.billing.application.background.compile_monthly_statement_job import (
    CompileMonthlyStatementJob,
    CompileStatementPayload,
)
from examples.clinic.billing.domain.closed_months import ClosedMonths
from examples.clinic.billing.domain.month import Month

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CloseMonth:
    """Close the books of ``tenant_id`` for the month that had ended at ``as_of``."""

    actor: Actor
    tenant_id: str
    as_of: datetime
    """The occurrence of the job: every run of it, late or twice, names the same month."""

    def __post_init__(self) -> None:
        require_aware(self.as_of, "as_of")


class CloseMonthHandler:
    """Idempotent by (tenant, month): the close is a row that cannot be inserted twice.

    Closing a month enqueues the compilation of its statement (a background job), in the same
    unit of work: published only once the close commits. Without ``jobs`` (closing alone, in
    its specs) nothing is enqueued.
    """

    def __init__(
        self,
        closed_months: ClosedMonths,
        jobs: JobQueue | None = None,
        unit_of_work: UnitOfWork | None = None,
    ) -> None:
        self._closed_months = closed_months
        self._jobs = jobs
        self._unit_of_work = unit_of_work or InMemoryUnitOfWork()

    def __call__(self, command: CloseMonth) -> bool:
        """Close the month; returns False when it was closed already (nothing is done again)."""
        month = Month.closed_by(command.as_of)
        with self._unit_of_work.begin():
            closed = self._closed_months.close(command.tenant_id, month, command.as_of)
            if closed and self._jobs is not None:
                self._jobs.enqueue(
                    CompileMonthlyStatementJob,
                    CompileStatementPayload(month=str(month)),
                    idempotency_key=f"statement:{month}",
                )
        if closed:
            logger.info("Month %s closed for tenant %s", month, command.tenant_id)
        else:
            logger.info("Month %s already closed for tenant %s", month, command.tenant_id)
        return closed
