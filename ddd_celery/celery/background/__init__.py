"""Background jobs on Celery: one task per job, woken by the job id, the store the record.

``install_background_jobs`` wires an app (after ``install_jobs``); ``registry.queue(...)`` is the
``JobQueue`` a use case enqueues on; the relay (``ddd_celery.celery.background.relay``) is the
system job beat runs to publish what is due.
"""

from ddd_celery.celery.background.install import install_background_jobs
from ddd_celery.celery.background.publisher import CeleryJobPublisher
from ddd_celery.celery.background.registry import BackgroundJobs, background_jobs_of
from ddd_celery.celery.background.tasks import AttemptFailedError

__all__ = [
    "AttemptFailedError",
    "BackgroundJobs",
    "CeleryJobPublisher",
    "background_jobs_of",
    "install_background_jobs",
]
