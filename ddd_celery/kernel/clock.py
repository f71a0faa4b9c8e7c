"""Where every instant comes from: the system clock in production, a fixed one in specs."""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import UTC, datetime, timedelta

from ddd_celery.kernel.instants import require_aware


class Clock(ABC):
    """The only source of "now" for the library: adapters and the core never read the system."""

    @abstractmethod
    def now(self) -> datetime:
        """Return the current instant, an aware ``datetime`` in UTC."""


class SystemClock(Clock):
    """The wall clock of this machine, read in UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class FixedClock(Clock):
    """A clock that moves only when a test says so."""

    def __init__(self, at: datetime) -> None:
        self._now = require_aware(at, "at").astimezone(UTC)

    def now(self) -> datetime:
        return self._now

    def set(self, at: datetime) -> None:
        """Move to ``at``; a clock may be set back, as NTP sometimes does."""
        self._now = require_aware(at, "at").astimezone(UTC)

    def advance(self, by: int | timedelta) -> datetime:
        """Move forward by ``by`` (milliseconds or a ``timedelta``) and return the new instant."""
        delta = by if isinstance(by, timedelta) else timedelta(milliseconds=by)
        if delta < timedelta(0):
            raise ValueError(f"a clock advances by a positive duration, not {delta}")
        self._now += delta
        return self._now
