"""Scheduled and background jobs on Celery: wire an app once, run ``celery beat`` and ``worker``.

``install_jobs`` is the one call for scheduled jobs, then ``install_background_jobs`` for
background jobs (whose relay beat runs), or ``install_process_managers`` for background jobs and
process managers together; ``run_now`` runs a scheduled job in this process. The
beat scheduler, ``ddd_celery.celery.beat:JobBeatScheduler``, is chosen by ``install_jobs`` through
``beat_scheduler`` and imported by ``celery beat`` itself, not here.
"""

from ddd_celery.celery.app import install_jobs
from ddd_celery.celery.background import (
    AttemptFailedError,
    BackgroundJobs,
    CeleryJobPublisher,
    background_jobs_of,
    install_background_jobs,
)
from ddd_celery.celery.guards import refuse_pickle
from ddd_celery.celery.message import OccurrenceMessage, UnreadableMessageError
from ddd_celery.celery.processes import (
    ProcessManagers,
    install_process_managers,
    process_managers_of,
)
from ddd_celery.celery.registry import CeleryJob, CeleryJobs, jobs_of
from ddd_celery.celery.run_now import run_now

__all__ = [
    "AttemptFailedError",
    "BackgroundJobs",
    "CeleryJob",
    "CeleryJobPublisher",
    "CeleryJobs",
    "OccurrenceMessage",
    "ProcessManagers",
    "UnreadableMessageError",
    "background_jobs_of",
    "install_background_jobs",
    "install_jobs",
    "install_process_managers",
    "jobs_of",
    "process_managers_of",
    "refuse_pickle",
    "run_now",
]
