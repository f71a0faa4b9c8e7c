"""One composition root, several processes: RUN_JOBS and settings decide, not code.

Beat here is the real ``JobBeatScheduler`` on a fixed clock, with ``send_task`` kept in memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery_support import AppFactory, Runs
from probe_jobs import ASYNC, SYNC, AsyncProbeJob, Probe, SyncProbeJob

from ddd_celery.celery import install_jobs, run_now
from ddd_celery.celery.beat import JobBeatScheduler
from ddd_celery.kernel import FixedClock, InMemoryLock

NOW = datetime(2026, 3, 2, 9, 58, 30, tzinfo=UTC)


class Process:
    """A process built from the app's composition root, with the environment it is given."""

    def __init__(
        self,
        make_app: AppFactory,
        environ: Mapping[str, str],
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        self.clock = FixedClock(NOW)
        self.probe = Probe()
        self.runs = Runs()
        self.app = make_app()
        self.registry = install_jobs(
            self.app,
            jobs=[SyncProbeJob, AsyncProbeJob],
            providers={Probe: lambda: self.probe},
            lock=InMemoryLock(self.clock),
            clock=self.clock,
            on_run=self.runs,
            environ=environ,
            settings=settings,
        )
        self.sent: list[tuple[str, datetime]] = []

    def beat_for(self, duration: timedelta) -> list[tuple[str, datetime]]:
        """Run beat, ticking at each instant it asks for, until ``duration`` has passed."""

        def keep(name: str, *args: Any, kwargs: Mapping[str, Any], **options: Any) -> None:
            self.sent.append((name, datetime.fromisoformat(kwargs["scheduled_at"])))

        self.app.send_task = keep
        beat = JobBeatScheduler(app=self.app)
        end = self.clock.now() + duration
        while self.clock.now() < end:
            wait = timedelta(seconds=beat.tick())
            self.clock.set(min(end, self.clock.now() + max(wait, timedelta(milliseconds=1))))
        beat.tick()
        return self.sent


def test_an_api_process_registers_and_runs_jobs_now_but_starts_none_by_time(
    make_app: AppFactory,
) -> None:
    api = Process(make_app, environ={"RUN_JOBS": "false"})

    sent = api.beat_for(timedelta(hours=2))
    run_now(api.app, SYNC)

    assert sent == []
    assert {SYNC, ASYNC} <= set(api.app.tasks)
    assert [r.outcome for r in api.runs.records] == ["succeeded"]


def test_the_job_process_of_the_same_root_starts_them_by_time(make_app: AppFactory) -> None:
    worker = Process(make_app, environ={})

    sent = worker.beat_for(timedelta(hours=2))

    ten, eleven = datetime(2026, 3, 2, 10, tzinfo=UTC), datetime(2026, 3, 2, 11, tzinfo=UTC)
    assert sorted(sent) == [(ASYNC, ten), (ASYNC, eleven), (SYNC, ten), (SYNC, eleven)]


def test_a_job_switched_off_by_the_environment_is_not_started_and_the_others_are(
    make_app: AppFactory,
) -> None:
    process = Process(make_app, environ={"JOB_PROBE_ASYNC_ENABLED": "false"})

    sent = process.beat_for(timedelta(hours=1))

    assert [name for name, _ in sent] == [SYNC]


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({SYNC: {"schedule": {"every": "20m"}}}, ["10:00", "10:20", "10:40", "11:00"]),
        ({SYNC: {"schedule": {"cron": "30 11 * * *", "time_zone": "Europe/Paris"}}}, ["10:30"]),
        ({SYNC: {"enabled": False}}, []),
    ],
    ids=["rescheduled", "cron-in-a-zone", "switched-off"],
)
def test_settings_reschedule_or_switch_off_a_job_without_code(
    make_app: AppFactory, settings: dict[str, Any], expected: list[str]
) -> None:
    process = Process(make_app, environ={}, settings=settings)

    sent = process.beat_for(timedelta(hours=1, minutes=2))

    assert [at.strftime("%H:%M") for name, at in sent if name == SYNC] == expected
