"""``celery -A app jobs list`` over many jobs: the same output, byte for byte, however it is built.

The listing computes what jobs share once (the next instant per distinct schedule, the text of
each instant) and decodes each store's replies in batches. These tests pin what it prints: a
varied set of jobs against the text and JSON the per-job listing printed (files under
``cli_list/``, written before the listing was restructured, LAST HANDLED since counting a run
recorded later than the checkpoint), and thousands of jobs, past a batch of every store, against
each job's own single-key reads and cron evaluation.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from background_jobs import EchoJob, Seen
from celery import Celery
from celery.bin.base import CLIContext
from celery.schedules import crontab
from click.testing import CliRunner, Result
from redis import Redis
from services import REDIS_URL

from ddd_celery.background import InMemoryJobStore
from ddd_celery.celery import CeleryJobs, install_jobs
from ddd_celery.celery.background import install_background_jobs
from ddd_celery.celery.cli import COLUMNS, jobs, local_time, zone_of
from ddd_celery.declarations import ScheduledJobDeclaration, parse_job_schedule
from ddd_celery.declarations.cron_evaluator import next_occurrence
from ddd_celery.kernel import FixedClock, InMemoryLock
from ddd_celery.kernel.instants import iso_ms
from ddd_celery.redis import RedisJobCheckpoints, RedisJobLastRuns, RedisJobRunState
from ddd_celery.scheduling.outcomes import JobRun, Outcome

NOW = datetime(2026, 3, 28, 23, 45, 30, 250_000, tzinfo=UTC)
"""Saturday night before Europe springs forward: Paris's 02:30 does not exist tomorrow."""
EXPECTED = Path(__file__).parent / "cli_list"
SCHEDULES: list[dict[str, Any]] = [
    {"every": "15m"},
    {"every": "1500ms"},
    {"cron": "0 7 * * 1-5", "time_zone": "Europe/Paris"},
    {"cron": "30 2 * * *", "time_zone": "Europe/Paris"},
    {"cron": "30 1 * * *", "time_zone": "America/New_York"},
    {"cron": "*/5 * * * *", "time_zone": "Asia/Kolkata"},
    {"cron": "0 7 * * 1-5", "enabled": False},
    {"every": "1h", "enabled": False},
]
OUTCOMES: list[tuple[Outcome, str | None, str | None] | None] = [
    None,
    (Outcome.SUCCEEDED, None, None),
    (Outcome.FAILED, "JOB_TIMEOUT", "JobTimeoutError"),
    (Outcome.SKIPPED_OVERLAP, None, None),
    (Outcome.MISSED, None, None),
    (Outcome.FAILED, "UNEXPECTED_ERROR", "KeyError"),
]


class IdleJob:
    def run(self, execution: object) -> None:
        return None


def declared(count: int) -> list[ScheduledJobDeclaration]:
    """``count`` jobs of two contexts, on the schedules in turn."""
    return [
        ScheduledJobDeclaration(
            f"{context}.job-{number:05d}",
            context,
            parse_job_schedule(SCHEDULES[number % len(SCHEDULES)]),
            IdleJob,
        )
        for number in range(count)
        for context in ["golden" if number % 5 else "report"]
    ]


@pytest.fixture
def make_listed(redis_client: Redis, redis_prefix: str) -> Iterator[Any]:
    """Build an app named ``cli-list`` with ``count`` jobs, and what its stores hold of them."""
    apps: list[Celery] = []

    def make(count: int, *, redis: bool = True) -> tuple[Celery, CeleryJobs]:
        app = Celery("cli-list", broker=REDIS_URL, set_as_current=False)
        app.conf.update(
            broker_transport_options={"global_keyprefix": redis_prefix},
            ddd_celery_redis_url=None,
            beat_schedule={
                "flush": {"task": "cache.flush", "schedule": 900},
                "report": {"task": "cache.report", "schedule": crontab(minute=30, hour=2)},
            },
        )
        apps.append(app)
        clock = FixedClock(NOW)
        stores: dict[str, Any] = {}
        if redis:
            stores = {
                "run_state": RedisJobRunState(redis_client, prefix=f"{redis_prefix}run:"),
                "checkpoints": RedisJobCheckpoints(
                    redis_client, prefix=f"{redis_prefix}checkpoint:"
                ),
                "last_runs": RedisJobLastRuns(redis_client, prefix=f"{redis_prefix}last-run:"),
            }
        registry = install_jobs(
            app,
            jobs=declared(count),
            lock=InMemoryLock(clock),
            clock=clock,
            environ={},
            **stores,
        )
        install_background_jobs(
            app, jobs=[EchoJob], store=InMemoryJobStore(), providers={Seen: Seen}
        )
        if redis:
            record(registry, [job.name for job in declared(count)])
        return app, registry

    yield make
    for app in apps:
        app.close()


