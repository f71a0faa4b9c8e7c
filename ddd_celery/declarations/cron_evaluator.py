"""The evaluator of a parsed schedule, beside its parser (``cron.py``): ``next_occurrence`` and
``latest_occurrence``.

An interval's occurrences are the multiples of it since the Unix epoch. A cron's are the UTC
instants whose wall clock, in the rule's zone, reads a time the fields accept; a *pinned* rule
(hour field not starting with ``*``) also drops the second pass of a repeated hour, so an
ambiguous wall time runs once, the first time. A wall time that does not exist is never the
clock of any instant, so it is skipped, never moved.

How it is computed, without walking minute by minute: UTC time is cut into *spans* of constant
offset. Within a span the wall clock is UTC plus the offset, so the first (or last) matching wall
time is found with the calendar arithmetic of a naive cron (bitmasks of days, a bisect over the
times of day, whole months skipped), then checked against the span's end. The spans come from
``zoneinfo`` itself, probed once a day and bisected to the second at each change of offset, and
are cached per zone in chunks of about twelve days. Probing daily assumes two changes of offset
are more than a day apart; in the IANA data they are at least a week apart. Python bounds every
offset within a day, which lets a search jump over a stretch known to hold no match.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from datetime import UTC, date, datetime, timedelta

from ddd_celery.declarations.cron import CronFields
from ddd_celery.declarations.schedule import CronRule, IntervalRule, ParsedJobSchedule
from ddd_celery.kernel.instants import require_aware

_DAY = 86_400
_CHUNK_BITS = 20
"""A chunk of cached offsets covers 2**20 s of UTC, about 12 days: a jump probes one."""
_MAX_CHUNKS = 8192
"""Chunks kept per zone; a process that wanders further starts over."""
_UNIX_ORDINAL = 719_163
"""``date(1970, 1, 1).toordinal()``: days since the epoch plus this is a proleptic ordinal."""
_MAX_ORDINAL = 3_652_059
_FIRST = -62_135_596_800
"""0001-01-01T00:00:00Z in seconds since the epoch."""
_LAST = 253_402_300_799
"""9999-12-31T23:59:59Z in seconds since the epoch."""
_MONTH_DAYS = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_DAYS_UP_TO = tuple((1 << (days + 1)) - 2 for days in range(32))
"""Bits 1 to ``days`` set: the days a month of that length has."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SECOND = timedelta(seconds=1)
_MICROSECOND = timedelta(microseconds=1)

_Chunk = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]
"""Span starts (UTC seconds; the last item is the chunk's end), each span's offset, and the
offset before it, which tells a repeated hour (a larger offset before) from the rest."""
_CHUNKS: dict[str, dict[int, _Chunk]] = {}
"""Per zone name, filled lazily. Threads may share it: a chunk is immutable once stored, and two
threads computing the same one store equal values."""


