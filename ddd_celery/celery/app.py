"""Wiring a Celery app: one call that turns declared jobs into beat entries and worker tasks.

``install_jobs`` is called where the app is built, so ``celery -A app beat``, ``celery -A app
worker`` and ``celery -A app jobs`` all find the same jobs. It only describes: no port is asked
anything here (a Redis client connects on first use), so importing the app never needs Redis.

What ``app.conf`` decides (the ``ddd_celery_*`` settings of ``config.py``, the broker's URL) is
read at first use, through ``jobs_of``: a project may call ``config_from_object`` before
``install_jobs`` or after it. What ``install_jobs`` writes into ``app.conf`` (the beat scheduler,
the jobs' routes and queues) is written again each time Celery reloads its configuration, so a
later ``config_from_object`` does not drop it.

What refuses an app that cannot run its jobs safely (pickle, unusable settings, another
library's scheduler), here and as each process starts, is in ``guards.py``.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from celery.signals import beat_init, task_failure, task_revoked, worker_init

from ddd_celery.celery.beat_entries import translate_beat_schedule
from ddd_celery.celery.config import missing_lock, redis_stores
from ddd_celery.celery.guards import (
    BEAT_INIT_UID,
    PICKLE_UID,
    check_configuration,
    choose_scheduler,
    refuse_another_scheduler,
    refuse_pickle,
    refuse_pickle_at_start,
    warn_of_another_scheduler,
)
from ddd_celery.celery.pauses import shared_pauses
from ddd_celery.celery.registry import (
    ATTRIBUTE,
    CeleryJob,
    CeleryJobs,
    Provider,
    check_providers,
)
from ddd_celery.celery.spread import tenant_task_name
from ddd_celery.celery.tasks import RunTask, on_task_revoked, register_run_tasks
from ddd_celery.celery.tenant_tasks import TenantTask, on_tenant_task_failure
from ddd_celery.declarations.options import TenantRuns
from ddd_celery.declarations.schedule import ParsedJobSchedule
from ddd_celery.declarations.scheduled import ScheduledJobDeclaration, declaration_of
from ddd_celery.kernel.clock import Clock, SystemClock
from ddd_celery.kernel.ids import IdGenerator, UuidGenerator
from ddd_celery.kernel.lock import Lease, Lock
from ddd_celery.kernel.metrics import Metrics
from ddd_celery.kernel.reporting import ErrorReporter
from ddd_celery.kernel.scope import ContextVarExecutionScope, ExecutionScope
from ddd_celery.kernel.tenants import TenantDirectory
from ddd_celery.scheduling.checkpoints import JobCheckpoints
from ddd_celery.scheduling.errors import (
    InvalidJobScheduleError,
    InvalidJobSettingsError,
    UnknownJobError,
)
from ddd_celery.scheduling.execution import require_tenants
from ddd_celery.scheduling.last_runs import JobLastRuns
from ddd_celery.scheduling.observability import (
    OnRun,
    RunDetail,
    RunRecorder,
    report_failed_runs,
)
from ddd_celery.scheduling.occurrence import SchedulerRules
from ddd_celery.scheduling.outcomes import JobRun, context_of
from ddd_celery.scheduling.pauses import JobPauses
from ddd_celery.scheduling.run_state import InMemoryJobRunState, JobRunState
from ddd_celery.scheduling.settings import (
    SettingsMapping,
    apply_job_settings,
    job_settings_from_env,
    run_jobs_from_env,
)

__all__ = ["check_configuration", "install_jobs", "observe_with", "refuse_pickle"]
"""``check_configuration`` and ``refuse_pickle`` are ``guards.py``'s, also reached from here."""


