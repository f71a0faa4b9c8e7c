"""ddd_celery: scheduled jobs, background jobs and process managers of a DDD kit, on Celery.

This top level imports no Celery, Redis or SQL: declaring a job or asking when it runs next
needs none of them.
"""

import logging

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
from ddd_celery.scheduling.instants import latest_occurrence, next_occurrence

# A library writes nothing unless the application configures logging.
logging.getLogger("ddd_celery").addHandler(logging.NullHandler())

__all__ = [
    "BackgroundJobExecution",
    "DeclarationError",
    "JobExecution",
    "ParsedJobSchedule",
    "background",
    "collect_background_jobs",
    "collect_scheduled_jobs",
    "describe_job_schedule",
    "latest_occurrence",
    "next_occurrence",
    "parse_job_schedule",
    "scheduled",
]
