"""``install_background_jobs``: the tasks, routes and queues it wires, and what it refuses."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from background_jobs import ECHO, STUCK, EchoJob, Seen, StuckJob
from celery import Celery

from ddd_celery.background import InMemoryJobStore, UnknownBackgroundJobError
from ddd_celery.celery import install_jobs
from ddd_celery.celery.background import background_jobs_of, install_background_jobs
from ddd_celery.celery.background.relay import RELAY_JOB
from ddd_celery.celery.registry import jobs_of
from ddd_celery.declarations import DeclarationError
from ddd_celery.declarations.background import BackgroundJobExecution, background
from ddd_celery.kernel import InMemoryLock, SystemClock
from ddd_celery.scheduling.errors import InvalidJobScheduleError


class Unprovided:
    pass


@background("celerybg.needs-port")
class NeedsPortJob:
    def __init__(self, port: Unprovided) -> None:
        self._port = port

    def run(self, payload: Any, execution: BackgroundJobExecution) -> None:
        pass


@background("celerybg.other-queue", queue="slow-lane")
class OtherQueueJob:
    def run(self, payload: Any, execution: BackgroundJobExecution) -> None:
        pass


def scheduled_app(**settings: Any) -> Celery:
    app = Celery(f"install-{uuid.uuid4().hex[:8]}", broker="memory://", set_as_current=False)
    app.conf.update(settings)
    install_jobs(app, jobs=[], lock=InMemoryLock(SystemClock()), environ={})
    return app


def install(app: Celery, **overrides: Any) -> Any:
    options: dict[str, Any] = {
        "jobs": [EchoJob, StuckJob, OtherQueueJob],
        "store": InMemoryJobStore(),
        "providers": {Seen: Seen},
    }
    return install_background_jobs(app, **(options | overrides))


def test_each_job_gets_a_task_named_after_it_acked_late_rejected_when_lost_json_no_result() -> None:
    app = scheduled_app()
    install(app)

    task = app.tasks[ECHO]
    assert (task.acks_late, task.reject_on_worker_lost, task.ignore_result) == (True, True, True)
    assert task.serializer == "json"
    assert (task.soft_time_limit, task.time_limit) == (None, None)
    stuck = app.tasks[STUCK]
    assert (stuck.soft_time_limit, stuck.time_limit) == (0.3, 5.3)


def test_each_job_is_routed_to_its_queue_which_a_worker_without_q_consumes() -> None:
    app = scheduled_app()
    install(app)

    assert app.amqp.router.route({}, ECHO)["queue"].name == "celerybg"
    assert app.amqp.router.route({}, "celerybg.other-queue")["queue"].name == "slow-lane"
    assert {"celerybg", "slow-lane"} <= set(app.conf.task_queues)


def test_the_relay_is_one_of_the_jobs_beat_runs_every_second_by_default() -> None:
    app = scheduled_app()
    install(app, relay_every_ms=2_000)

    relay = jobs_of(app).job(RELAY_JOB)
    assert relay.inline is not None
    assert relay.schedule.description == "every 2s"


def test_the_queue_knows_the_installed_jobs_only() -> None:
    app = scheduled_app()
    registry = install(app, jobs=[EchoJob])

    with pytest.raises(UnknownBackgroundJobError):
        registry.queue().enqueue(StuckJob, {})
    assert background_jobs_of(app) is registry


def test_a_job_whose_port_no_provider_gives_is_refused_at_install() -> None:
    with pytest.raises(DeclarationError, match="Unprovided"):
        install(scheduled_app(), jobs=[NeedsPortJob])


def test_a_second_install_a_pickle_serializer_a_job_twice_and_a_long_heartbeat_are_refused() -> (
    None
):
    app = scheduled_app()
    install(app)
    with pytest.raises(RuntimeError, match="already installed"):
        install(app)
    with pytest.raises(ValueError, match="pickle"):
        install(scheduled_app(task_serializer="pickle"))
    with pytest.raises(InvalidJobScheduleError, match="declared twice"):
        install(scheduled_app(), jobs=[EchoJob, EchoJob])
    with pytest.raises(ValueError, match="heartbeat_ms"):
        install(scheduled_app(), lease_ms=1_000, heartbeat_ms=600)


def test_background_jobs_of_an_app_without_them_says_how_to_install_them() -> None:
    with pytest.raises(LookupError, match="install_background_jobs"):
        background_jobs_of(scheduled_app())


def test_settings_given_after_install_background_jobs_still_decide_the_stores() -> None:
    app = Celery(f"install-{uuid.uuid4().hex[:8]}", broker="memory://", set_as_current=False)
    install_jobs(app, jobs=[], environ={})  # the lock will come from app.conf
    install(app)

    app.conf.ddd_celery_redis_url = "redis://127.0.0.1:6379/0"
    app.conf.ddd_celery_key_prefix = "settled-later:"

    assert type(jobs_of(app).lock).__name__ == "RedisLock"