def install_jobs(
    app: Any,
    *,
    jobs: Iterable[type | ScheduledJobDeclaration],
    lock: Lock | None = None,
    providers: Mapping[type, Provider] | None = None,
    checkpoints: JobCheckpoints | None = None,
    run_state: JobRunState | None = None,
    last_runs: JobLastRuns | None = None,
    pauses: JobPauses | None = None,
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
    errors: ErrorReporter | None = None,
    late_after_ms: int | None = None,
    lock_ttl_ms: int | None = None,
    routes: Mapping[str, str] | None = None,
    include_beat_schedule: bool = True,
    keep_beat_scheduler: bool = False,
) -> CeleryJobs:
    """Install the scheduled jobs on a Celery app, for its beat, its workers and its CLI.

    - ``jobs``: the declared classes (``@scheduled``) or their declarations, as
      ``collect_scheduled_jobs`` returns them; a name is unique in the application.
    - ``providers``: ``{PortType: factory}`` for each port a job's constructor takes; a job
      needing a port nobody provides is refused now, not at its first run.
    - ``lock``, ``run_state``, ``checkpoints``, ``last_runs``: the stores beat and workers
      share. Each one not given comes from ``app.conf`` at first use: on Redis at
      ``ddd_celery_redis_url`` (by default the broker's URL when it is Redis), keyed under
      ``ddd_celery_key_prefix``. Without a Redis URL, the run state lives in one process's
      memory, there are no checkpoints nor last runs, and a lock must be given.
    - ``pauses``: where ``celery jobs pause`` keeps the jobs an operator paused; by default
      beside the lock (its Redis, or its database for a ``SqlLock``), else in process memory.
    - ``settings``: ``{job name: settings}`` that switch off, reschedule or tune a job;
      ``environ`` (``os.environ``) adds ``JOB_<CONTEXT>_<JOB>_ENABLED`` over them and says
      through ``RUN_JOBS`` whether beat starts jobs in this process, unless ``start`` says it.
    - ``errors``: the ``ErrorReporter`` every run that failed unexpectedly is sent to
      (``report_failed_runs``); ``on_run`` observes every occurrence besides.
    - ``late_after_ms``, ``lock_ttl_ms``: win over ``ddd_celery_late_after_ms`` and
      ``ddd_celery_lock_ttl_ms``.
    - ``routes``: ``{job name: queue}``; a job's queue is otherwise its context.
    - ``include_beat_schedule``: the entries of ``app.conf.beat_schedule`` become jobs of the
      ``beat`` context, run by their own tasks under the per-occurrence lock.
    - ``keep_beat_scheduler``: leave ``beat_scheduler`` alone (another scheduler, such as
      django-celery-beat's, runs the app's beat; the jobs run in a beat started with ``-S ddd``).

    Refuses a pickle serializer (``JobsConfigError``, a ``ValueError``), a ``beat_scheduler`` of
    another library (``ValueError``, unless ``keep_beat_scheduler``), a name given twice or a
    per-tenant job without ``tenants`` (``InvalidJobScheduleError``, as
    ``JobScheduler.register``), settings or routes for a job nobody declares
    (``UnknownJobError``), settings that cannot be read (``InvalidJobSettingsError``; a
    ``JOB_<CONTEXT>_<JOB>_ENABLED`` or ``RUN_JOBS`` value that cannot be read is refused instead
    by ``check_configuration``, in one line, by every process that uses the jobs), and a
    second call on the same app (``RuntimeError``). A worker or beat stops as it starts on
    ``ddd_celery_*`` settings that are unknown or cannot be read and on a pickle serializer
    configured since (``check_configuration``); ``jobs_of`` refuses those too and an app with
    neither a lock nor a Redis URL (``JobsConfigError``). Sets ``beat_scheduler`` and adds each
    job's queue to ``task_queues``, so plain ``celery -A app beat`` and ``celery -A app worker``
    run the jobs. Connects to nothing.
    """
    if getattr(app, ATTRIBUTE, None) is not None:
        raise RuntimeError(f"jobs are already installed on Celery app {app.main!r}")
    refuse_pickle(app.conf)
    if not keep_beat_scheduler:
        refuse_another_scheduler(app.conf)
    environ = os.environ if environ is None else environ
    clock = clock or SystemClock()
    declared = _declarations(jobs)
    entries = _beat_entries(app.conf) if include_beat_schedule else []
    described = _described(declared, entries, routes or {})
    environ_refused: str | None = None
    try:
        switches = job_settings_from_env(environ, [job.name for job in described])
        run_jobs = run_jobs_from_env(environ) if start is None else start
    except InvalidJobSettingsError as unreadable:
        # The environment is the operator's, read where the app is imported: refused by the
        # first process that uses the jobs, in one line (``check_configuration``), rather than
        # as Celery's "Unable to load celery application" and its traceback.
        environ_refused, switches, run_jobs = str(unreadable), {}, False
    schedules = apply_job_settings(
        {job.name: job.schedule for job in described}, settings or {}, switches
    )
    all_jobs = [_effective(job, schedules[job.name]) for job in described]
    for job in all_jobs:
        require_tenants(job.name, job.schedule.options, tenants)
    providers = dict(providers or {})
    check_providers(all_jobs, providers)
    observer = observe_with(on_run, None if errors is None else report_failed_runs(errors))

    def recorder(kept: JobLastRuns | None) -> RunRecorder:
        return RunRecorder(logger=logger, metrics=metrics, on_run=observer, last_runs=kept)

    registry = CeleryJobs(
        jobs={job.name: job for job in all_jobs},
        clock=clock,
        lock=lock or _UnsettledLock(),
        checkpoints=checkpoints,
        run_state=run_state or InMemoryJobRunState(clock),
        last_runs=last_runs,
        ids=ids or UuidGenerator(),
        scope=scope or ContextVarExecutionScope(),
        recorder=recorder(last_runs),
        rules=_explicit_rules(late_after_ms, lock_ttl_ms),
        tenants=tenants,
        start=run_jobs,
        providers=providers,
        environ_refused=environ_refused,
    )
    registry.settle = _settler(
        app,
        _Given(
            lock=lock,
            run_state=run_state,
            checkpoints=checkpoints,
            last_runs=last_runs,
            pauses=pauses,
            late_after_ms=late_after_ms,
            lock_ttl_ms=lock_ttl_ms,
        ),
        recorder,
    )
    register_run_tasks(app, lambda: _run_tasks(registry))
    task_revoked.connect(on_task_revoked, weak=False, dispatch_uid=on_task_revoked.__qualname__)
    task_failure.connect(
        on_tenant_task_failure, weak=False, dispatch_uid=on_tenant_task_failure.__qualname__
    )
    beat_init.connect(warn_of_another_scheduler, weak=False, dispatch_uid=BEAT_INIT_UID)
    for starting in (worker_init, beat_init):
        starting.connect(refuse_pickle_at_start, weak=False, dispatch_uid=PICKLE_UID)
    routes_of_jobs = _routes(all_jobs)

    def write_conf(conf: Any) -> None:
        _write_routes(conf, routes_of_jobs)
        if not keep_beat_scheduler:
            choose_scheduler(conf)

    write_conf(app.conf)
    app.on_after_configure.connect(
        lambda sender, source, **_: write_conf(source), weak=False, dispatch_uid=id(registry)
    )
    setattr(app, ATTRIBUTE, registry)
    return registry


