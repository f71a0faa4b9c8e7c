"""Reading a five-field cron expression into the tables the evaluator searches.

Only the syntax every cron shares is accepted, so a schedule means the same thing to whoever
reads it: ``*``, values, ranges ``a-b``, steps on ``*`` or a range, lists, and the names of
months and days. What some crons add (``@daily``, ``?``, ``L``, ``W``, ``#``, seconds, years) is
refused with a message that says what to write instead, and so is an expression that never fires.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from ddd_celery.declarations.errors import DeclarationError

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_NUMBER = re.compile(r"[0-9]+")
_MAX_DIGITS = 4
_MAX_LENGTH = 400
"""Longer than any expression of five fields listing every value; it is never quoted whole."""
_LONGEST_MONTH = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
"""Days a month can have; February has 29 in leap years, so ``0 0 29 2 *`` fires."""
_KEPT = 4096
"""Distinct expressions whose reading is kept and shared; past that the least used is read again."""


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    low: int
    high: int
    names: dict[str, int]

    @property
    def last(self) -> int:
        """The end of ``*``: Saturday for the days of the week, where 7 repeats Sunday."""
        return 6 if self.name == "day-of-week" else self.high

    def spelled(self, value: int, like: str) -> str:
        """``value`` written as a name when ``like`` is one, to quote the user's own style."""
        if like.lower() in self.names:
            return next(name for name, number in self.names.items() if number == value)
        return str(value)


_FIELDS = (
    _Field("minute", 0, 59, {}),
    _Field("hour", 0, 23, {}),
    _Field("day-of-month", 1, 31, {}),
    _Field("month", 1, 12, {name: number for number, name in enumerate(_MONTHS, 1)}),
    _Field("day-of-week", 0, 7, {name: number for number, name in enumerate(_DAYS)}),
)


@dataclass(frozen=True, slots=True)
class CronFields:
    """What a cron expression matches, as sorted values and as search tables.

    ``pinned`` is False when the hour field starts with ``*``: such a job follows elapsed time
    across a change of clocks, any other follows the wall clock (see docs/schedules.md).
    """

    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    months: tuple[int, ...]
    either_day: bool
    """Both day fields are restricted (neither starts with ``*``): a day matching either fits."""
    pinned: bool
    minutes_of_day: tuple[int, ...]
    """Sorted ``hour * 60 + minute`` of every matching time of day, for a bisect."""
    month_mask: int
    """Bit ``m`` set for each matching month."""
    day_masks: tuple[int, ...]
    """Indexed by the weekday of the 1st of a month (0 is Sunday): bit ``d`` set for each day
    ``d`` of such a month that the day fields accept (7 in the day of the week is Sunday), before
    the month's length is applied."""


@lru_cache(maxsize=_KEPT)
def parse_cron(expression: str) -> CronFields:
    """Read ``expression``; raise ``DeclarationError`` saying what cannot be read, and why.

    One reading per distinct expression, shared by every schedule that uses it: its tables
    (``minutes_of_day`` holds 1,440 entries for ``* * * * *``) are immutable, and 10,000 jobs
    on one expression would otherwise hold 10,000 copies of them.
    """
    if len(expression) > _MAX_LENGTH:
        raise DeclarationError(
            f"cron {expression[:20]!r}... is {len(expression)} characters long: out of range "
            f"for five fields (at most {_MAX_LENGTH})"
        )
    if expression.startswith("@"):
        raise DeclarationError(
            f"cron {expression!r}: nicknames such as @daily are not supported; "
            "write the five fields, e.g. '0 0 * * *' for @daily"
        )
    texts = expression.split()
    if len(texts) != len(_FIELDS):
        raise DeclarationError(
            f"cron {expression!r} has {len(texts)} field(s); it takes five (minute hour "
            "day-of-month month day-of-week), without seconds or years"
        )
    minutes, hours, days, months, weekdays = (
        _parse_field(text, field, expression) for text, field in zip(texts, _FIELDS, strict=True)
    )
    day_star, weekday_star = texts[2].startswith("*"), texts[4].startswith("*")
    either_day = not day_star and not weekday_star
    weekday_set = frozenset(value % 7 for value in weekdays)
    if not either_day and not any(day <= _LONGEST_MONTH[m] for m in months for day in days):
        raise DeclarationError(
            f"cron {expression!r} never fires: no month it names has day {_listed(days)}"
        )
    day_mask = sum(1 << day for day in days)
    day_masks = []
    for first in range(7):
        weekday_mask = sum(1 << day for day in range(1, 32) if (first + day - 1) % 7 in weekday_set)
        day_masks.append(day_mask | weekday_mask if either_day else day_mask & weekday_mask)
    return CronFields(
        minutes=minutes,
        hours=hours,
        months=months,
        either_day=either_day,
        pinned=not texts[1].startswith("*"),
        minutes_of_day=tuple(hour * 60 + minute for hour in hours for minute in minutes),
        month_mask=sum(1 << month for month in months),
        day_masks=tuple(day_masks),
    )


