"""The days a cron expression fires on, as the evaluator's table ``CronFields.day_masks`` holds
them: what the tests compare with the days a cron, or Celery's ``crontab``, names."""

from __future__ import annotations

import itertools

from ddd_celery.declarations.cron import CronFields


def fits_day(fields: CronFields, day: int, weekday: int) -> bool:
    """Whether day ``day`` of a matching month, a ``weekday`` (0 is Sunday), is accepted."""
    return bool(fields.day_masks[(weekday - day + 1) % 7] >> day & 1)


def fitting_days(fields: CronFields) -> set[tuple[int, int]]:
    """Every ``(day, weekday)`` the table accepts, day 1 to 31 of a month, weekday 0 to 6."""
    days = itertools.product(range(1, 32), range(7))
    return {(day, weekday) for day, weekday in days if fits_day(fields, day, weekday)}
