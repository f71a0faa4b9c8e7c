"""What beat logs at start: its banner, each job, its schedule and next run in UTC and in its own
zone, and the jobs whose settings change their declared schedule.

Beat is built in this process on a fixed clock (no broker is asked at start), and its lines are
read with ``caplog``; then a real ``celery beat`` starts in a process of its own.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from celery_support import AppFactory
from services import REDIS_URL

from ddd_celery.celery import install_jobs
from ddd_celery.celery.beat import LISTED_AT_START, JobBeatScheduler
from ddd_celery.declarations import JobExecution
from ddd_celery.declarations.schedule import parse_job_schedule
from ddd_celery.declarations.scheduled import ScheduledJobDeclaration
from ddd_celery.kernel import FixedClock, InMemoryLock

NOW = datetime(2026, 3, 28, 23, 30, tzinfo=UTC)
"""The night before Paris moves its clocks forward (2026-03-29, 02:00 CET becomes 03:00 CEST)."""
BEAT_LOGGER = "ddd_celery.celery.beat"


class NoopJob:
    def run(self, execution: JobExecution) -> None:
        return None


def declaration(name: str, **schedule: Any) -> ScheduledJobDeclaration:
    return ScheduledJobDeclaration(
        name=name,
        context=name.split(".", 1)[0],
        schedule=parse_job_schedule(schedule, job=name),
        job_class=NoopJob,
    )


def start_beat(
    make_app: AppFactory, caplog: pytest.LogCaptureFixture, jobs: list[ScheduledJobDeclaration]
) -> list[logging.LogRecord]:
    """Start a beat scheduler on ``jobs``; the INFO lines of the beat logger it wrote."""
    app = make_app()
    clock = FixedClock(NOW)
    install_jobs(app, jobs=jobs, lock=InMemoryLock(clock), clock=clock, environ={})
    caplog.set_level(logging.INFO, logger=BEAT_LOGGER)
    JobBeatScheduler(app=app)
    return [r for r in caplog.records if r.name == BEAT_LOGGER and r.levelno == logging.INFO]


def test_each_job_is_logged_soonest_first_with_its_next_run_in_utc_and_its_zone(
    make_app: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    lines = start_beat(
        make_app,
        caplog,
        [
            declaration("billing.close-day", cron="30 2 * * *", time_zone="Europe/Paris"),
            declaration("notification.send-due", every="15m"),
            declaration("billing.old-export", every="1h", enabled=False),
        ],
    )

    assert [(r.getMessage(), r.__dict__["job"]) for r in lines] == [
        ("beat: job scheduled", "notification.send-due"),
        ("beat: job scheduled", "billing.close-day"),
        ("beat: job switched off", "billing.old-export"),
    ]
    every, cron, off = lines
    assert every.__dict__["schedule"] == "every 15m"
    assert every.__dict__["next_run_at"] == "2026-03-28T23:45:00.000Z"
    assert "next_run_local" not in every.__dict__  # an interval counts in UTC
    # 02:30 does not exist in Paris that night, so no run that day: the next is on the 30th,
    # in summer time, which the local instant shows
    assert cron.__dict__["schedule"] == "cron 30 2 * * * (Europe/Paris)"
    assert cron.__dict__["next_run_at"] == "2026-03-30T00:30:00.000Z"
    assert cron.__dict__["next_run_local"] == "2026-03-30T02:30:00+02:00"
    assert off.__dict__["schedule"] == "every 1h"
    assert "next_run_at" not in off.__dict__


def test_past_the_cap_one_line_says_how_many_more_jobs_there_are(
    make_app: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    count = LISTED_AT_START + 7
    jobs = [declaration(f"load.job-{index:03}", every="1h") for index in range(count)]

    lines = start_beat(make_app, caplog, jobs)

    *listed, summary = lines
    assert len(listed) == LISTED_AT_START
    assert [r.__dict__["job"] for r in listed] == [f"load.job-{i:03}" for i in range(50)]
    assert summary.getMessage() == (
        "beat: 7 more jobs not listed here; `celery jobs list` shows every job"
    )
    assert summary.__dict__["jobs"] == count


def test_a_job_whose_settings_change_its_schedule_is_logged_declared_and_effective(
    make_app: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()
    clock = FixedClock(NOW)
    install_jobs(
        app,
        jobs=[
            declaration("billing.close-day", cron="30 2 * * *", time_zone="Europe/Paris"),
            declaration("notification.send-due", every="15m"),
            declaration("billing.export", every="1h"),
        ],
        lock=InMemoryLock(clock),
        clock=clock,
        settings={
            "billing.close-day": {"schedule": {"cron": "0 3 * * *", "time_zone": "UTC"}},
            "billing.export": {"timeout_ms": 60_000, "overlap": "queue"},
        },
        environ={"JOB_NOTIFICATION_SEND_DUE_ENABLED": "false"},
    )
    caplog.set_level(logging.INFO, logger=BEAT_LOGGER)

    JobBeatScheduler(app=app)

    overrides = [r for r in caplog.records if r.getMessage().startswith("beat: settings override")]
    assert [r.getMessage() for r in overrides] == [
        "beat: settings override the declared schedule of billing.close-day: "
        "declared cron 30 2 * * * (Europe/Paris), runs on cron 0 3 * * * (UTC)",
        "beat: settings override the declared schedule of billing.export: "
        "declared every 1h (overlap=skip, timeout_ms=none), "
        "runs on every 1h (overlap=queue, timeout_ms=60000)",
        "beat: settings override the declared schedule of notification.send-due: "
        "declared every 15m (enabled=true), runs on every 15m (enabled=false)",
    ]
    assert all(r.levelno == logging.INFO for r in overrides)
    assert overrides[0].__dict__["declared"] == "cron 30 2 * * * (Europe/Paris)"
    assert overrides[0].__dict__["effective"] == "cron 0 3 * * * (UTC)"


def test_a_job_whose_settings_repeat_its_declaration_is_not_logged_as_overridden(
    make_app: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()
    clock = FixedClock(NOW)
    install_jobs(
        app,
        jobs=[declaration("billing.export", every="1h")],
        lock=InMemoryLock(clock),
        clock=clock,
        settings={"billing.export": {"enabled": True, "schedule": {"every": "1h"}}},
        environ={},
    )
    caplog.set_level(logging.INFO, logger=BEAT_LOGGER)

    JobBeatScheduler(app=app)

    assert not [r for r in caplog.records if "override" in r.getMessage()]


@pytest.mark.parametrize(
    ("jobs", "entries", "banner"),
    [
        (["ops.one"], {}, "1 job, lock InMemoryLock"),
        (["ops.one", "ops.two"], {}, "2 jobs, lock InMemoryLock"),
        (["ops.one"], {"tidy": 60.0}, "2 jobs (1 from beat_schedule), lock InMemoryLock"),
        ([], {"tidy": 60.0}, "1 job (1 from beat_schedule), lock InMemoryLock"),
    ],
)
def test_the_banner_counts_the_jobs_and_the_beat_schedule_entries_in_good_english(
    make_app: AppFactory, jobs: list[str], entries: dict[str, float], banner: str
) -> None:
    app = make_app()
    app.conf.beat_schedule = {
        name: {"task": f"tasks.{name}", "schedule": every} for name, every in entries.items()
    }
    clock = FixedClock(NOW)
    install_jobs(
        app,
        jobs=[declaration(name, every="15m") for name in jobs],
        lock=InMemoryLock(clock),
        clock=clock,
        environ={},
    )

    assert JobBeatScheduler(app=app, lazy=True).info == f"    . ddd_celery -> {banner}"


BEAT_APP = '''
"""An app with scheduled and background jobs, for `celery -A beat_lines_app beat`."""

import os

from celery import Celery

from ddd_celery.celery import install_jobs
from ddd_celery.celery.background import install_background_jobs
from ddd_celery.declarations import background, scheduled
from ddd_celery.redis import connect
from ddd_celery.redis.job_store import RedisJobStore

PREFIX = os.environ["PREFIX_FOR_TEST"]


@scheduled("ops.close-day", cron="30 2 * * *", time_zone="Europe/Paris")
class CloseDayJob:
    def run(self, execution):
        return None


@background("ops.send-mail")
class SendMailJob:
    def run(self, payload, execution):
        return None


app = Celery("beat_lines_app", broker=os.environ["BROKER_URL_FOR_TEST"])
app.conf.broker_transport_options = {"global_keyprefix": PREFIX}
app.conf.ddd_celery_key_prefix = PREFIX
install_jobs(
    app,
    jobs=[CloseDayJob],
    settings={"ops.close-day": {"schedule": {"cron": "0 3 * * *", "time_zone": "UTC"}}},
)
install_background_jobs(
    app, jobs=[SendMailJob], store=RedisJobStore(connect(os.environ["BROKER_URL_FOR_TEST"]),
    prefix=f"{PREFIX}store:")
)
'''


@pytest.mark.processes
def test_a_real_beat_start_counts_the_relay_apart_and_logs_the_overridden_schedule(
    tmp_path: Path, redis_prefix: str
) -> None:
    """``celery -A beat_lines_app beat -l INFO`` as a team starts it: its banner, its lines."""
    (tmp_path / "beat_lines_app.py").write_text(textwrap.dedent(BEAT_APP))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.getcwd()]),
        "BROKER_URL_FOR_TEST": REDIS_URL,
        "PREFIX_FOR_TEST": redis_prefix,
    }
    log = tmp_path / "beat.log"
    with log.open("ab") as out:
        beat = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "beat_lines_app", "beat", "-l", "INFO"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tmp_path,
        )
        try:
            deadline = time.monotonic() + 60
            while "settings override" not in log.read_text() and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            beat.terminate()
            beat.wait(20)
    output = log.read_text()

    banner = [line for line in output.splitlines() if ". ddd_celery ->" in line]
    assert banner == [
        "    . ddd_celery -> 1 job, 1 system job (ddd_celery.relay), lock RedisLock"
    ], output
    [override] = [line for line in output.splitlines() if "settings override" in line]
    assert override.endswith(
        "INFO/MainProcess] beat: settings override the declared schedule of ops.close-day: "
        "declared cron 30 2 * * * (Europe/Paris), runs on cron 0 3 * * * (UTC) "
        'job=ops.close-day declared="cron 30 2 * * * (Europe/Paris)" '
        'effective="cron 0 3 * * * (UTC)"'
    ), output
    assert 'beat: job scheduled job=ops.close-day schedule="cron 0 3 * * * (UTC)"' in output
