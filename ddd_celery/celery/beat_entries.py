"""Entries of ``app.conf.beat_schedule`` kept working as jobs of the ``beat`` context.

A team that switches to the job scheduler keeps its entries and gains several active beats and
one lock per occurrence before it rewrites a single one. Each entry keeps its task, arguments
and options; its schedule is read by the time core rather than ``celery.schedules``, which
changes two things (docs/beat.md): an interval counts from the Unix epoch instead of beat's
start, and a ``crontab`` follows the documented DST rules in the app's ``timezone``.

What cannot be read that way (a ``solar`` schedule, a schedule class of one's own, a crontab
restricting both day fields) is refused at start, naming the entry, rather than run wrongly.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

from celery.schedules import crontab, schedule, solar

from ddd_celery.celery.registry import CeleryJob
from ddd_celery.declarations.errors import DeclarationError
from ddd_celery.declarations.schedule import parse_job_schedule

BEAT_CONTEXT = "beat"
"""The context of every translated entry: its job is ``beat.<entry name as a slug>``."""

_KEYS = frozenset({"task", "schedule", "args", "kwargs", "options", "relative"})
"""What Celery's ``ScheduleEntry`` takes; ``relative`` changes nothing once epoch-aligned."""
_NOT_SLUG = re.compile(r"[^a-z0-9_-]+")


class BeatScheduleEntryError(DeclarationError):
    """An entry of ``beat_schedule`` the job scheduler cannot run as written.

    Raised where the app is wired, so beat refuses to start instead of running it wrongly.
    """

    def __init__(self, entry: str, problem: str) -> None:
        super().__init__(f"beat_schedule entry {entry!r}: {problem}")
        self.entry = entry


def translate_beat_schedule(
    beat_schedule: Mapping[str, Mapping[str, Any]], *, timezone: str
) -> list[CeleryJob]:
    """The jobs of ``beat_schedule``, each in the ``beat`` context, crontabs in ``timezone``.

    Raises ``BeatScheduleEntryError`` naming the first entry that cannot be translated, or two
    entries whose names become the same job.
    """
    jobs: dict[str, tuple[str, CeleryJob]] = {}
    for entry_name, entry in beat_schedule.items():
        job = _job_of(str(entry_name), entry, timezone)
        if job.name in jobs:
            raise BeatScheduleEntryError(
                str(entry_name),
                f"it becomes job {job.name!r}, as entry {jobs[job.name][0]!r} does; rename one",
            )
        jobs[job.name] = (str(entry_name), job)
    return [job for _, job in jobs.values()]


def job_name_of(entry_name: str) -> str:
    """``beat.<slug>``: the entry's name in lower case, other characters turned into ``-``."""
    slug = _NOT_SLUG.sub("-", entry_name.lower()).strip("-")
    if not slug:
        raise BeatScheduleEntryError(entry_name, "its name has no letter or digit to name a job")
    return f"{BEAT_CONTEXT}.{slug}"


def _job_of(entry_name: str, entry: Mapping[str, Any], timezone: str) -> CeleryJob:
    if not isinstance(entry, Mapping):
        raise BeatScheduleEntryError(entry_name, f"an entry is a mapping, not {entry!r}")
    unknown = sorted(str(key) for key in entry if key not in _KEYS)
    if unknown:
        raise BeatScheduleEntryError(
            entry_name,
            f"unknown key(s) {', '.join(unknown)}; the keys are {', '.join(sorted(_KEYS))}",
        )
    task = entry.get("task")
    if not isinstance(task, str) or not task:
        raise BeatScheduleEntryError(entry_name, "'task' must name the task to send")
    name = job_name_of(entry_name)
    try:
        parsed = parse_job_schedule(_schedule_of(entry_name, entry.get("schedule"), timezone))
    except BeatScheduleEntryError:
        raise
    except DeclarationError as error:
        raise BeatScheduleEntryError(entry_name, error.problem) from error
    options = dict(entry.get("options") or {})
    return CeleryJob(
        name=name,
        schedule=parsed,
        task_name=task,
        queue=options.get("queue"),
        args=tuple(entry.get("args") or ()),
        kwargs=dict(entry.get("kwargs") or {}),
        options=options,
    )


def _schedule_of(entry_name: str, value: Any, timezone: str) -> dict[str, Any]:
    """The schedule mapping of the time core for a Celery schedule value."""
    if type(value) is crontab:
        return {"cron": _cron_of(entry_name, value), "time_zone": timezone}
    if type(value) is schedule:
        value = value.run_every
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            value = timedelta(seconds=value)
        except (ValueError, OverflowError):
            raise BeatScheduleEntryError(
                entry_name, f"{value!r} is not a number of seconds an interval can have"
            ) from None
    if isinstance(value, timedelta):
        return {"every": value}
    if isinstance(value, solar):
        raise BeatScheduleEntryError(
            entry_name,
            "a solar schedule cannot be translated: its instants follow the sun, not a clock; "
            "declare a job with a cron near the time instead",
        )
    raise BeatScheduleEntryError(
        entry_name,
        f"a schedule of class {type(value).__name__} cannot be translated; write it as a "
        "crontab, a timedelta or a number of seconds, or declare a job",
    )


def _cron_of(entry_name: str, value: Any) -> str:
    """The five-field expression that fires when ``value`` does.

    Built from the crontab's expanded sets, so Celery's own syntax (wrapping ranges, names) is
    read by Celery. A field that is every value, or every step from its first, is written
    ``*`` or ``*/n``: that is what makes an hour field "of every hour" under the DST rules.
    Celery fires on a day matching both day fields, a cron on one matching either when both
    are restricted, so a crontab restricting both is refused unless one of them is a ``*``
    form, where the cron reads both too.
    """
    day_of_month = _field(value.day_of_month, 1, 31)
    day_of_week = _field(value.day_of_week, 0, 6)
    if not day_of_month.startswith("*") and not day_of_week.startswith("*"):
        raise BeatScheduleEntryError(
            entry_name,
            f"its crontab restricts both day_of_month ({value._orig_day_of_month!r}) and "
            f"day_of_week ({value._orig_day_of_week!r}), which Celery reads as a day matching "
            "both (e.g. the first Monday) and a cron as a day matching either; declare a job "
            "that runs on the days of one field and checks the other",
        )
    fields = (
        _field(value.minute, 0, 59),
        _field(value.hour, 0, 23),
        day_of_month,
        _field(value.month_of_year, 1, 12),
        day_of_week,
    )
    return " ".join(fields)


def _field(values: Iterable[int], low: int, high: int) -> str:
    ordered = sorted(values)
    if ordered == list(range(low, high + 1)):
        return "*"
    if len(ordered) > 1 and ordered[0] == low:
        step = ordered[1] - low
        if ordered == list(range(low, high + 1, step)):
            return f"*/{step}"
    return ",".join(_runs(ordered))


def _runs(ordered: list[int]) -> Iterable[str]:
    """``1-5`` for a run of three or more consecutive values, the values themselves otherwise."""
    start = 0
    for index in range(1, len(ordered) + 1):
        if index == len(ordered) or ordered[index] != ordered[index - 1] + 1:
            run = ordered[start:index]
            if len(run) >= 3:
                yield f"{run[0]}-{run[-1]}"
            else:
                yield from (str(item) for item in run)
            start = index
