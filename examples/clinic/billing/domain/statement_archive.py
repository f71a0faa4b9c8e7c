"""The StatementArchive port: where a tenant's monthly statement is compiled and kept."""

from __future__ import annotations

from abc import ABC, abstractmethod

from examples.clinic.billing.domain.month import Month


class ArchiveUnavailableError(ConnectionError):
    """The archive could not be reached: the statement was not kept, try again later."""


class StatementArchive(ABC):
    """Keeps one statement per (tenant, month): compiling it again replaces nothing."""

    @abstractmethod
    def compile(self, tenant_id: str, month: Month) -> bool:
        """Compile and keep the statement; False when it was kept already.

        Raises ``ArchiveUnavailableError`` when the archive cannot be reached.
        """
