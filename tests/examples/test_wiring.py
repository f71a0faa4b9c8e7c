"""The composition root: declared schedules, the demo's settings, the backend it picks."""

from __future__ import annotations

from pathlib import Path

import pytest
from clinic_fakes import NOW

from ddd_celery import describe_job_schedule
from ddd_celery.celery import jobs_of
from ddd_celery.scheduling.outcomes import JobRun, Outcome
from ddd_celery.sql import SqlJobLastRuns, sqlite_engine
from examples.clinic.app import create_app
from examples.clinic.platform.backend import BACKEND, DATA, LOCAL_REDIS, choose_backend


def schedules(environ: dict[str, str]) -> dict[str, str]:
    jobs = jobs_of(create_app(environ)).jobs
    return {name: describe_job_schedule(job.schedule) for name, job in jobs.items()}


def test_the_jobs_run_on_their_declared_schedules_by_default(environ: dict[str, str]) -> None:
    assert schedules(environ) == {
        "billing.close-month": "cron 0 2 1 * * (Europe/Paris)",
        "notification.send-due-reminders": "every 15m",
        "ddd_celery.relay": "every 1s",  # beat's relay of the background jobs
    }


def test_the_demo_reschedules_both_jobs_by_configuration(environ: dict[str, str]) -> None:
    assert schedules({**environ, "DEMO": "1"}) == {
        "billing.close-month": "every 15s",
        "notification.send-due-reminders": "every 10s",
        "ddd_celery.relay": "every 1s",
    }


def test_a_job_is_switched_off_by_its_environment_variable(environ: dict[str, str]) -> None:
    app = create_app({**environ, "JOB_BILLING_CLOSE_MONTH_ENABLED": "false"})

    assert not jobs_of(app).jobs["billing.close-month"].schedule.options.enabled


def test_each_job_has_the_queue_of_its_context(environ: dict[str, str]) -> None:
    jobs = jobs_of(create_app(environ)).jobs

    assert {name: job.queue for name, job in jobs.items()} == {
        "billing.close-month": "billing",
        "notification.send-due-reminders": "notification",
        "ddd_celery.relay": None,  # runs in beat
    }


def test_the_embedded_default_needs_no_server(tmp_path: Path) -> None:
    backend = choose_backend({BACKEND: "embedded", DATA: str(tmp_path), "REDIS_URL": LOCAL_REDIS})

    assert backend.redis_url is None
    assert backend.celery_settings()["broker_url"] == "filesystem://"
    assert backend.clinic_database == tmp_path / "clinic.sqlite3"


def test_the_last_runs_share_the_file_of_the_other_job_stores(
    environ: dict[str, str], tmp_path: Path
) -> None:
    last_runs = jobs_of(create_app(environ)).last_runs

    assert isinstance(last_runs, SqlJobLastRuns)
    last_runs.write(JobRun("billing.close-month", NOW, Outcome.MISSED, "billing"))
    shared = SqlJobLastRuns(sqlite_engine(tmp_path / "jobs.sqlite3"))
    assert shared.read("billing.close-month") is not None


def test_redis_url_chooses_redis_with_every_key_under_the_example_s_prefix() -> None:
    backend = choose_backend({"REDIS_URL": "redis://redis.internal:6379/3"})

    assert backend.redis_url == "redis://redis.internal:6379/3"
    assert backend.celery_settings() == {
        "broker_url": "redis://redis.internal:6379/3",
        "broker_transport_options": {"global_keyprefix": "ddd_celery_example:"},
        "ddd_celery_key_prefix": "ddd_celery_example:",
    }


def test_a_local_redis_is_used_on_a_database_of_the_example_s_own() -> None:
    assert LOCAL_REDIS.rsplit("/", 1)[1] == "15"


def test_on_redis_the_stores_are_built_from_the_app_s_configuration(tmp_path: Path) -> None:
    environ = {BACKEND: "redis", DATA: str(tmp_path), "REDIS_URL": "redis://127.0.0.1:1/15"}

    registry = jobs_of(create_app(environ))

    assert type(registry.lock).__name__ == "RedisLock"
    assert type(registry.last_runs).__name__ == "RedisJobLastRuns"


def test_an_unknown_backend_is_refused() -> None:
    with pytest.raises(ValueError, match="'redis' or 'embedded'"):
        choose_backend({BACKEND: "rabbitmq"})
