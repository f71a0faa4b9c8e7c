"""``SystemClock`` under freezegun: code that reads the real clock can be tested at an instant.

For a spec about the jobs' time (overlap, missed, several instances), the manual scheduler on a
``FixedClock`` is the tool: it fires each timer at its instant and never sleeps. freezegun suits
code of the application that takes the ``Clock`` port and is wired with ``SystemClock``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from freezegun import freeze_time

from ddd_celery.declarations import parse_job_schedule
from ddd_celery.declarations.cron_evaluator import next_occurrence
from ddd_celery.kernel import SystemClock


def test_the_system_clock_follows_a_frozen_clock_and_its_ticks() -> None:
    clock = SystemClock()

    with freeze_time("2026-03-29T00:59:59Z") as frozen:
        first = clock.now()
        frozen.tick(timedelta(seconds=2))
        second = clock.now()

    assert first == datetime(2026, 3, 29, 0, 59, 59, tzinfo=UTC)
    assert second == datetime(2026, 3, 29, 1, 0, 1, tzinfo=UTC)
    assert first.tzinfo is not None


def test_what_is_computed_from_the_system_clock_is_computed_at_the_frozen_instant() -> None:
    schedule = parse_job_schedule({"cron": "30 2 * * *", "time_zone": "Europe/Paris"})

    with freeze_time(datetime(2026, 3, 28, 12, tzinfo=UTC)):
        after = next_occurrence(schedule, SystemClock().now())
        following = next_occurrence(schedule, after)

    # 02:30 does not exist in Paris on 29 March: the run after the 28th noon is on the 30th
    assert after == datetime(2026, 3, 30, 0, 30, tzinfo=UTC)
    assert following == datetime(2026, 3, 31, 0, 30, tzinfo=UTC)
