"""Wiring background jobs on a Celery app: a task per job, the relay in beat, the store shared.

``install_background_jobs`` is called where the app is built, after ``install_jobs`` (whose beat
runs the relay under its lock), so ``celery -A app worker`` runs the jobs, ``celery -A app beat``
publishes the due ones and ``celery -A app jobs background`` reads the store. Like
``install_jobs`` it only describes: no store and no broker is asked anything here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from celery.signals import task_unknown

from ddd_celery.background.errors import UnknownBackgroundJobError
from ddd_celery.background.observability import (
    DEFAULT_LOGGER,
    BackgroundRecorder,
    OnBackgroundRun,
)
from ddd_celery.background.rules import DEFAULT_LEASE_MS
from ddd_celery.background.store import JobStore
from ddd_celery.background.store_clock import StoreClock
from ddd_celery.celery.app import _route, refuse_pickle
from ddd_celery.celery.background.lease import Heartbeats
from ddd_celery.celery.background.message import read_job_id
from ddd_celery.celery.background.registry import (
    BACKGROUND_ATTRIBUTE,
    BackgroundJobs,
    WorkerSettings,
)
from ddd_celery.celery.background.relay import (
    DEFAULT_REDISPATCH_AFTER_MS,
    DEFAULT_RELAY_BATCH,
    DEFAULT_RELAY_EVERY_MS,
    Relay,
    relay_job,
)
from ddd_celery.celery.background.tasks import register_background_task
from ddd_celery.celery.registry import ATTRIBUTE, CeleryJobs, Provider, check_providers
from ddd_celery.declarations.background import (
    BackgroundJobDeclaration,
    background_declaration_of,
)
from ddd_celery.kernel.metrics import Metrics
from ddd_celery.scheduling.errors import InvalidJobScheduleError

DEFAULT_HEARTBEAT_MS = 1_000
"""A beat a second: the lease is kept, and a cancel reaches the running job within a second."""


def install_background_jobs(
    app: Any,
    *,
    jobs: Iterable[type | BackgroundJobDeclaration],
    store: JobStore,
    providers: Mapping[type, Provider] | None = None,
    logger: logging.Logger | None = None,
    metrics: Metrics | None = None,
    on_run: OnBackgroundRun | None = None,
    lease_ms: int = DEFAULT_LEASE_MS,
    heartbeat_ms: int = DEFAULT_HEARTBEAT_MS,
    relay_every_ms: int = DEFAULT_RELAY_EVERY_MS,
    relay_batch: int = DEFAULT_RELAY_BATCH,
    redispatch_after_ms: int = DEFAULT_REDISPATCH_AFTER_MS,
) -> BackgroundJobs:
    """Install the background jobs on a Celery app already given ``install_jobs``.

    - ``jobs``: the ``@background`` classes or their declarations (``collect_background_jobs``).
    - ``store``: the ``JobStore`` every process shares (``RedisJobStore``, ``SqlJobStore``): the
      record of each job, which the queue adds to, the workers claim from and the relay
      publishes from.
    - ``providers``: ``{PortType: factory}`` for each port a job's constructor takes, as for
      ``install_jobs``; a job needing a port nobody provides is refused now.
    - ``logger``, ``metrics``, ``on_run``: where each attempt is recorded.
    - ``lease_ms``, ``heartbeat_ms``: how long a claim holds a job without news from its worker
      (the wait before a dead worker's job runs again), and how often the worker extends it and
      so how soon a cancel aborts a running job.
    - ``relay_every_ms``, ``relay_batch``, ``redispatch_after_ms``: the relay's period, its
      batch size, and how long a published job may wait for a claim before it is published
      again (keep it above the longest a healthy backlog waits in the broker). The relay also
      purges the finished jobs past their retention (``ddd_celery_keep_*_ms``,
      ``ddd_celery_purge_batch``, read at its first purge) in the first quarter of each period
      left after publishing, counted in ``background_jobs_purged_total`` on ``metrics``.

    The ids and the execution scope are those ``install_jobs`` was given; its clock is read
    through ``StoreClock``: every instant of a background job (``run_at`` at enqueue, a claim,
    a lease, the relay's ``now``) is judged on the store's clock (``store.store_time()``),
    whatever the skew between the processes that enqueue, run and relay. Registers
    one task per job, named after it, routed to its queue (its context unless declared with
    ``queue=``), added to ``task_queues``; adds the relay (``ddd_celery.relay``) to the jobs
    beat runs; keeps what it wired as ``app.ddd_background`` and returns it. The app's
    ``JobQueue`` is ``registry.queue(unit_of_work=...)`` on what it returns (or on
    ``background_jobs_of(app)``).

    Refuses (before anything runs): an app without ``install_jobs`` or with background jobs
    already installed (``RuntimeError``), a pickle serializer (``ValueError``), a name given
    twice (``InvalidJobScheduleError``), a job whose port no provider gives
    (``DeclarationError``), and a heartbeat longer than half the lease (``ValueError``).
    """
    scheduled = getattr(app, ATTRIBUTE, None)  # not jobs_of: settings may come after install
    if not isinstance(scheduled, CeleryJobs):
        raise RuntimeError(
            f"install_jobs must be called on Celery app {app.main!r} before "
            "install_background_jobs: beat runs the relay of background jobs as one of its jobs, "
            "under its lock (an app without scheduled jobs calls install_jobs(app, jobs=[], "
            "lock=RedisLock(...)))"
        )
    if getattr(app, BACKGROUND_ATTRIBUTE, None) is not None:
        raise RuntimeError(f"background jobs are already installed on Celery app {app.main!r}")
    refuse_pickle(app.conf)
    for name, value in (("lease_ms", lease_ms), ("heartbeat_ms", heartbeat_ms)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive int of milliseconds, not {value!r}")
    if heartbeat_ms * 2 > lease_ms:
        raise ValueError(
            f"heartbeat_ms ({heartbeat_ms}) must be at most half of lease_ms ({lease_ms}): "
            "a single late beat would otherwise lose the lease"
        )
    declared = _declarations(jobs)
    providers = dict(providers or {})
    check_providers(list(declared.values()), providers)
    logger = logger or logging.getLogger(DEFAULT_LOGGER)
    clock = StoreClock(store.store_time, local=scheduled.clock, logger=logger)
    relay = Relay(
        app,
        store,
        clock,
        batch=relay_batch,
        redispatch_after_ms=redispatch_after_ms,
        logger=logger,
        purge_budget_ms=max(1, relay_every_ms // 4),
        metrics=metrics,
    )
    recorder = BackgroundRecorder(logger=logger, metrics=metrics, on_run=on_run)
    heartbeats = Heartbeats(
        store,
        clock,
        lease_ms=lease_ms,
        every_ms=heartbeat_ms,
        on_error=lambda job, job_id, error: recorder.could_not_follow(
            job, job_id, error, what="extend the lease"
        ),
    )
    registry = BackgroundJobs(
        jobs=declared,
        store=store,
        clock=clock,
        ids=scheduled.ids,
        scope=scheduled.scope,
        recorder=recorder,
        logger=logger,
        providers=providers,
        worker=WorkerSettings(lease_ms=lease_ms),
        heartbeats=heartbeats,
        relay=relay,
        app=app,
    )
    scheduled.add_system_job(relay_job(relay, every_ms=relay_every_ms))
    for declaration in declared.values():
        register_background_task(app, declaration)
    _route(app.conf, {name: declaration.queue for name, declaration in declared.items()})
    _record_unknown_tasks(registry)
    setattr(app, BACKGROUND_ATTRIBUTE, registry)
    return registry


def _declarations(
    jobs: Iterable[type | BackgroundJobDeclaration],
) -> dict[str, BackgroundJobDeclaration]:
    declarations: dict[str, BackgroundJobDeclaration] = {}
    for job in jobs:
        declaration = background_declaration_of(job) if isinstance(job, type) else job
        if declaration.name in declarations:
            raise InvalidJobScheduleError(
                "declared twice: a job name is unique in the application", job=declaration.name
            )
        declarations[declaration.name] = declaration
    return declarations


def _record_unknown_tasks(registry: BackgroundJobs) -> None:
    """Record the wake-up of a job this worker has no task for, as a refusal of the job.

    Celery discards such a message with its own error line; this one names the job and its
    id. The job stays in the store, and the relay publishes it again after
    ``redispatch_after_ms``, for a worker that has it.
    """

    def on_unknown(sender: Any = None, message: Any = None, name: str = "", **_: Any) -> None:
        if getattr(sender, "app", None) is not registry.app:
            return
        try:
            _args, kwargs, _embed = message.decode()
            job_id = read_job_id((), kwargs)
        except Exception:  # not a background job's wake-up: Celery's own line says it all
            return
        error = UnknownBackgroundJobError(f"no task of this worker is named {name!r}", job=name)
        registry.recorder.could_not_follow(
            name, job_id, error, what="run the job: this worker has no task of its name"
        )

    task_unknown.connect(
        on_unknown, weak=False, dispatch_uid=f"ddd_celery.background.unknown:{id(registry)}"
    )
