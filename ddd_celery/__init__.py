"""ddd_celery: scheduled jobs, background jobs and process managers of a DDD kit, on Celery.

This top level imports no Celery, Redis or SQL: declaring a job or asking when it runs next
needs none of them.
"""

import importlib
import logging

# The package ``ddd_celery.background`` and the decorator ``background`` share a name: loading
# the package binds it on this module, so it is loaded first and the decorator bound after it.
# ``from ddd_celery.background import ...`` reaches the package either way.
importlib.import_module("ddd_celery.background")

from ddd_celery.declarations import (  # noqa: E402 - after the package, see above
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
from ddd_celery.declarations.process import process_manager, step  # noqa: E402
from ddd_celery.kernel.process_runner import ProcessDecision, TimeoutFired  # noqa: E402
from ddd_celery.scheduling.instants import latest_occurrence, next_occurrence  # noqa: E402

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
