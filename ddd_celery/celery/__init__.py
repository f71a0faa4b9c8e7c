"""Scheduled jobs on Celery: wire an app once, then run ``celery beat`` and ``celery worker``.

``install_jobs`` is the one call; ``run_now`` runs a job in this process. The beat scheduler,
``ddd_celery.celery.beat:JobBeatScheduler``, is chosen by ``install_jobs`` through
``beat_scheduler`` and imported by ``celery beat`` itself, not here.
"""

from ddd_celery.celery.app import install_jobs, refuse_pickle
from ddd_celery.celery.message import OccurrenceMessage, UnreadableMessageError
from ddd_celery.celery.registry import CeleryJob, CeleryJobs, jobs_of
from ddd_celery.celery.tasks import run_now

__all__ = [
    "CeleryJob",
    "CeleryJobs",
    "OccurrenceMessage",
    "UnreadableMessageError",
    "install_jobs",
    "jobs_of",
    "refuse_pickle",
    "run_now",
]
