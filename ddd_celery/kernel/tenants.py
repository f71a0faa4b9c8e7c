"""The tenants a per-tenant job runs for."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable


class TenantDirectory(ABC):
    """Lists the tenants of the application, asked once per occurrence of a per-tenant job."""

    @abstractmethod
    def tenants(self) -> list[str]:
        """The tenant ids, in the order their runs happen."""


class InMemoryTenantDirectory(TenantDirectory):
    """A fixed list of tenants."""

    def __init__(self, tenants: Iterable[str] = ()) -> None:
        self._tenants = list(tenants)

    def tenants(self) -> list[str]:
        return list(self._tenants)

    def add(self, tenant: str) -> None:
        self._tenants.append(tenant)
