"""ddd_celery: scheduled jobs, background jobs and process managers of a DDD kit, on Celery.

This top level imports no Celery, Redis or SQL: declaring a job or asking when it runs next
needs none of them.

``background`` names two things, as the docs use them: ``from ddd_celery import background`` is
the decorator, and ``from ddd_celery.background import JobStore`` reaches the package of
background jobs. A module attribute has one value, so ``ddd_celery.background`` (and
``import ddd_celery.background as name``) is the decorator; import the package's names with
``from``. The package is loaded first below: Python binds a package on its parent when it is
first loaded, which would replace the decorator if that happened later.
"""

import logging

from ddd_celery import background as _package_loaded_first  # the decorator is bound after it
from ddd_celery.declarations import (
    BackgroundJobExecution,
    DeclarationError,
    JobExecution,
    ParsedJobSchedule,
    background,
    collect_background_jobs,
    collect_scheduled_jobs,
    describe_job_schedule,
    parse_job_schedule,
    scheduled,
)
from ddd_celery.declarations.cron_evaluator import latest_occurrence, next_occurrence
from ddd_celery.declarations.process import process_manager, step
from ddd_celery.kernel.process_runner import ProcessDecision, TimeoutFired

del _package_loaded_first

# A library writes nothing unless the application configures logging.
logging.getLogger("ddd_celery").addHandler(logging.NullHandler())

__all__ = [
    "BackgroundJobExecution",
    "DeclarationError",
    "JobExecution",
    "ParsedJobSchedule",
    "ProcessDecision",
    "TimeoutFired",
    "background",
    "collect_background_jobs",
    "collect_scheduled_jobs",
    "describe_job_schedule",
    "latest_occurrence",
    "next_occurrence",
    "parse_job_schedule",
    "process_manager",
    "scheduled",
    "step",
]
