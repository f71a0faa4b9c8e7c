"""Schedules: read once, checked whole, described the same way on every screen.

A schedule is a mapping, ``{"every": "15m"}`` or ``{"cron": "0 7 * * 1-5", "time_zone":
"Europe/Paris"}``, with the job's options next to it. ``parse_job_schedule`` turns it into a
``ParsedJobSchedule`` or refuses it with a ``DeclarationError`` that says which key is wrong and
why, so a bad schedule fails when its module is imported rather than when it should have run.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ddd_celery.declarations.cron import CronFields, parse_cron
from ddd_celery.declarations.errors import DeclarationError
from ddd_celery.declarations.options import (
    JobOptions,
    MissedPolicy,
    OverlapPolicy,
    Tenancy,
    TenantRuns,
)

_UNITS = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1_000, "ms": 1}
_MAX_DIGITS = 12
"""More digits than that is more than 366 days in any unit; ``int`` is never asked to read it."""
_EVERY = re.compile(r"([0-9]+)(ms|s|m|h|d)")
_ZONE_NAME = re.compile(r"[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*")
"""IANA names are words joined by '/': anything else (a path, '..') is never looked up."""
_MS = timedelta(milliseconds=1)

MAX_EVERY_MS = 366 * 86_400_000
"""The longest interval: a year and a day. Longer ones would fall past the year 9999 for most
of the calendar; what runs yearly is a cron (``0 0 1 1 *``)."""
_Frozen = TypeVar("_Frozen", bound=Hashable)

MAX_TIMEOUT_MS = 7 * 86_400_000
"""A week: the lock of an occurrence lives this long, and stores refuse absurd times to live."""
MAX_JITTER_MS = 86_400_000
"""A day: a jitter longer than that is a schedule of its own."""


@dataclass(frozen=True, slots=True)
class IntervalRule:
    """Every ``every_ms`` milliseconds, on the multiples of it since the Unix epoch.

    Aligned on the epoch rather than on the start of a process, so every instance names the
    same instants and a restart keeps them: ``15m`` falls at :00, :15, :30 and :45 UTC.
    """

    every_ms: int

    def __post_init__(self) -> None:
        if isinstance(self.every_ms, bool) or not isinstance(self.every_ms, int):
            raise DeclarationError(f"'every' must be an int of milliseconds, got {self.every_ms!r}")
        if self.every_ms <= 0:
            raise DeclarationError(f"'every' must be positive, got {self.every_ms} ms")
        if self.every_ms > MAX_EVERY_MS:
            raise DeclarationError(
                f"'every' must be at most 366 days ({MAX_EVERY_MS} ms), got {self.every_ms} ms; "
                "write a cron such as '0 0 1 1 *' for a yearly job"
            )

    @property
    def description(self) -> str:
        """``every 15m``: the largest unit that divides the interval exactly."""
        unit, size = next((u, s) for u, s in _UNITS.items() if self.every_ms % s == 0)
        return f"every {self.every_ms // size}{unit}"


@dataclass(frozen=True, slots=True)
class CronRule:
    """A five-field cron expression read on the wall clocks of an IANA time zone.

    Built directly (``CronRule("0 7 * * 1-5", "Europe/Paris")``) it is checked the same way as
    through ``parse_job_schedule``; ``fields`` and ``zone`` are derived, never given.
    """

    expression: str
    time_zone: str = "UTC"
    fields: CronFields = field(init=False, repr=False, compare=False)
    zone: ZoneInfo = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.expression, str):
            raise DeclarationError(f"'cron' must be a string, got {self.expression!r}")
        expression = " ".join(self.expression.split())
        object.__setattr__(self, "expression", expression)
        object.__setattr__(self, "fields", parse_cron(expression))
        object.__setattr__(self, "zone", _zone(self.time_zone))

    @property
    def pinned(self) -> bool:
        """True unless the hour field starts with ``*``: then the job follows elapsed time."""
        return self.fields.pinned

    @property
    def description(self) -> str:
        return f"cron {self.expression} ({self.time_zone})"


@dataclass(frozen=True, slots=True)
class ParsedJobSchedule:
    """A schedule and the options written next to it, every value checked."""

    rule: IntervalRule | CronRule
    options: JobOptions = field(default_factory=JobOptions)

    @property
    def description(self) -> str:
        """``every 15m`` or ``cron 0 7 * * 1-5 (Europe/Paris)``, as screens and logs show it."""
        return self.rule.description


def parse_job_schedule(
    schedule: Mapping[str, Any] | ParsedJobSchedule, *, job: str | None = None
) -> ParsedJobSchedule:
    """Check a whole schedule mapping; a parsed schedule is returned as it is.

    Raises ``DeclarationError`` naming ``job`` (when given) for an unknown key, neither or both
    of ``every`` and ``cron``, a cron that cannot be read or never fires, a zero or negative
    interval, an unknown time zone, or an option out of its values.
    """
    if isinstance(schedule, ParsedJobSchedule):
        return schedule
    try:
        if not isinstance(schedule, Mapping):
            raise DeclarationError(
                "a schedule is a mapping such as {'every': '15m'} or {'cron': '0 7 * * *'}, "
                f"not {type(schedule).__name__}"
            )
        return _shared(ParsedJobSchedule(_shared(_rule(schedule)), _shared(_options(schedule))))
    except DeclarationError as error:
        if job is None or error.job is not None:
            raise
        raise DeclarationError(error.problem, job=job) from None


def describe_job_schedule(schedule: Mapping[str, Any] | ParsedJobSchedule) -> str:
    """``every 15m`` or ``cron 0 7 * * 1-5 (Europe/Paris)``; refuses what ``parse`` refuses."""
    return parse_job_schedule(schedule).description


def _rule(schedule: Mapping[str, Any]) -> IntervalRule | CronRule:
    unknown = [key for key in schedule if key not in _OPTIONS and key not in _RULE_KEYS]
    if unknown:
        raise DeclarationError(_unknown_keys(unknown))
    every, cron = schedule.get("every"), schedule.get("cron")
    time_zone = schedule.get("time_zone")
    if every is not None and cron is not None:
        raise DeclarationError("a schedule takes 'every' or 'cron', not both")
    if cron is not None:
        return CronRule(cron, "UTC" if time_zone is None else time_zone)
    if every is None:
        raise DeclarationError(
            "a schedule needs 'every' (an interval such as '15m') or 'cron' (such as '0 7 * * *')"
        )
    if time_zone is not None:
        raise DeclarationError(
            f"'time_zone' ({time_zone!r}) goes with 'cron' only: an interval counts from the "
            "Unix epoch and follows no time zone; write a cron for a time of day"
        )
    return IntervalRule(_every_ms(every))


def _every_ms(every: object) -> int:
    if isinstance(every, str):
        match = _EVERY.fullmatch(every)
        if match is None:
            raise DeclarationError(
                f"'every' {every!r} cannot be read: write a whole number and one of the units "
                "ms, s, m, h, d, such as '500ms', '30s', '15m', '2h', '1d'"
            )
        if len(match[1]) > _MAX_DIGITS:
            raise DeclarationError(f"'every' {every!r} is longer than 366 days")
        every_ms = int(match[1]) * _UNITS[match[2]]
        if every_ms == 0:
            raise DeclarationError(f"'every' must be positive, got {every!r}")
        return every_ms
    if isinstance(every, timedelta):
        if every % _MS:
            raise DeclarationError(f"'every' must be whole milliseconds, got {every!r}")
        if every <= timedelta(0):
            raise DeclarationError(f"'every' must be positive, got {every!r}")
        return every // _MS
    if isinstance(every, int) and not isinstance(every, bool):
        return every
    raise DeclarationError(
        f"'every' must be an int of milliseconds, a string such as '15m' or a timedelta, "
        f"got {type(every).__name__} {every!r}"
    )


def _shared(value: _Frozen) -> _Frozen:
    """The first of equal frozen values parsed: an application of 100,000 jobs on a few
    schedules keeps a few (some 250 bytes a job otherwise). Forgets all past ``_KEPT``."""
    kept = _SHARED.get(value)
    if kept is None:
        if len(_SHARED) >= _KEPT:
            _SHARED.clear()
        kept = _SHARED[value] = value
    return cast(_Frozen, kept)


_KEPT = 4096
_SHARED: dict[object, object] = {}


def _zone(name: object) -> ZoneInfo:
    if not isinstance(name, str) or not _ZONE_NAME.fullmatch(name):
        raise DeclarationError(
            f"'time_zone' must be an IANA name such as 'Europe/Paris', got {name!r}"
        )
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise DeclarationError(
            f"unknown time zone {name!r}: not an IANA name this runtime knows "
            "(zoneinfo.available_timezones() lists them)"
        ) from None


def _options(schedule: Mapping[str, Any]) -> JobOptions:
    given = {key: read(schedule[key], key) for key, read in _OPTIONS.items() if key in schedule}
    options = JobOptions(**given)
    if options.tenant_runs is TenantRuns.SPREAD and options.tenancy is Tenancy.GLOBAL:
        raise DeclarationError(
            "'tenant_runs' 'spread' spreads the runs of each tenant: it needs "
            "'tenancy' 'per-tenant' (a global job has one run per occurrence)"
        )
    return options


def _choice(
    kind: type[OverlapPolicy] | type[MissedPolicy] | type[Tenancy] | type[TenantRuns],
) -> Callable[..., Any]:
    def read(value: object, key: str) -> object:
        allowed = [member.value for member in kind]
        if not isinstance(value, str) or value not in allowed:
            quoted = ", ".join(repr(choice) for choice in allowed)
            raise DeclarationError(f"{key!r} must be one of {quoted}, got {value!r}")
        return kind(value)

    return read


def _flag(value: object, key: str) -> bool:
    if not isinstance(value, bool):
        raise DeclarationError(f"{key!r} must be True or False, got {value!r}")
    return value


def _milliseconds(*, low: int, high: int, optional: bool) -> Callable[..., Any]:
    def read(value: object, key: str) -> int | None:
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            kind = "an int of milliseconds or None" if optional else "an int of milliseconds"
            raise DeclarationError(f"{key!r} must be {kind}, got {value!r}")
        if value < low:
            bound = "positive" if low > 0 else "zero or more"
            raise DeclarationError(f"{key!r} must be {bound}, got {value}")
        if value > high:
            raise DeclarationError(f"{key!r} must be at most {high} ms, got {value}")
        return value

    return read


def _unknown_keys(unknown: list[Any]) -> str:
    known = [*_RULE_KEYS, *_OPTIONS]
    hints = []
    for key in unknown:
        snake = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", str(key)).lower()
        close = [snake] if snake in known else difflib.get_close_matches(snake, known, n=1)
        hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return f"unknown key {', '.join(hints)} in the schedule; the keys are {', '.join(known)}"


_RULE_KEYS = ("every", "cron", "time_zone")
_OPTIONS: dict[str, Callable[..., Any]] = {
    "overlap": _choice(OverlapPolicy),
    "missed": _choice(MissedPolicy),
    "timeout_ms": _milliseconds(low=1, high=MAX_TIMEOUT_MS, optional=True),
    "jitter_ms": _milliseconds(low=0, high=MAX_JITTER_MS, optional=False),
    "enabled": _flag,
    "single_instance": _flag,
    "tenancy": _choice(Tenancy),
    "tenant_runs": _choice(TenantRuns),
}