def _parse_field(text: str, field: _Field, expression: str) -> tuple[int, ...]:
    values: set[int] = set()
    for part in text.split(","):
        where = f"{part!r} in the {field.name} field of cron {expression!r}"
        base, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not _NUMBER.fullmatch(step_text):
                raise DeclarationError(f"cannot read {where}: the step must be a number")
            if len(step_text) > _MAX_DIGITS:
                raise DeclarationError(f"cannot read {where}: the step is out of range")
            step = int(step_text)
            if step == 0:
                raise DeclarationError(f"cannot read {where}: the step is zero")
        if base == "*":
            low, high = field.low, field.last
        elif "-" in base[1:]:
            start, _, end = base.partition("-")
            low, high = _value(start, field, where), _value(end, field, where)
            if field.name == "day-of-week" and high == 0 < low:
                high = 7  # a range that ends on Sunday ends on 7: sat-sun is 6-7
            if low > high:
                last, first = field.spelled(field.last, start), field.spelled(field.low, start)
                raise DeclarationError(
                    f"cannot read {where}: the range wraps around; write it as two ranges, "
                    f"'{start}-{last},{first}-{end}'"
                )
        else:
            low = high = _value(base, field, where)
            if slash:
                raise DeclarationError(
                    f"cannot read {where}: a step applies to '*' or a range, not to a single "
                    f"value; write '{base}-{field.high}/{step}'"
                )
        values.update(range(low, high + 1, step))
    return tuple(sorted(values))


def _value(token: str, field: _Field, where: str) -> int:
    if _NUMBER.fullmatch(token):
        if len(token) > _MAX_DIGITS:  # int() of thousands of digits raises a bare ValueError
            raise DeclarationError(
                f"cannot read {where}: {token[:8]}... is out of range {field.low}-{field.high}"
            )
        value = int(token)
        if not field.low <= value <= field.high:
            raise DeclarationError(
                f"cannot read {where}: {value} is out of range {field.low}-{field.high}"
            )
        return value
    named = field.names.get(token.lower())
    if named is not None:
        return named
    raise DeclarationError(f"cannot read {where}: {_unsupported(token, field)}")


def _unsupported(token: str, field: _Field) -> str:
    if token == "?":
        return "'?' is not supported; write '*'"
    if "#" in token:
        return "'#' (the nth weekday of the month) is not supported"
    if re.fullmatch(r"[0-9]*L(-[0-9]+)?|LW", token, re.IGNORECASE):
        return "'L' (the last day) is not supported"
    if re.fullmatch(r"[0-9]+W", token, re.IGNORECASE):
        return "'W' (the nearest weekday) is not supported"
    if token == "":
        return "a value is missing"
    if field.names:
        return f"{token!r} is neither a number nor one of {', '.join(field.names)}"
    return f"{token!r} is not a number"


def _listed(values: tuple[int, ...]) -> str:
    return ", ".join(str(value) for value in values)
