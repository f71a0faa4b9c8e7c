"""``install_jobs``: one call wires declared jobs into a Celery app's beat, workers and CLI."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from celery_support import AppFactory

from ddd_celery.celery import CeleryJobs, install_jobs, jobs_of
from ddd_celery.celery.config import JobsConfigError
from ddd_celery.celery.guards import BEAT_SCHEDULER, check_configuration
from ddd_celery.declarations import (
    DeclarationError,
    JobExecution,
    OverlapPolicy,
    collect_scheduled_jobs,
    declaration_of,
    scheduled,
)
from ddd_celery.kernel import (
    FixedClock,
    InMemoryLock,
    InMemoryTenantDirectory,
    SystemClock,
)
from ddd_celery.redis import RedisJobCheckpoints, RedisJobRunState, RedisLock, connect
from ddd_celery.scheduling.errors import (
    INVALID_JOB_SETTINGS,
    UNKNOWN_JOB,
    InvalidJobScheduleError,
    InvalidJobSettingsError,
    UnknownJobError,
)


class Mailer:
    """A port a job's constructor takes."""


@scheduled("wiring.send-reminders", cron="0 7 * * 1-5", time_zone="Europe/Paris", timeout_ms=30_000)
class SendRemindersJob:
    def __init__(self, mailer: Mailer) -> None:
        self.mailer = mailer

    def run(self, execution: JobExecution) -> None:
        return None


@scheduled("wiring.close-month", every="1d", tenancy="per-tenant")
class CloseMonthJob:
    def run(self, execution: JobExecution) -> None:
        return None


@scheduled("reports.compile", every="15m")
class CompileReportsJob:
    async def run(self, execution: JobExecution) -> None:
        return None


NOW = datetime(2026, 3, 2, 9, 58, 30, tzinfo=UTC)
REMINDERS = "wiring.send-reminders"


def install(app: Any, **overrides: Any) -> CeleryJobs:
    clock = FixedClock(NOW)
    options: dict[str, Any] = {
        "jobs": [SendRemindersJob, CompileReportsJob],
        "providers": {Mailer: Mailer},
        "lock": InMemoryLock(clock),
        "clock": clock,
        "environ": {},
    }
    return install_jobs(app, **(options | overrides))


def test_each_declared_job_becomes_a_task_named_after_it_on_its_contexts_queue(
    make_app: AppFactory,
) -> None:
    app = make_app()

    registry = install(app)

    assert sorted(registry.jobs) == ["reports.compile", REMINDERS]
    assert app.tasks[REMINDERS].name == REMINDERS
    assert registry.jobs[REMINDERS].queue == "wiring"
    assert registry.jobs["reports.compile"].queue == "reports"
    assert jobs_of(app) is registry


def test_a_route_sends_a_job_to_another_queue(make_app: AppFactory) -> None:
    app = make_app()

    registry = install(app, routes={REMINDERS: "mail"})

    assert registry.jobs[REMINDERS].queue == "mail"
    assert registry.jobs["reports.compile"].queue == "reports"


def test_a_worker_started_without_queues_consumes_the_jobs_queues_and_the_default_one(
    make_app: AppFactory,
) -> None:
    app = make_app()

    install(app, routes={REMINDERS: "mail"})

    assert set(app.amqp.queues) == {app.conf.task_default_queue, "mail", "reports"}
    assert app.amqp.queues["mail"].routing_key == "mail"


def test_queues_the_app_already_declares_are_kept(make_app: AppFactory) -> None:
    app = make_app(task_queues={"priority": {"routing_key": "urgent"}})

    install(app)

    assert set(app.amqp.queues) == {"priority", "wiring", "reports"}
    assert app.amqp.queues["priority"].routing_key == "urgent"


def test_an_occurrence_is_never_retried_nor_redelivered_and_travels_as_json(
    make_app: AppFactory,
) -> None:
    app = make_app()

    install(app)

    task = app.tasks[REMINDERS]
    assert task.acks_late is False
    assert task.reject_on_worker_lost is False
    assert task.serializer == "json"
    assert task.ignore_result is True


def test_timeout_ms_becomes_the_soft_time_limit_with_a_hard_limit_a_little_above(
    make_app: AppFactory,
) -> None:
    app = make_app()

    install(app)

    task = app.tasks[REMINDERS]
    assert task.soft_time_limit == 30.0
    assert 30.0 < task.time_limit <= 40.0
    assert app.tasks["reports.compile"].soft_time_limit is None
    assert app.tasks["reports.compile"].time_limit is None


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("task_serializer", "pickle"),
        ("result_serializer", "pickle"),
        ("accept_content", ["json", "pickle"]),
        ("result_accept_content", ["application/x-python-serialize"]),
    ],
)
def test_an_app_configured_for_pickle_is_refused(
    make_app: AppFactory, setting: str, value: object
) -> None:
    app = make_app(**{setting: value})

    with pytest.raises(ValueError, match=f"{setting}.*JSON only"):
        install(app)

    assert getattr(app, "ddd_jobs", None) is None


