"""What stops an app from running its jobs wrongly: pickle, unusable settings, another scheduler.

``install_jobs`` (``app.py``) calls these where the app is wired, and connects the checks made
as a worker or beat starts (``worker_init``, ``beat_init``): the configuration may change after
the wiring (``config_from_object``), and a beat started with another scheduler would run none
of the jobs without a word from Celery.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.utils.imports import symbol_by_name

from ddd_celery.celery.config import (
    JobsConfig,
    JobsConfigError,
    app_config,
    refuse_untagged_cluster_prefix,
)
from ddd_celery.celery.registry import ATTRIBUTE, CeleryJobs

logger = logging.getLogger("ddd_celery.celery.app")
"""The wiring's logger: these checks are ``install_jobs``'s, made as it wires or as a process
starts."""

BEAT_SCHEDULER = "ddd_celery.celery.beat:JobBeatScheduler"
"""What ``beat_scheduler`` is set to, so a plain ``celery -A app beat`` schedules the jobs."""
CELERY_DEFAULT_SCHEDULER = "celery.beat:PersistentScheduler"
_OURS = frozenset({BEAT_SCHEDULER, "ddd"})

_PICKLE = frozenset({"pickle", "application/x-python-serialize"})

BEAT_INIT_UID = "ddd_celery.celery.guards.warn_of_another_scheduler"
"""The ``dispatch_uid`` of ``warn_of_another_scheduler`` on ``beat_init``: connected once."""
PICKLE_UID = "ddd_celery.celery.guards.refuse_pickle_at_start"
"""The ``dispatch_uid`` of ``refuse_pickle_at_start`` on ``worker_init`` and ``beat_init``."""


def refuse_pickle(conf: Any) -> None:
    """JSON only on the wire: a message a worker unpickles can run any code its sender wrote.

    Raises ``JobsConfigError`` (a ``ValueError``) naming the Celery setting that allows it.
    """
    for key in ("task_serializer", "result_serializer", "accept_content", "result_accept_content"):
        value = conf.get(key)
        if value is None:
            continue
        used = {value} if isinstance(value, str) else set(value)
        if used & _PICKLE:
            raise JobsConfigError(
                f"Celery setting {key}={value!r} allows pickle; ddd_celery sends JSON only "
                "(a pickled message runs whatever code its sender chose): use 'json'"
            )


def check_configuration(app: Any) -> JobsConfig:
    """The app's ``ddd_celery_*`` settings, once its whole configuration is known to be usable.

    Raises ``JobsConfigError`` for a serializer that allows pickle, for a ``ddd_celery_*``
    setting that is unknown or cannot be read, and for a ``JOB_<CONTEXT>_<JOB>_ENABLED`` or
    ``RUN_JOBS`` variable that cannot be read, each named. Every process of an app with jobs
    calls it as it starts (worker, beat, each ``celery jobs`` command): the configuration may
    have changed since ``install_jobs`` (``config_from_object`` after it), and a worker running
    only background jobs would otherwise never read the settings at all.
    """
    refuse_pickle(app.conf)
    installed = getattr(app, ATTRIBUTE, None)
    if isinstance(installed, CeleryJobs) and installed.environ_refused is not None:
        raise JobsConfigError(installed.environ_refused)
    config = app_config(app)
    refuse_untagged_cluster_prefix(config)
    return config


def refuse_pickle_at_start(sender: Any = None, **_: Any) -> None:
    """Stop a worker or beat of an app with jobs whose configuration cannot be used.

    ``install_jobs`` refuses pickle, but a ``config_from_object`` afterwards can turn it on, and
    a worker unpickles a message before any task (hence ``jobs_of``) runs; a ``ddd_celery_*``
    typo or wrong type would run every background job on defaults, unsaid. So the configuration
    is checked as the process starts (``worker_init``, ``beat_init``: ``check_configuration``).
    A receiver's ``Exception`` is only logged by Celery, hence ``SystemExit``, whose message
    Celery prints.
    """
    app: Any = getattr(sender, "app", None)
    if not isinstance(getattr(app, ATTRIBUTE, None), CeleryJobs):
        return
    try:
        check_configuration(app)
    except JobsConfigError as refused:
        logger.critical("ddd_celery refuses to start: %s", refused)
        raise SystemExit(f"ddd_celery refuses to start: {refused}") from None


def warn_of_another_scheduler(sender: Any = None, **_: Any) -> None:
    """At beat's start (``beat_init``): say so when the jobs of the app will not run in it.

    ``celery beat -S celery.beat:PersistentScheduler`` (or any scheduler but ddd_celery's)
    starts and sends none of the jobs ``install_jobs`` installed, without a word from Celery.
    """
    from ddd_celery.celery.beat import JobBeatScheduler  # noqa: PLC0415 - beat imports celery.beat

    app = getattr(sender, "app", None)
    registry = getattr(app, ATTRIBUTE, None)
    scheduler = getattr(sender, "scheduler", None)
    if not isinstance(registry, CeleryJobs) or isinstance(scheduler, JobBeatScheduler):
        return
    if _kept(app, scheduler):
        logger.info(
            "beat: this beat runs the app's own scheduler %s (keep_beat_scheduler); the %d "
            "jobs run in a beat started with -S ddd",
            type(scheduler).__name__,
            len(registry.jobs),
        )
        return
    logger.error(
        "beat: this beat runs the scheduler %s, so none of the %d jobs installed on app %r "
        "will run in it: start it with `celery -A <app> beat -S ddd`, or without -S "
        "(install_jobs makes ddd_celery's scheduler the default)",
        type(scheduler).__name__,
        len(registry.jobs),
        getattr(app, "main", None),
    )


def _kept(app: Any, scheduler: object) -> bool:
    """Whether ``scheduler`` is another library's one the app's configuration chose.

    ``install_jobs`` refuses such a setting unless told to keep it, so it is deliberate.
    """
    configured = _scheduler_path(app.conf.beat_scheduler)
    if configured in _OURS or configured == CELERY_DEFAULT_SCHEDULER:
        return False
    try:
        return symbol_by_name(configured) is type(scheduler)
    except (ImportError, AttributeError, ValueError):
        return False


def refuse_another_scheduler(conf: Any) -> None:
    """Refuse to replace a scheduler the app chose (django-celery-beat's, redbeat's) silently."""
    current = _scheduler_path(conf.beat_scheduler)
    if current in _OURS or current == CELERY_DEFAULT_SCHEDULER:
        return
    raise ValueError(
        f"app.conf.beat_scheduler is {current!r}: install_jobs would replace it, and what it "
        "schedules would stop. Remove that setting (ddd_celery's scheduler also sends the "
        "app's beat_schedule entries), or keep it with install_jobs(..., "
        "keep_beat_scheduler=True) and run the jobs in a beat of their own: "
        "`celery -A <app> beat -S ddd`"
    )


def choose_scheduler(conf: Any) -> None:
    """Make ddd_celery's scheduler beat's default, unless the configuration chose another."""
    current = _scheduler_path(conf.beat_scheduler)
    if current in _OURS:
        return
    if current == CELERY_DEFAULT_SCHEDULER:
        conf.beat_scheduler = BEAT_SCHEDULER
        return
    logger.warning(
        "app.conf.beat_scheduler is %r since the configuration was loaded again, so a plain "
        "`celery beat` runs none of the jobs: remove it, or start the jobs' beat with -S ddd",
        current,
    )


def _scheduler_path(scheduler: object) -> str:
    if isinstance(scheduler, type):
        return f"{scheduler.__module__}:{scheduler.__qualname__}"
    return str(scheduler)
