"""Where unexpected failures are sent (Sentry, a log, a test's list)."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any


class ErrorReporter(ABC):
    """Receives failures nobody expected; never raises back into the caller."""

    @abstractmethod
    def report(self, error: BaseException, context: Mapping[str, Any]) -> None:
        """Send ``error`` with ``context`` (job, correlation id, ...)."""


class LoggingErrorReporter(ErrorReporter):
    """Logs the failure with its traceback at error level."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self._logger = logger or logging.getLogger("ddd_celery.errors")

    def report(self, error: BaseException, context: Mapping[str, Any]) -> None:
        self._logger.error(
            "Unexpected error",
            exc_info=(type(error), error, error.__traceback__),
            extra=dict(context),
        )


class InMemoryErrorReporter(ErrorReporter):
    """Keeps what it was given, for assertions."""

    def __init__(self) -> None:
        self.reported: list[tuple[BaseException, dict[str, Any]]] = []

    def report(self, error: BaseException, context: Mapping[str, Any]) -> None:
        self.reported.append((error, dict(context)))