def _run_tasks(registry: CeleryJobs) -> Iterator[tuple[type[RunTask], str, CeleryJob]]:
    """The task of each declared job, and of its tenant runs when they are spread."""
    for job in registry.jobs.values():
        if job.declared:
            yield RunTask, job.task_name, job
            if job.schedule.options.tenant_runs is TenantRuns.SPREAD:
                yield TenantTask, tenant_task_name(job), job


@dataclass(frozen=True, slots=True, kw_only=True)
class _Given:
    """What the caller of ``install_jobs`` gave explicitly: it wins over ``app.conf``."""

    lock: Lock | None
    run_state: JobRunState | None
    checkpoints: JobCheckpoints | None
    last_runs: JobLastRuns | None
    pauses: JobPauses | None
    late_after_ms: int | None
    lock_ttl_ms: int | None

    @property
    def every_store(self) -> bool:
        return None not in (self.lock, self.run_state, self.checkpoints, self.last_runs)


def _settler(
    app: Any, given: _Given, recorder: Callable[[JobLastRuns | None], RunRecorder]
) -> Callable[[CeleryJobs], None]:
    """Read ``app.conf`` into the registry once, at first use, from whichever thread asks first.

    An error (``JobsConfigError``, a pickle serializer configured after ``install_jobs``) leaves
    the registry unsettled, so every later use raises it again.
    """
    mutex = threading.Lock()

    def settle(registry: CeleryJobs) -> None:
        with mutex:
            if registry.settle is None:
                return
            conf = app.conf
            config = check_configuration(app)
            stores = None if given.every_store else redis_stores(config, registry.clock)
            if given.lock is not None:
                registry.lock = given.lock
            elif stores is not None:
                registry.lock = stores.lock
            else:
                raise missing_lock(conf)
            if given.run_state is None and stores is not None:
                registry.run_state = stores.run_state
            if given.checkpoints is None and stores is not None:
                registry.checkpoints = stores.checkpoints
            if given.last_runs is None and stores is not None:
                registry.last_runs = stores.last_runs
                registry.recorder = recorder(stores.last_runs)
            pauses = given.pauses
            registry.pauses = shared_pauses(registry.lock) if pauses is None else pauses
            registry.rules = SchedulerRules(
                late_after_ms=_first(given.late_after_ms, config.late_after_ms),
                lock_ttl_ms=_first(given.lock_ttl_ms, config.lock_ttl_ms),
            )
            registry.grace_ms = config.grace_ms
            registry.settle = None

    return settle