def test_plain_celery_beat_uses_the_job_scheduler(make_app: AppFactory) -> None:
    app = make_app()

    install(app)

    assert app.conf.beat_scheduler == BEAT_SCHEDULER == "ddd_celery.celery.beat:JobBeatScheduler"


def test_installing_twice_on_one_app_is_refused(make_app: AppFactory) -> None:
    app = make_app()
    install(app)

    with pytest.raises(RuntimeError, match="already installed"):
        install(app)


def test_a_job_whose_port_nobody_provides_is_refused_when_wired(make_app: AppFactory) -> None:
    with pytest.raises(DeclarationError, match=r"wiring\.send-reminders.*Mailer"):
        install(make_app(), providers={})


def test_a_per_tenant_job_needs_a_tenant_directory(make_app: AppFactory) -> None:
    with pytest.raises(InvalidJobScheduleError, match=r"wiring\.close-month"):
        install(make_app(), jobs=[CloseMonthJob])

    registry = install(make_app(), jobs=[CloseMonthJob], tenants=InMemoryTenantDirectory(["a"]))
    assert list(registry.jobs) == ["wiring.close-month"]


def test_declarations_are_taken_as_collected(make_app: AppFactory) -> None:
    declarations = collect_scheduled_jobs(__name__)

    registry = install(
        make_app(),
        jobs=[d for d in declarations if d.name != "wiring.close-month"],
    )

    assert registry.jobs[REMINDERS].job_class is SendRemindersJob


def test_a_job_given_twice_is_refused_as_the_port_refuses_a_name_registered_twice(
    make_app: AppFactory,
) -> None:
    # InvalidJobScheduleError, as JobScheduler.register raises: the JobScheduler contract
    # registers through install_jobs.
    with pytest.raises(InvalidJobScheduleError, match=r"wiring\.send-reminders.*declared twice"):
        install(make_app(), jobs=[SendRemindersJob, declaration_of(SendRemindersJob)])


def test_a_beat_schedule_entry_with_the_name_of_a_declared_job_is_refused_the_same_way(
    make_app: AppFactory,
) -> None:
    flush = replace(declaration_of(CompileReportsJob), name="beat.flush-cache", context="beat")

    with pytest.raises(InvalidJobScheduleError, match=r"beat\.flush-cache.*name of a declared"):
        install(make_app(beat_schedule=FLUSH), jobs=[flush])


def test_settings_switch_a_job_off_reschedule_and_tune_it_without_code(
    make_app: AppFactory,
) -> None:
    app = make_app()

    registry = install(
        app,
        settings={
            REMINDERS: {"enabled": False, "timeout_ms": 5_000},
            "reports.compile": {"schedule": {"every": "5m"}, "overlap": "queue"},
        },
    )

    reminders, reports = registry.jobs[REMINDERS], registry.jobs["reports.compile"]
    assert reminders.schedule.options.enabled is False
    assert reminders.schedule.description == "cron 0 7 * * 1-5 (Europe/Paris)"
    assert app.tasks[REMINDERS].soft_time_limit == 5.0
    assert reports.schedule.description == "every 5m"
    assert reports.schedule.options.overlap is OverlapPolicy.QUEUE


def test_the_environment_switches_a_job_off_over_the_settings(make_app: AppFactory) -> None:
    registry = install(
        make_app(),
        settings={REMINDERS: {"enabled": True}},
        environ={"JOB_WIRING_SEND_REMINDERS_ENABLED": "false"},
    )

    assert registry.jobs[REMINDERS].schedule.options.enabled is False
    assert registry.jobs["reports.compile"].schedule.options.enabled is True


def test_settings_for_a_job_nobody_declares_are_refused(make_app: AppFactory) -> None:
    with pytest.raises(UnknownJobError, match=r"wiring\.renamed") as raised:
        install(make_app(), settings={"wiring.renamed": {"enabled": False}})

    assert raised.value.code == UNKNOWN_JOB


def test_settings_that_cannot_be_read_are_refused(make_app: AppFactory) -> None:
    with pytest.raises(InvalidJobSettingsError, match=REMINDERS) as raised:
        install(make_app(), settings={REMINDERS: {"timeout_ms": "soon"}})

    assert raised.value.code == INVALID_JOB_SETTINGS


def test_a_route_for_a_job_nobody_declares_is_refused(make_app: AppFactory) -> None:
    with pytest.raises(UnknownJobError, match=r"wiring\.renamed"):
        install(make_app(), routes={"wiring.renamed": "mail"})


@pytest.mark.parametrize(
    ("environ", "start", "expected"),
    [
        ({}, None, True),
        ({"RUN_JOBS": "false"}, None, False),
        ({"RUN_JOBS": "true"}, None, True),
        ({"RUN_JOBS": "true"}, False, False),
    ],
)
def test_run_jobs_says_whether_this_process_starts_jobs_by_time(
    make_app: AppFactory, environ: dict[str, str], start: bool | None, expected: bool
) -> None:
    registry = install(make_app(), environ=environ, start=start)

    assert registry.start is expected


