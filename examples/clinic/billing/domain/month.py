"""A calendar month of the clinic's books, and which one an instant closes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from ddd_celery.kernel import require_aware

BOOKS_TIME_ZONE = ZoneInfo("Europe/Paris")
"""The books are kept on the clinic's clocks: a month starts at midnight in Paris."""


@dataclass(frozen=True, order=True, slots=True)
class Month:
    """A month of the books, written ``2026-03``."""

    year: int
    month: int

    def __post_init__(self) -> None:
        if not 1 <= self.month <= 12:
            raise ValueError(f"a month is 1 to 12, not {self.month}")

    @classmethod
    def closed_by(cls, instant: datetime) -> Month:
        """The last month that had ended at ``instant``: closing on 1 April closes March."""
        local = require_aware(instant, "instant").astimezone(BOOKS_TIME_ZONE)
        if local.month == 1:
            return cls(local.year - 1, 12)
        return cls(local.year, local.month - 1)

    def __str__(self) -> str:
        return f"{self.year:04d}-{self.month:02d}"
