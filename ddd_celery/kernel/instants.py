"""Helpers that keep every instant aware and in UTC, as the public API promises."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


def require_aware(value: datetime, name: str = "instant") -> datetime:
    """Refuse a naive ``datetime``: its meaning depends on the machine, never guessed here."""
    if not isinstance(value, datetime):
        raise TypeError(f"{name} must be a datetime, not {type(value).__name__}")
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise ValueError(f"{name} must be an aware datetime (with a tzinfo), got naive {value!r}")
    return value


def to_utc(value: datetime, name: str = "instant") -> datetime:
    """The same instant as an aware UTC ``datetime``."""
    return require_aware(value, name).astimezone(UTC)


TYPED_FROM = datetime(1970, 1, 1, tzinfo=UTC)
TYPED_UNTIL = datetime(9999, 12, 31, tzinfo=UTC)
"""The instants an operator may type (``run-now --at``, ``--enqueued-since``): from the Unix
epoch, where schedules start, to a day short of ``datetime``'s end, so that the arithmetic on
them (a tick before, a page's bound) stays a date."""


def typed_instant(at: datetime, text: str) -> datetime:
    """``at``, an aware instant read from ``text``, in UTC once it falls in the typed range.

    Raises:
        ValueError: out of the range (``0001-01-01T00:00:00+01:00`` is no UTC instant at all).
    """
    try:
        utc = at.astimezone(UTC)
    except OverflowError:
        utc = None
    if utc is None or not TYPED_FROM <= utc < TYPED_UNTIL:
        raise ValueError(f"{text!r} is not between 1970-01-01 and 9999-12-31 in UTC")
    return utc


def iso_ms(value: datetime) -> str:
    """ISO 8601 in UTC with milliseconds and ``Z``: ``2026-03-02T06:00:00.000Z``.

    ``isoformat`` is several times faster than ``strftime`` (``jobs list`` writes three instants
    per job); before the year 1000, where ``strftime`` writes the year unpadded, it is kept.
    """
    utc = to_utc(value)
    if utc.year < 1000:
        return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"
    return utc.isoformat(timespec="milliseconds")[:-6] + "Z"


def epoch_ms(value: datetime) -> int:
    """Whole milliseconds since the Unix epoch (floor)."""
    return (to_utc(value) - EPOCH) // _MS


def from_epoch_ms(value: int) -> datetime:
    """The aware UTC instant ``value`` milliseconds after the Unix epoch."""
    return EPOCH + value * _MS


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