@pytest.mark.parametrize("variable", ["RUN_JOBS", "JOB_WIRING_SEND_REMINDERS_ENABLED"])
def test_an_environment_value_that_cannot_be_read_is_refused_by_the_first_use(
    make_app: AppFactory, variable: str
) -> None:
    """Read where the app is imported, it is refused where the app is used: a worker, beat or a
    ``jobs`` command says it in one line, where Celery would print its "Unable to load"."""
    app = make_app()
    install(app, environ={variable: "maybe"})

    with pytest.raises(JobsConfigError, match=f"{variable}='maybe'"):
        check_configuration(app)
    with pytest.raises(JobsConfigError, match=variable):
        jobs_of(app)


@pytest.mark.parametrize("scheme", ["redis+cluster", "rediss+cluster"])
def test_an_untagged_prefix_for_a_cluster_is_refused_as_a_process_starts_without_asking_it(
    make_app: AppFactory, closed_port_url: str, scheme: str
) -> None:
    """The stores would find out at their first use, for a worker its first task: the URL says
    it is a cluster, so every process stops as it starts, in one line, with the cluster down."""
    cluster_url = closed_port_url.replace("redis", scheme, 1)
    untagged = make_app(ddd_celery_redis_url=cluster_url, ddd_celery_key_prefix="shop:")
    install(untagged, lock=None)

    with pytest.raises(JobsConfigError, match=r"key_prefix 'shop:' has no hash tag.*'\{shop\}:'"):
        check_configuration(untagged)

    tagged = make_app(ddd_celery_redis_url=cluster_url, ddd_celery_key_prefix="{shop}:")
    install(tagged, lock=None)
    assert check_configuration(tagged).key_prefix == "{shop}:"
    plain = make_app(ddd_celery_redis_url=closed_port_url, ddd_celery_key_prefix="shop:")
    install(plain, lock=None)
    assert check_configuration(plain).key_prefix == "shop:"


def test_wiring_asks_no_store_and_no_broker_anything(
    make_app: AppFactory, closed_port_url: str
) -> None:
    app = make_app(broker_url=closed_port_url)
    down = connect(closed_port_url)
    started = time.monotonic()

    install(
        app,
        lock=RedisLock(down),
        run_state=RedisJobRunState(down),
        checkpoints=RedisJobCheckpoints(down),
        clock=SystemClock(),
    )
    app.finalize()

    assert time.monotonic() - started < 1.0
    assert REMINDERS in app.tasks


def test_calling_a_job_task_by_hand_goes_to_the_jobs_queue_and_other_routes_still_apply(
    make_app: AppFactory,
) -> None:
    app = make_app(task_routes={"app.*": {"queue": "app-tasks"}})

    install(app, routes={REMINDERS: "mail"})

    assert app.amqp.router.route({}, REMINDERS)["queue"].name == "mail"
    assert app.amqp.router.route({}, "app.export")["queue"].name == "app-tasks"


FLUSH = {"flush cache": {"task": "cache.flush", "schedule": 900, "options": {"priority": 3}}}


def test_beat_schedule_entries_become_jobs_of_the_beat_context_run_by_their_own_tasks(
    make_app: AppFactory,
) -> None:
    app = make_app(beat_schedule=FLUSH)

    registry = install(app)

    entry = registry.jobs["beat.flush-cache"]
    assert (entry.task_name, entry.declared) == ("cache.flush", False)
    assert entry.schedule.description == "every 15m"
    assert "beat.flush-cache" not in app.tasks


def test_a_beat_schedule_entry_is_switched_off_and_routed_like_a_job(
    make_app: AppFactory,
) -> None:
    app = make_app(beat_schedule=FLUSH)

    registry = install(
        app,
        environ={"JOB_BEAT_FLUSH_CACHE_ENABLED": "false"},
        routes={"beat.flush-cache": "maintenance"},
    )

    entry = registry.jobs["beat.flush-cache"]
    assert entry.schedule.options.enabled is False
    assert entry.queue == "maintenance"
    assert entry.options == {"priority": 3, "queue": "maintenance"}


def test_beat_schedule_entries_are_left_alone_when_asked(make_app: AppFactory) -> None:
    registry = install(make_app(beat_schedule=FLUSH), include_beat_schedule=False)

    assert "beat.flush-cache" not in registry.jobs


def test_a_beat_schedule_entry_that_cannot_be_translated_is_refused_naming_it(
    make_app: AppFactory,
) -> None:
    class AtDawn:
        """A schedule class of the app's own, which the time core cannot read."""

    app = make_app(beat_schedule={"at dawn": {"task": "x.y", "schedule": AtDawn()}})

    with pytest.raises(DeclarationError, match="at dawn"):
        install(app)
