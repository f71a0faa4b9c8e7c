"""The ClosedMonths port: the record that a tenant's month is closed, kept once."""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime

from examples.clinic.billing.domain.month import Month


class ClosedMonths(ABC):
    """The months each tenant has closed, keyed by (tenant, month) behind a unique constraint."""

    @abstractmethod
    def close(self, tenant_id: str, month: Month, closed_as_of: datetime) -> bool:
        """Record ``month`` closed for ``tenant_id``; False, changing nothing, when it already was.

        Atomic: of two runs closing the same month at once, exactly one gets True.
        """
