"""Wiring a Celery app: one call that turns declared jobs into beat entries and worker tasks.

``install_jobs`` is called where the app is built, so ``celery -A app beat``, ``celery -A app
worker`` and ``celery -A app jobs`` all find the same jobs. It only describes: no port is asked
anything here (a Redis client connects on first use), so importing the app never needs Redis.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from celery.signals import task_revoked

from ddd_celery.celery.beat_entries import translate_beat_schedule
from ddd_celery.celery.registry import (
    ATTRIBUTE,
    CeleryJob,
    CeleryJobs,
    Provider,
    check_providers,
)
from ddd_celery.celery.tasks import on_task_revoked, register_job_task
from ddd_celery.declarations.scheduled import ScheduledJobDeclaration, declaration_of
from ddd_celery.kernel.clock import Clock, SystemClock
from ddd_celery.kernel.ids import IdGenerator, UuidGenerator
from ddd_celery.kernel.lock import Lock
from ddd_celery.kernel.metrics import Metrics
from ddd_celery.kernel.scope import ContextVarExecutionScope, ExecutionScope
from ddd_celery.kernel.tenants import TenantDirectory
from ddd_celery.scheduling.checkpoints import JobCheckpoints
from ddd_celery.scheduling.errors import InvalidJobScheduleError, UnknownJobError
from ddd_celery.scheduling.execution import require_tenants
from ddd_celery.scheduling.last_runs import JobLastRuns
from ddd_celery.scheduling.observability import OnRun, RunRecorder
from ddd_celery.scheduling.occurrence import (
    DEFAULT_LATE_AFTER_MS,
    DEFAULT_LOCK_TTL_MS,
    SchedulerRules,
)
from ddd_celery.scheduling.outcomes import context_of
from ddd_celery.scheduling.run_state import InMemoryJobRunState, JobRunState
from ddd_celery.scheduling.settings import (
    SettingsMapping,
    apply_job_settings,
    job_settings_from_env,
    run_jobs_from_env,
)

BEAT_SCHEDULER = "ddd_celery.celery.beat:JobBeatScheduler"
"""What ``beat_scheduler`` is set to, so a plain ``celery -A app beat`` schedules the jobs."""

_PICKLE = frozenset({"pickle", "application/x-python-serialize"})


def install_jobs(
    app: Any,
    *,
    jobs: Iterable[type | ScheduledJobDeclaration],
    lock: Lock,
    providers: Mapping[type, Provider] | None = None,
    checkpoints: JobCheckpoints | None = None,
    run_state: JobRunState | None = None,
    last_runs: JobLastRuns | None = None,
    settings: SettingsMapping | None = None,
    environ: Mapping[str, str] | None = None,
    start: bool | None = None,
    clock: Clock | None = None,
    ids: IdGenerator | None = None,
    scope: ExecutionScope | None = None,
    tenants: TenantDirectory | None = None,
    logger: logging.Logger | None = None,
    metrics: Metrics | None = None,
    on_run: OnRun | None = None,
    late_after_ms: int = DEFAULT_LATE_AFTER_MS,
    lock_ttl_ms: int = DEFAULT_LOCK_TTL_MS,
    routes: Mapping[str, str] | None = None,
    include_beat_schedule: bool = True,
) -> CeleryJobs:
    """Install the scheduled jobs on a Celery app, for its beat, its workers and its CLI.

    - ``jobs``: the declared classes (``@scheduled``) or their declarations, as
      ``collect_scheduled_jobs`` returns them; a name is unique in the application.
    - ``providers``: ``{PortType: factory}`` for each port a job's constructor takes; a job
      needing a port nobody provides is refused now, not at its first run.
    - ``lock``, ``checkpoints``, ``run_state``: the stores beat and workers share. The default
      run state lives in one process's memory: beats and workers in several processes need
      ``RedisJobRunState`` for ``overlap`` to hold between them, ``RedisLock`` for an
      occurrence to run once, ``RedisJobCheckpoints`` for ``missed`` to cross a restart.
    - ``last_runs``: where beat and the workers keep each job's latest outcome, so that
      ``celery jobs list`` in another process shows it (``RedisJobLastRuns``); none by default.
    - ``settings``: ``{job name: settings}`` that switch off, reschedule or tune a job;
      ``environ`` (``os.environ``) adds ``JOB_<CONTEXT>_<JOB>_ENABLED`` over them and says
      through ``RUN_JOBS`` whether beat starts jobs in this process, unless ``start`` says it.
    - ``routes``: ``{job name: queue}``; a job's queue is otherwise its context.
    - ``include_beat_schedule``: the entries of ``app.conf.beat_schedule`` become jobs of the
      ``beat`` context, run by their own tasks under the per-occurrence lock.

    Refuses a pickle serializer (``ValueError``), a name given twice or a per-tenant job
    without ``tenants`` (``InvalidJobScheduleError``, as ``JobScheduler.register``), settings or
    routes for a job nobody declares (``UnknownJobError``), settings that cannot be read
    (``InvalidJobSettingsError``), and a second call on the same app (``RuntimeError``). Sets
    ``beat_scheduler`` and adds each job's queue to ``task_queues``, so plain ``celery -A app
    beat`` and ``celery -A app worker`` run the jobs. Connects to nothing.
    """
    if getattr(app, ATTRIBUTE, None) is not None:
        raise RuntimeError(f"jobs are already installed on Celery app {app.main!r}")
    refuse_pickle(app.conf)
    environ = os.environ if environ is None else environ
    clock = clock or SystemClock()
    rules = SchedulerRules(late_after_ms=late_after_ms, lock_ttl_ms=lock_ttl_ms)
    declared = _declarations(jobs)
    entries = _beat_entries(app.conf) if include_beat_schedule else []
    described = _described(declared, entries, routes or {})
    schedules = apply_job_settings(
        {job.name: job.schedule for job in described},
        settings or {},
        job_settings_from_env(environ, [job.name for job in described]),
    )
    all_jobs = [replace(job, schedule=schedules[job.name]) for job in described]
    for job in all_jobs:
        require_tenants(job.name, job.schedule.options, tenants)
    providers = dict(providers or {})
    check_providers(all_jobs, providers)
    registry = CeleryJobs(
        jobs={job.name: job for job in all_jobs},
        clock=clock,
        lock=lock,
        checkpoints=checkpoints,
        run_state=run_state or InMemoryJobRunState(clock),
        last_runs=last_runs,
        ids=ids or UuidGenerator(),
        scope=scope or ContextVarExecutionScope(),
        recorder=RunRecorder(logger=logger, metrics=metrics, on_run=on_run, last_runs=last_runs),
        rules=rules,
        tenants=tenants,
        start=run_jobs_from_env(environ) if start is None else start,
        providers=providers,
    )
    for job in all_jobs:
        if job.declared:
            register_job_task(app, job)
    task_revoked.connect(on_task_revoked, weak=False, dispatch_uid=on_task_revoked.__qualname__)
    _route(app.conf, {job.task_name: job.queue for job in all_jobs if job.declared and job.queue})
    app.conf.beat_scheduler = BEAT_SCHEDULER
    setattr(app, ATTRIBUTE, registry)
    return registry


def refuse_pickle(conf: Any) -> None:
    """JSON only on the wire: a message a worker unpickles can run any code its sender wrote."""
    for key in ("task_serializer", "result_serializer", "accept_content", "result_accept_content"):
        value = conf.get(key)
        if value is None:
            continue
        used = {value} if isinstance(value, str) else set(value)
        if used & _PICKLE:
            raise ValueError(
                f"Celery setting {key}={value!r} allows pickle; ddd_celery sends JSON only "
                "(a pickled message runs whatever code its sender chose): use 'json'"
            )


def _beat_entries(conf: Any) -> list[CeleryJob]:
    """The app's ``beat_schedule`` entries as jobs of the ``beat`` context, in its timezone."""
    return translate_beat_schedule(conf.beat_schedule or {}, timezone=str(conf.timezone or "UTC"))


