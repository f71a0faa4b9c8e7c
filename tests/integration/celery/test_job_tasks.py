"""The job tasks as registered: one instance per job of one class per kind, in ``app.tasks``.

What each job's task shares (its options, its app, its request stack) is its class's; what is
its own (its name, its job, its time limits) is the instance's, so two jobs never mix theirs.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from celery import Celery, Task
from celery_support import AppFactory

from ddd_celery.celery import install_jobs
from ddd_celery.celery.tasks import (
    HARD_LIMIT_GRACE_S,
    DuplicateTaskNameWarning,
    RunTask,
    ScheduledJobRefusedError,
)
from ddd_celery.celery.tenant_tasks import TenantTask
from ddd_celery.declarations import JobExecution, ScheduledJobDeclaration, parse_job_schedule
from ddd_celery.kernel import InMemoryLock, InMemoryTenantDirectory, SystemClock

QUICK = "jobtasks.quick"
SLOW = "jobtasks.slow"
FREE = "jobtasks.free"
SPREAD = "jobtasks.spread"


class Job:
    def run(self, execution: JobExecution) -> None:
        return None


def declared(name: str, **options: Any) -> ScheduledJobDeclaration:
    schedule = parse_job_schedule({"every": "1h", **options}, job=name)
    return ScheduledJobDeclaration(name, name.partition(".")[0], schedule, Job)


JOBS = [
    declared(QUICK, timeout_ms=2_000),
    declared(SLOW, timeout_ms=90_000),
    declared(FREE),
    declared(SPREAD, tenancy="per-tenant", tenant_runs="spread", timeout_ms=5_000),
]


def install(app: Any, **overrides: Any) -> None:
    options: dict[str, Any] = {
        "jobs": JOBS,
        "lock": InMemoryLock(SystemClock()),
        "tenants": InMemoryTenantDirectory(["t-1"]),
        "environ": {},
    }
    install_jobs(app, **(options | overrides))


def test_each_job_s_task_is_registered_by_its_name_as_an_instance_of_one_class_per_kind(
    make_app: AppFactory,
) -> None:
    app = make_app()

    install(app)

    quick, slow, free = app.tasks[QUICK], app.tasks[SLOW], app.tasks[FREE]
    tenant = app.tasks[f"{SPREAD}.tenant"]
    assert (quick.name, slow.name, free.name, tenant.name) == (
        QUICK,
        SLOW,
        FREE,
        f"{SPREAD}.tenant",
    )
    assert type(quick) is type(slow) is type(free) is type(app.tasks[SPREAD])
    assert isinstance(quick, RunTask)
    assert not isinstance(quick, TenantTask)
    assert isinstance(tenant, TenantTask)
    assert isinstance(quick, app.Task)
    assert quick.app is app
    assert tenant.app is app


def test_two_jobs_with_different_timeouts_keep_their_own_time_limits(
    make_app: AppFactory,
) -> None:
    app = make_app()

    install(app)

    quick, slow, tenant = app.tasks[QUICK], app.tasks[SLOW], app.tasks[f"{SPREAD}.tenant"]
    assert (quick.soft_time_limit, quick.time_limit) == (2.0, 2.0 + HARD_LIMIT_GRACE_S)
    assert (slow.soft_time_limit, slow.time_limit) == (90.0, 90.0 + HARD_LIMIT_GRACE_S)
    assert (tenant.soft_time_limit, tenant.time_limit) == (5.0, 5.0 + HARD_LIMIT_GRACE_S)
    assert (app.tasks[FREE].soft_time_limit, app.tasks[FREE].time_limit) == (None, None)


def test_every_job_s_task_is_early_acknowledged_never_redelivered_json_and_keeps_failures(
    make_app: AppFactory,
) -> None:
    app = make_app()

    install(app)

    for name in (QUICK, FREE, f"{SPREAD}.tenant"):
        task = app.tasks[name]
        assert (task.acks_late, task.reject_on_worker_lost) == (False, False)
        assert (task.ignore_result, task.store_errors_even_if_ignored) == (True, True)
        assert tuple(task.throws) == (ScheduledJobRefusedError,)
        assert task.serializer == "json"


def test_the_send_options_are_each_job_s_own_and_shared_between_equal_ones(
    make_app: AppFactory,
) -> None:
    app = make_app(task_annotations={SLOW: {"priority": 3}})

    install(app, jobs=[*JOBS, declared("jobtasks.other-quick", timeout_ms=2_000)])

    quick, other, slow = (app.tasks[name] for name in (QUICK, "jobtasks.other-quick", SLOW))
    assert quick._get_exec_options() is other._get_exec_options()
    assert quick._get_exec_options()["soft_time_limit"] == 2.0
    assert slow._get_exec_options()["soft_time_limit"] == 90.0
    assert slow._get_exec_options()["priority"] == 3
    assert quick._get_exec_options()["priority"] is None
    assert app.tasks[FREE]._get_exec_options()["time_limit"] is None
    assert quick._get_exec_options()["serializer"] == "json"


def test_send_options_that_cannot_be_shared_are_the_task_s_own(make_app: AppFactory) -> None:
    headers_like = {"x-lane": "slow"}  # an option that cannot be a key of the shared ones
    app = make_app(task_annotations={SLOW: {"expires": headers_like}})

    install(app)

    assert app.tasks[SLOW]._get_exec_options()["expires"] is headers_like
    assert app.tasks[QUICK]._get_exec_options()["expires"] is None


def test_each_task_s_doc_names_its_job(make_app: AppFactory) -> None:
    app = make_app()

    install(app)

    assert app.tasks[QUICK].__doc__ == f"Run one occurrence of the scheduled job {QUICK}."
    assert app.tasks[SLOW].__doc__ == f"Run one occurrence of the scheduled job {SLOW}."
    assert app.tasks[f"{SPREAD}.tenant"].__doc__ == (
        f"Run one tenant of an occurrence of the scheduled job {SPREAD}."
    )


def test_installing_finalizes_nothing_and_a_configuration_given_after_reaches_the_tasks(
    make_app: AppFactory,
) -> None:
    app = make_app()

    install(app)
    assert app.finalized is False
    app.conf.update(task_time_limit=600, task_annotations={SLOW: {"rate_limit": "10/s"}})

    @app.task(name="jobtasks.plain", shared=False)
    def plain() -> None:
        return None

    # Celery takes a task's time limit from the configuration from 5.5 on, and before that the
    # pool applies it; a job with no timeout of its own gets what a plain task gets, either way.
    assert app.tasks[FREE].time_limit == app.tasks["jobtasks.plain"].time_limit
    assert app.tasks[FREE].time_limit in (600, None)
    assert app.tasks[QUICK].time_limit == 2.0 + HARD_LIMIT_GRACE_S
    assert app.tasks[SLOW].rate_limit == "10/s"
    assert app.tasks[QUICK].rate_limit is None


def test_annotations_for_every_task_reach_the_jobs_tasks_over_those_naming_one(
    make_app: AppFactory,
) -> None:
    app = make_app(
        task_annotations=[
            {"*": {"rate_limit": "5/m"}},
            {SLOW: {"rate_limit": "1/s", "priority": 3}},
        ]
    )

    install(app)

    assert app.tasks[QUICK].rate_limit == app.tasks[f"{SPREAD}.tenant"].rate_limit == "5/m"
    assert (app.tasks[SLOW].rate_limit, app.tasks[SLOW].priority) == ("5/m", 3)
    assert app.tasks[QUICK].priority is None


def test_jobs_installed_on_a_finalized_app_are_registered_at_once(
    make_app: AppFactory,
) -> None:
    app = make_app()
    app.finalize()

    install(app)

    assert app.tasks[QUICK].soft_time_limit == 2.0
    assert app.tasks[QUICK].app is app


def test_two_apps_each_have_their_own_tasks_bound_to_them(make_app: AppFactory) -> None:
    first, second = make_app(), make_app()

    install(first)
    install(second, jobs=[declared(QUICK, timeout_ms=7_000)])

    assert first.tasks[QUICK].app is first
    assert second.tasks[QUICK].app is second
    assert type(first.tasks[QUICK]) is not type(second.tasks[QUICK])
    assert (first.tasks[QUICK].soft_time_limit, second.tasks[QUICK].soft_time_limit) == (2.0, 7.0)


def test_a_task_s_request_is_its_thread_s_own(make_app: AppFactory) -> None:
    app = make_app()
    install(app)
    quick, slow = app.tasks[QUICK], app.tasks[SLOW]
    seen: list[tuple[str | None, str | None]] = []

    def elsewhere() -> None:
        slow.push_request(id="in-thread")
        try:
            seen.append((quick.request.id, slow.request.id))
        finally:
            slow.pop_request()

    quick.push_request(id="in-main")
    try:
        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join()
        here = (quick.request.id, slow.request.id)
    finally:
        quick.pop_request()

    assert seen == [("in-thread", "in-thread")]  # one class, one stack: the thread's own
    assert here == ("in-main", "in-main")


def test_a_task_the_app_already_has_by_a_job_s_name_keeps_it_with_a_warning(
    make_app: AppFactory,
) -> None:
    app = make_app()

    @app.task(name=FREE, shared=False)
    def own() -> None:
        return None

    install(app)

    with pytest.warns(DuplicateTaskNameWarning, match=FREE):
        app.finalize()
    assert app.tasks[FREE].__class__.__name__ == "own"
    assert isinstance(app.tasks[QUICK], RunTask)


def test_the_app_s_own_task_class_is_the_base_of_the_jobs_tasks() -> None:
    class Audited(Task):
        audited = True

    app = Celery("jobtasks", broker="memory://", set_as_current=False, task_cls=Audited)

    install(app)

    assert app.tasks[QUICK].audited is True
    assert isinstance(app.tasks[QUICK], Audited)


def test_a_registration_that_fails_fails_the_finalize_rather_than_leaving_tasks_out() -> None:
    class Faulty(Task):
        @classmethod
        def on_bound(cls, app: Any) -> None:
            if issubclass(cls, RunTask):
                raise AttributeError("no such setting")

    app = Celery("jobtasks", broker="memory://", set_as_current=False, task_cls=Faulty)
    install(app)

    with pytest.raises(RuntimeError, match="could not be registered: no such setting"):
        app.finalize()