def record(registry: CeleryJobs, names: list[str]) -> None:
    """Runs in progress, checkpoints and last runs, different from one job to the next."""
    assert registry.checkpoints is not None
    assert registry.last_runs is not None
    for number, name in enumerate(names):
        at = NOW - timedelta(hours=number % 7, microseconds=number % 3 * 1_500)
        if number % 3 == 0:
            registry.run_state.claim(name, at, queue=False, ttl_ms=600_000)
        if number % 4 != 1:
            registry.checkpoints.write(name, at)
        outcome = OUTCOMES[number % len(OUTCOMES)]
        if outcome is not None:
            registry.last_runs.write(
                JobRun(
                    job=name,
                    scheduled_at=at - timedelta(minutes=number % 11),
                    outcome=outcome[0],
                    context=name.split(".")[0],
                    error_code=outcome[1],
                    error_type=outcome[2],
                )
            )


def invoke(app: Celery, *args: str) -> Result:
    context = CLIContext(app=app, no_color=True, workdir=None, quiet=False)
    return CliRunner().invoke(jobs, ["list", *args], obj=context)


@pytest.mark.parametrize("redis", [True, False], ids=["redis stores", "in memory"])
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_the_listing_of_varied_jobs_is_what_the_per_job_listing_printed(
    make_listed: Any, redis: bool, as_json: bool
) -> None:
    app, _ = make_listed(48, redis=redis)

    result = invoke(app, *(["--json"] if as_json else []))

    expected = EXPECTED / f"{'redis' if redis else 'memory'}.{'json' if as_json else 'txt'}"
    assert result.exit_code == 0, result.output
    assert result.stdout == expected.read_text(encoding="utf-8")


def one_by_one(registry: CeleryJobs) -> list[dict[str, Any]]:
    """Each job as ``--json`` lists it, from its own single-key reads and cron evaluation."""
    assert registry.checkpoints is not None
    assert registry.last_runs is not None
    listed = []
    for job in registry.jobs.values():
        enabled = job.schedule.options.enabled
        at = next_occurrence(job.schedule, NOW) if enabled else None
        running = registry.run_state.running(job.name) if job.declared else None
        handled = registry.checkpoints.read(job.name)
        tracked = job.declared or job.inline is not None
        run = registry.last_runs.read(job.name) if tracked else None
        if run is not None and (handled is None or run.scheduled_at > handled):
            handled = run.scheduled_at  # a run recorded later than the checkpoint was handled
        listed.append(
            {
                "name": job.name,
                "schedule": job.schedule.description,
                "time_zone": str(zone_of(job)),
                "enabled": enabled,
                "queue": job.queue,
                "next_run_at": None if at is None else iso_ms(at),
                "next_run_local": None if at is None else local_time(at, zone_of(job)),
                "paused": "unknown",  # an InMemoryLock's pauses live in beat's memory
                "running": (running and iso_ms(running)) if job.declared else "untracked",
                "last_handled": handled and iso_ms(handled),
                "last_outcome": (
                    "untracked"
                    if not tracked
                    else run
                    and {
                        "outcome": run.outcome.value,
                        "error_code": run.error_code,
                        "error_type": run.error_type,
                        "scheduled_at": iso_ms(run.scheduled_at),
                    }
                ),
            }
        )
    return listed


def as_row(job: dict[str, Any]) -> tuple[str, ...]:
    """The cells of the table's row of a job as ``--json`` gives it."""
    outcome = job["last_outcome"]
    if isinstance(outcome, dict):
        outcome = " ".join(
            filter(None, (outcome["outcome"], outcome["error_code"], outcome["scheduled_at"]))
        )
    queue = job["queue"] or ("(runs in beat)" if job["name"] == "ddd_celery.relay" else None)
    return (
        job["name"],
        job["schedule"],
        "yes" if job["enabled"] else "no",
        queue or "(task's own)",
        job["next_run_at"] or "never by time",
        job["next_run_local"] or "never by time",
        job["running"] or "no",
        job["last_handled"] or "never",
        outcome or "none yet",
    )


def test_thousands_of_jobs_are_listed_as_each_jobs_own_reads_tell(make_listed: Any) -> None:
    app, registry = make_listed(2_500)
    expected = one_by_one(registry)

    as_json = invoke(app, "--json")
    as_text = invoke(app)

    assert as_json.exit_code == 0, as_json.output
    assert as_text.exit_code == 0, as_text.output
    assert json.loads(as_json.stdout)["jobs"] == expected
    rows = [COLUMNS, *(as_row(job) for job in expected)]
    widths = [max(map(len, column)) for column in zip(*rows, strict=True)]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    assert as_text.stdout == "\n".join(lines) + "\n"


def test_a_listing_leaves_the_garbage_collector_as_it_found_it(make_listed: Any) -> None:
    app, _ = make_listed(3, redis=False)

    listed = invoke(app)
    enabled_after = gc.isenabled()
    gc.disable()
    try:
        listed_while_disabled = invoke(app, "--json")
        disabled_after = not gc.isenabled()
    finally:
        gc.enable()

    assert listed.exit_code == 0, listed.output
    assert listed_while_disabled.exit_code == 0, listed_while_disabled.output
    assert enabled_after
    assert disabled_after