def _declarations(jobs: Iterable[type | ScheduledJobDeclaration]) -> list[ScheduledJobDeclaration]:
    declarations: dict[str, ScheduledJobDeclaration] = {}
    for job in jobs:
        declaration = declaration_of(job) if isinstance(job, type) else job
        if declaration.name in declarations:
            raise InvalidJobScheduleError(
                "declared twice: a job name is unique in the application", job=declaration.name
            )
        declarations[declaration.name] = declaration
    return list(declarations.values())


def _described(
    declared: list[ScheduledJobDeclaration], entries: list[CeleryJob], routes: Mapping[str, str]
) -> list[CeleryJob]:
    """Every job as beat sees it, each on its route (a declared job's default: its context)."""
    jobs = [
        CeleryJob(
            name=declaration.name,
            schedule=declaration.schedule,
            task_name=declaration.name,
            queue=context_of(declaration.name),
            job_class=declaration.job_class,
        )
        for declaration in declared
    ]
    names = {job.name for job in jobs}
    for entry in entries:
        if entry.name in names:
            raise InvalidJobScheduleError(
                "a beat_schedule entry has the name of a declared job", job=entry.name
            )
        names.add(entry.name)
    unknown = sorted(set(routes) - names)
    if unknown:
        raise UnknownJobError(
            f"routes name {', '.join(map(repr, unknown))}, which no job declares", job=unknown[0]
        )
    return [_routed(job, routes.get(job.name)) for job in [*jobs, *entries]]


def _routed(job: CeleryJob, queue: str | None) -> CeleryJob:
    """The job on ``queue``; an entry of ``beat_schedule`` is sent with it in its options."""
    if queue is None:
        return job
    options = job.options if job.declared else {**job.options, "queue": queue}
    return replace(job, queue=queue, options=options)


def _route(conf: Any, queues: Mapping[str, str]) -> None:
    """Route each job's task to its queue, ahead of the app's own routes, and declare the queue.

    Beat sends to the job's queue by name; the route makes ``apply_async`` and ``celery call``
    agree with it.
    """
    if not queues:
        return
    ours = {task: {"queue": queue} for task, queue in queues.items()}
    current = conf.task_routes
    if current is None:
        conf.task_routes = (ours,)
    elif isinstance(current, list | tuple):
        conf.task_routes = (ours, *current)
    else:
        conf.task_routes = (ours, current)
    _add_queues(conf, list(queues.values()))


def _add_queues(conf: Any, queues: list[str]) -> None:
    """Add the jobs' queues to ``task_queues``, so a worker started without ``-Q`` runs them.

    Each is declared as Celery declares a missing queue (an exchange and a routing key of its
    name); the queues already configured stay as they are.
    """
    current = conf.task_queues
    if current is None:
        declared: dict[str, Any] = {conf.task_default_queue: {}}
    elif isinstance(current, Mapping):
        declared = dict(current)
    else:
        declared = {queue.name: queue for queue in current}
    missing = [name for name in dict.fromkeys(queues) if name not in declared]
    if missing:
        conf.task_queues = declared | {
            name: {"exchange": name, "routing_key": name} for name in missing
        }
