"""CloseMonth: close a tenant's books for the month that had ended at an instant."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from ddd_celery.kernel import Actor, require_aware
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
    """Idempotent by (tenant, month): the close is a row that cannot be inserted twice."""

    def __init__(self, closed_months: ClosedMonths) -> None:
        self._closed_months = closed_months

    def __call__(self, command: CloseMonth) -> bool:
        """Close the month; returns False when it was closed already (nothing is done again)."""
        month = Month.closed_by(command.as_of)
        closed = self._closed_months.close(command.tenant_id, month, command.as_of)
        if closed:
            logger.info("Month %s closed for tenant %s", month, command.tenant_id)
        else:
            logger.info("Month %s already closed for tenant %s", month, command.tenant_id)
        return closed