def _first(given: int | None, configured: int) -> int:
    return configured if given is None else given


class _UnsettledLock(Lock):
    """Stands for the lock until ``jobs_of`` has read it from ``app.conf``."""

    def acquire(self, key: str, ttl_ms: int) -> Lease | None:
        raise RuntimeError("the lock is read from app.conf at first use: reach it via jobs_of(app)")

    def release(self, lease: Lease) -> bool:
        raise RuntimeError("the lock is read from app.conf at first use: reach it via jobs_of(app)")


def _explicit_rules(late_after_ms: int | None, lock_ttl_ms: int | None) -> SchedulerRules:
    """The rules until ``app.conf`` is read; a value given that cannot be used is refused now."""
    given = {"late_after_ms": late_after_ms, "lock_ttl_ms": lock_ttl_ms}
    return SchedulerRules(**{name: value for name, value in given.items() if value is not None})


def observe_with(*observers: OnRun | None) -> OnRun | None:
    """One ``on_run`` that calls each observer given (None skipped), in order; None if none."""
    present = [observer for observer in observers if observer is not None]
    if len(present) <= 1:
        return present[0] if present else None

    def observe(run: JobRun, error: BaseException | None, detail: RunDetail) -> None:
        for observer in present:
            observer(run, error, detail)

    return observe


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
            queue=sys.intern(context_of(declaration.name)),  # one string per context
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


def _effective(job: CeleryJob, schedule: ParsedJobSchedule) -> CeleryJob:
    """The job on the schedule its settings give, keeping the declared one when they differ."""
    if schedule == job.schedule:
        return job
    return replace(job, schedule=schedule, declared_schedule=job.schedule)


def _routed(job: CeleryJob, queue: str | None) -> CeleryJob:
    """The job on ``queue``; an entry of ``beat_schedule`` is sent with it in its options."""
    if queue is None:
        return job
    options = job.options if job.declared else {**job.options, "queue": queue}
    return replace(job, queue=queue, options=options)


def _routes(jobs: Iterable[CeleryJob]) -> dict[str, Mapping[str, str]]:
    """``{task: {"queue": queue}}`` of each declared job."""
    return _shared_routes(
        (job.task_name, job.queue) for job in jobs if job.declared and job.queue is not None
    )


def _shared_routes(queues: Iterable[tuple[str, str]]) -> dict[str, Mapping[str, str]]:
    """``{task: {"queue": queue}}``, one route per queue shared by its tasks (one each would
    be 10 MB at 100,000 jobs)."""
    shared: dict[str, Mapping[str, str]] = {}
    routes: dict[str, Mapping[str, str]] = {}
    for task, queue in queues:
        route = shared.get(queue)
        if route is None:
            route = shared[queue] = {"queue": queue}
        routes[task] = route
    return routes


def _route(conf: Any, queues: Mapping[str, str]) -> None:
    """Route each task of ``queues`` (``{task: queue}``) to its queue (``_write_routes``)."""
    _write_routes(conf, _shared_routes(queues.items()))


def _write_routes(conf: Any, ours: dict[str, Mapping[str, str]]) -> None:
    """Route each job's task to its queue, ahead of the app's own routes, and declare the queue.

    Beat sends to the job's queue by name; the route makes ``apply_async`` and ``celery call``
    agree with it. Written again after a reload of the configuration, so it adds nothing twice.
    """
    if not ours:
        return
    current = conf.task_routes
    if current is None:
        conf.task_routes = (ours,)
    elif isinstance(current, list | tuple):
        if ours not in current:
            conf.task_routes = (ours, *current)
    elif current != ours:
        conf.task_routes = (ours, current)
    _add_queues(conf, [route["queue"] for route in ours.values()])


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
