"""The ``ddd_celery_*`` settings of ``app.conf``: read at first use, whichever comes first.

``install_jobs(app, jobs=...)`` on a Redis broker is a deployment of several beats: the lock,
run state, checkpoints and last runs are built on Redis from the configuration, and explicit
arguments win. The Redis here is the real one; every key is under the test's prefix.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery import Celery
from celery.beat import Service
from celery_support import Runs
from redis import Redis
from services import REDIS_URL

from ddd_celery.celery import install_jobs, jobs_of, run_now
from ddd_celery.celery.beat import JobBeatScheduler
from ddd_celery.celery.config import INVALID_JOBS_CONFIG, JobsConfigError
from ddd_celery.celery.guards import BEAT_SCHEDULER
from ddd_celery.declarations import JobExecution, scheduled
from ddd_celery.kernel import DomainError, FixedClock, InMemoryErrorReporter, InMemoryLock
from ddd_celery.redis import RedisJobCheckpoints, RedisJobLastRuns, RedisJobRunState, RedisLock
from ddd_celery.scheduling.run_state import InMemoryJobRunState

NOW = datetime(2026, 3, 2, 9, 58, 30, tzinfo=UTC)
TICK = "config.tick"


@scheduled(TICK, every="15m")
class TickJob:
    def run(self, execution: JobExecution) -> None:
        return None


class Settings:
    """An object for ``config_from_object``, as a project's ``celeryconfig`` module."""

    def __init__(self, **settings: Any) -> None:
        vars(self).update(settings)


def an_app(broker: str | None = None) -> Celery:
    return Celery(f"config-{uuid.uuid4().hex[:12]}", broker=broker, set_as_current=False)


@pytest.fixture
def conf(redis_prefix: str) -> dict[str, Any]:
    """A Redis broker under the test's prefix, and the stores' keys under it too."""
    return {
        "broker_url": REDIS_URL,
        "broker_transport_options": {"global_keyprefix": redis_prefix},
        "ddd_celery_key_prefix": redis_prefix,
    }


def test_on_a_redis_broker_the_four_stores_are_built_on_it_under_the_key_prefix(
    conf: dict[str, Any], redis_client: Redis, redis_prefix: str
) -> None:
    app = an_app()
    app.conf.update(conf)
    clock = FixedClock(NOW)
    install_jobs(app, jobs=[TickJob], clock=clock, environ={})

    registry = jobs_of(app)
    lease = registry.lock.acquire("job:config.tick:2026-03-02T10:00:00.000Z", 60_000)
    assert registry.checkpoints is not None
    registry.checkpoints.write(TICK, NOW)

    assert isinstance(registry.lock, RedisLock)
    assert isinstance(registry.run_state, RedisJobRunState)
    assert isinstance(registry.checkpoints, RedisJobCheckpoints)
    assert isinstance(registry.last_runs, RedisJobLastRuns)
    assert lease is not None
    assert redis_client.exists(f"{redis_prefix}job:config.tick:2026-03-02T10:00:00.000Z")
    assert redis_client.exists(f"{redis_prefix}checkpoint:{TICK}")


def test_two_beats_wired_by_configuration_alone_send_each_occurrence_once(
    conf: dict[str, Any],
) -> None:
    clock = FixedClock(NOW)
    sent: list[str] = []
    runs = Runs()
    beats = []
    for _ in range(2):
        app = an_app()
        app.config_from_object(Settings(**conf))
        install_jobs(app, jobs=[TickJob], clock=clock, environ={}, on_run=runs)
        app.send_task = lambda name, *args, **options: sent.append(name)
        beats.append(Service(app=app, scheduler_cls=app.conf.beat_scheduler).get_scheduler())

    for _ in range(3):
        clock.set(min(NOW + timedelta(minutes=2), clock.now() + timedelta(seconds=90)))
        for beat in beats:
            beat.tick()

    assert all(isinstance(beat, JobBeatScheduler) for beat in beats)
    assert sent == [TICK]
    assert [run.outcome.value for run in runs.records] == ["skipped-locked"]


@pytest.mark.parametrize("order", ["config before install_jobs", "config after install_jobs"])
def test_settings_are_read_at_first_use_whether_configured_before_or_after_install_jobs(
    order: str, conf: dict[str, Any], redis_prefix: str
) -> None:
    app = an_app()
    settings = Settings(**conf, ddd_celery_late_after_ms=5_000, ddd_celery_lock_ttl_ms=120_000)
    if order == "config before install_jobs":
        app.config_from_object(settings)
    install_jobs(app, jobs=[TickJob], clock=FixedClock(NOW), environ={})
    if order == "config after install_jobs":
        app.config_from_object(settings)

    registry = jobs_of(app)

    assert (registry.rules.late_after_ms, registry.rules.lock_ttl_ms) == (5_000, 120_000)
    assert isinstance(registry.lock, RedisLock)
    assert app.conf.beat_scheduler == BEAT_SCHEDULER
    assert app.conf.task_routes[0] == {TICK: {"queue": "config"}}
    assert "config" in app.conf.task_queues


def test_a_configuration_loaded_again_adds_the_routes_and_queues_once() -> None:
    app = an_app("memory://")
    install_jobs(app, jobs=[TickJob], lock=InMemoryLock(FixedClock(NOW)), environ={})

    app.config_from_object(Settings(broker_url="memory://", task_routes=({"x": "y"},)))
    app.config_from_object(Settings(broker_url="memory://", task_routes=({"x": "y"},)))

    assert app.conf.task_routes == ({TICK: {"queue": "config"}}, {"x": "y"})