def next_occurrence(parsed: ParsedJobSchedule, after: datetime) -> datetime:
    """The first occurrence strictly after ``after``, as an aware UTC ``datetime``.

    Raises ``ValueError`` for a naive ``after`` and ``OverflowError`` when the occurrence would
    fall after the year 9999.
    """
    require_aware(after, "after")
    rule = _rule_of(parsed, "next_occurrence")
    if isinstance(rule, CronRule):
        return _instant(_cron_next(rule, _floor_seconds(after) + 1))
    step = rule.every_ms * 1000
    return _EPOCH + (_micros(after) // step + 1) * step * _MICROSECOND


def latest_occurrence(
    parsed: ParsedJobSchedule, *, after: datetime, not_after: datetime
) -> datetime | None:
    """The latest occurrence ``t`` with ``after < t <= not_after``, or None when there is none.

    Searches backwards from ``not_after``, so a range of any length costs what the distance to
    its last occurrence costs. Raises ``ValueError`` for a naive bound.
    """
    require_aware(after, "after")
    require_aware(not_after, "not_after")
    rule = _rule_of(parsed, "latest_occurrence")
    if isinstance(rule, CronRule):
        found = _cron_latest(rule, _floor_seconds(after) + 1, _floor_seconds(not_after))
        return None if found is None else _instant(found)
    step = rule.every_ms * 1000
    latest = _micros(not_after) // step * step
    return _EPOCH + latest * _MICROSECOND if latest > _micros(after) else None


def _rule_of(parsed: ParsedJobSchedule, caller: str) -> IntervalRule | CronRule:
    if not isinstance(parsed, ParsedJobSchedule):
        raise TypeError(
            f"{caller} takes a parsed schedule, parse_job_schedule({{'every': '15m'}}) say, "
            f"not a {type(parsed).__name__}"
        )
    return parsed.rule


def _cron_next(rule: CronRule, start: int) -> int:
    """The first occurrence at or after the UTC second ``start``."""
    fields = rule.fields
    pinned = fields.pinned
    chunks = _chunks_of(rule)
    known_from, known = 1, 0  # the match-free walls [known_from, known), known matching
    t = start
    while True:
        chunk = chunks.get(t >> _CHUNK_BITS) or _chunk(rule, chunks, t >> _CHUNK_BITS)
        starts, offsets, before = chunk
        i = bisect_right(starts, t) - 1
        offset = offsets[i]
        low = t + offset
        if pinned and before[i] > offset:  # the second pass of a repeated hour is not run
            low = max(low, starts[i] + before[i])
        low = -(-low // 60) * 60
        if known_from <= low <= known:
            wall = known
        else:
            found = _wall_next(fields, low)
            if found is None:
                raise OverflowError(f"{rule.description} has no occurrence before the year 10000")
            known_from = low
            known = wall = found
        end = starts[i + 1]
        if wall < end + offset:
            return wall - offset
        # Instants from `low` + a day on have walls after `low`, those a day before `wall`
        # walls before it: none of them matches, so the search can jump.
        t = wall - _DAY if end >= low + _DAY and wall - _DAY > end else end


def _cron_latest(rule: CronRule, first: int, last: int) -> int | None:
    """The last occurrence within the UTC seconds ``first`` to ``last``, both included."""
    fields = rule.fields
    pinned = fields.pinned
    chunks = _chunks_of(rule)
    known, known_to = 1, 0  # the match-free walls (known, known_to], known matching
    t = last
    while t >= first:
        chunk = chunks.get(t >> _CHUNK_BITS) or _chunk(rule, chunks, t >> _CHUNK_BITS)
        starts, offsets, before = chunk
        i = bisect_right(starts, t) - 1
        offset, begin = offsets[i], starts[i]
        high = (t + offset) // 60 * 60
        if known <= high <= known_to:
            wall = known
        else:
            found = _wall_prev(fields, high)
            if found is None:
                return None
            known = wall = found
            known_to = high
        low = max(begin, first) + offset
        if pinned and before[i] > offset:
            low = max(low, begin + before[i])
        if wall >= low:
            return wall - offset
        t = begin - 1
        if begin - 1 <= high - _DAY and wall + _DAY < t:
            t = wall + _DAY
    return None


def _wall_next(fields: CronFields, wall: int) -> int | None:
    """The first matching wall time at or after ``wall``, in seconds of the naive calendar."""
    times = fields.minutes_of_day
    days, seconds = divmod(wall, _DAY)
    minute = -(-seconds // 60)
    if minute > times[-1]:
        days, minute = days + 1, 0
    if days + _UNIX_ORDINAL > _MAX_ORDINAL:
        return None
    today = date.fromordinal(days + _UNIX_ORDINAL)
    year, month, day = today.year, today.month, today.day
    month_mask, day_masks = fields.month_mask, fields.day_masks
    while True:
        first = days - day + 1
        length = _month_length(year, month)
        if month_mask >> month & 1:
            mask = (day_masks[(first + 4) % 7] & _DAYS_UP_TO[length]) >> day
            if mask & 1:
                return days * _DAY + times[bisect_left(times, minute)] * 60
            if mask:
                return (days + (mask & -mask).bit_length() - 1) * _DAY + times[0] * 60
        days, day, minute = first + length, 1, 0
        month += 1
        if month == 13:
            year, month = year + 1, 1
            if year > 9999:
                return None


def _wall_prev(fields: CronFields, wall: int) -> int | None:
    """The last matching wall time at or before ``wall``, in seconds of the naive calendar."""
    times = fields.minutes_of_day
    days, seconds = divmod(wall, _DAY)
    minute = seconds // 60
    if minute < times[0]:
        days, minute = days - 1, 1439
    if days + _UNIX_ORDINAL < 1:
        return None
    today = date.fromordinal(days + _UNIX_ORDINAL)
    year, month, day = today.year, today.month, today.day
    month_mask, day_masks = fields.month_mask, fields.day_masks
    while True:
        first = days - day + 1
        if month_mask >> month & 1:
            mask = day_masks[(first + 4) % 7] & _DAYS_UP_TO[_month_length(year, month)]
            mask &= (2 << day) - 1
            if mask >> day:
                return days * _DAY + times[bisect_right(times, minute) - 1] * 60
            if mask:
                return (first + mask.bit_length() - 2) * _DAY + times[-1] * 60
        month -= 1
        if month == 0:
            year, month = year - 1, 12
            if year < 1:
                return None
        days, day, minute = first - 1, _month_length(year, month), 1439


def _month_length(year: int, month: int) -> int:
    if month == 2 and year % 4 == 0 and (year % 100 != 0 or year % 400 == 0):
        return 29
    return _MONTH_DAYS[month]


def _chunks_of(rule: CronRule) -> dict[int, _Chunk]:
    chunks = _CHUNKS.get(rule.time_zone)
    if chunks is None:
        chunks = _CHUNKS[rule.time_zone] = {}
    return chunks


def _chunk(rule: CronRule, chunks: dict[int, _Chunk], index: int) -> _Chunk:
    """The spans of one chunk, from two days before it so a repeated hour is never cut."""
    if len(chunks) >= _MAX_CHUNKS:
        chunks.clear()
    zone = rule.zone

    def offset_at(t: int) -> int:
        # Clamped so the local time stays within the years 1 to 9999 that datetime holds.
        delta = datetime.fromtimestamp(min(max(t, _FIRST + _DAY), _LAST - _DAY), zone).utcoffset()
        assert delta is not None  # a ZoneInfo always answers
        return delta.days * _DAY + delta.seconds

    begin, end = (index << _CHUNK_BITS) - 2 * _DAY, (index + 1) << _CHUNK_BITS
    starts, offsets, before = [begin], [offset_at(begin)], [offset_at(begin)]
    probe = begin
    while probe < end - 1:
        earlier, probe = probe, min(probe + _DAY, end - 1)
        changed = offset_at(probe)
        if changed != offsets[-1]:
            while probe - earlier > 1:  # the change is the first second with the new offset
                middle = (earlier + probe) // 2
                if offset_at(middle) == offsets[-1]:
                    earlier = middle
                else:
                    probe = middle
            starts.append(probe)
            before.append(offsets[-1])
            offsets.append(changed)
    starts.append(end)
    chunk = chunks[index] = (tuple(starts), tuple(offsets), tuple(before))
    return chunk


def _floor_seconds(value: datetime) -> int:
    if value.microsecond == 0:
        return int(value.timestamp())  # exact: a whole number of seconds fits a float
    return (value - _EPOCH) // _SECOND


def _micros(value: datetime) -> int:
    return (value - _EPOCH) // _MICROSECOND


def _instant(t: int) -> datetime:
    if t > _LAST:
        raise OverflowError("the occurrence falls after the year 9999")
    return datetime.fromtimestamp(t, UTC)
