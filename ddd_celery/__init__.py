"""ddd_celery: scheduled jobs, background jobs and process managers of a DDD kit, on Celery.

This top level imports no Celery, Redis or SQL: declaring a job or asking when it runs next
needs none of them.
"""

from ddd_celery.declarations import (
    DeclarationError,
    JobExecution,
    ParsedJobSchedule,
    collect_scheduled_jobs,
    describe_job_schedule,
    parse_job_schedule,
    scheduled,
)
from ddd_celery.scheduling.instants import latest_occurrence, next_occurrence

__all__ = [
    "DeclarationError",
    "JobExecution",
    "ParsedJobSchedule",
    "collect_scheduled_jobs",
    "describe_job_schedule",
    "latest_occurrence",
    "next_occurrence",
    "parse_job_schedule",
    "scheduled",
]