def test_explicit_arguments_win_over_the_configuration(conf: dict[str, Any]) -> None:
    app = an_app()
    app.conf.update(conf, ddd_celery_late_after_ms=5_000)
    clock = FixedClock(NOW)
    lock, run_state = InMemoryLock(clock), InMemoryJobRunState(clock)
    install_jobs(
        app,
        jobs=[TickJob],
        lock=lock,
        run_state=run_state,
        late_after_ms=30_000,
        clock=clock,
        environ={},
    )

    registry = jobs_of(app)

    assert registry.lock is lock
    assert registry.run_state is run_state
    assert isinstance(registry.checkpoints, RedisJobCheckpoints)
    assert registry.rules.late_after_ms == 30_000


def test_the_redis_url_setting_wins_over_the_broker(redis_prefix: str) -> None:
    app = an_app("memory://")
    app.conf.update(ddd_celery_redis_url=REDIS_URL, ddd_celery_key_prefix=redis_prefix)
    install_jobs(app, jobs=[TickJob], environ={})

    assert isinstance(jobs_of(app).lock, RedisLock)


def test_reading_the_configuration_connects_to_nothing(closed_port_url: str) -> None:
    app = an_app(closed_port_url)
    install_jobs(app, jobs=[TickJob], environ={})

    registry = jobs_of(app)

    assert isinstance(registry.lock, RedisLock)


def test_a_broker_that_is_not_redis_without_a_lock_is_refused_saying_what_to_pass() -> None:
    app = an_app("amqp://guest:s3cret@rabbit.example:5672//")
    install_jobs(app, jobs=[TickJob], environ={})

    with pytest.raises(JobsConfigError) as refused:
        jobs_of(app)

    message = str(refused.value)
    assert refused.value.code == INVALID_JOBS_CONFIG
    assert "broker (amqp) is not Redis" in message
    assert "ddd_celery_redis_url" in message
    assert "install_jobs(..., lock=...)" in message
    assert "s3cret" not in message


def test_without_a_redis_url_the_given_lock_runs_with_the_stores_in_memory() -> None:
    app = an_app("memory://")
    clock = FixedClock(NOW)
    install_jobs(app, jobs=[TickJob], lock=InMemoryLock(clock), clock=clock, environ={})

    registry = jobs_of(app)

    assert isinstance(registry.run_state, InMemoryJobRunState)
    assert registry.checkpoints is None
    assert registry.last_runs is None


@pytest.mark.parametrize(
    ("setting", "value", "problem"),
    [
        ("ddd_celery_redis_uri", "redis://x", "ddd_celery_redis_uri: not a setting of ddd_celery"),
        ("ddd_celery_lease_ms", 30_000, "ddd_celery_lease_ms: not a setting of ddd_celery"),
        ("ddd_celery_late_after_ms", 0, "ddd_celery_late_after_ms: Input should be greater"),
        ("ddd_celery_lock_ttl_ms", "15m", "ddd_celery_lock_ttl_ms: Input should be a valid int"),
        ("ddd_celery_grace_ms", "30s", "ddd_celery_grace_ms: Input should be a valid int"),
        ("ddd_celery_key_prefix", 5, "ddd_celery_key_prefix: Input should be a valid str"),
        ("ddd_celery_max_payload_bytes", 0, "ddd_celery_max_payload_bytes: Input should be great"),
    ],
)
def test_a_setting_that_cannot_be_read_is_refused_naming_it(
    setting: str, value: object, problem: str
) -> None:
    app = an_app("memory://")
    app.conf.update({setting: value})
    install_jobs(app, jobs=[TickJob], lock=InMemoryLock(FixedClock(NOW)), environ={})

    with pytest.raises(JobsConfigError, match=problem):
        jobs_of(app)
    with pytest.raises(JobsConfigError):
        jobs_of(app)


class ReportedError(RuntimeError):
    pass


@scheduled("config.fail", every="1h")
class FailingJob:
    def run(self, execution: JobExecution) -> None:
        if execution.scheduled_at.minute % 2:
            raise DomainError("NOTHING_DUE", "nothing is due")
        raise ReportedError("the ledger is gone")


def test_the_error_reporter_receives_each_unexpected_failure_but_not_a_domain_error() -> None:
    app = an_app("memory://")
    clock = FixedClock(NOW)
    errors = InMemoryErrorReporter()
    install_jobs(
        app, jobs=[FailingJob], lock=InMemoryLock(clock), clock=clock, environ={}, errors=errors
    )

    with pytest.raises(ReportedError):
        run_now(app, "config.fail")
    clock.set(NOW + timedelta(minutes=1))
    with pytest.raises(DomainError):
        run_now(app, "config.fail")

    [(error, context)] = errors.reported
    assert isinstance(error, ReportedError)
    assert context["job"] == "config.fail"
    assert context["error_code"] == "UNEXPECTED_ERROR"


def test_settings_under_django_s_namespace_are_read_too(redis_prefix: str) -> None:
    class DjangoSettings:
        CELERY_BROKER_URL = "memory://"
        CELERY_DDD_CELERY_REDIS_URL = REDIS_URL
        CELERY_DDD_CELERY_KEY_PREFIX = redis_prefix
        CELERY_DDD_CELERY_LATE_AFTER_MS = 7_000

    app = an_app()
    app.config_from_object(DjangoSettings, namespace="CELERY")
    install_jobs(app, jobs=[TickJob], environ={})

    registry = jobs_of(app)

    assert isinstance(registry.lock, RedisLock)
    assert registry.rules.late_after_ms == 7_000


def test_a_scheduler_option_given_that_cannot_be_used_is_refused_at_once() -> None:
    app = an_app("memory://")

    with pytest.raises(ValueError, match="late_after_ms must be a positive int"):
        install_jobs(app, jobs=[TickJob], lock=InMemoryLock(FixedClock(NOW)), late_after_ms=0)
