"""What application code imports to declare jobs: no scheduler, no Celery, no I/O."""

from ddd_celery.declarations.background import (
    BackgroundJob,
    BackgroundJobDeclaration,
    BackgroundJobExecution,
    BackgroundOptions,
    background,
    background_declaration_of,
    collect_background_jobs,
)
from ddd_celery.declarations.errors import DeclarationError
from ddd_celery.declarations.execution import JobExecution
from ddd_celery.declarations.options import (
    JobOptions,
    MissedPolicy,
    OverlapPolicy,
    Tenancy,
    TenantRuns,
)
from ddd_celery.declarations.schedule import (
    CronRule,
    IntervalRule,
    ParsedJobSchedule,
    describe_job_schedule,
    parse_job_schedule,
)
from ddd_celery.declarations.scheduled import (
    ScheduledJob,
    ScheduledJobDeclaration,
    collect_scheduled_jobs,
    declaration_of,
    scheduled,
)

__all__ = [
    "BackgroundJob",
    "BackgroundJobDeclaration",
    "BackgroundJobExecution",
    "BackgroundOptions",
    "CronRule",
    "DeclarationError",
    "IntervalRule",
    "JobExecution",
    "JobOptions",
    "MissedPolicy",
    "OverlapPolicy",
    "ParsedJobSchedule",
    "ScheduledJob",
    "ScheduledJobDeclaration",
    "Tenancy",
    "TenantRuns",
    "background",
    "background_declaration_of",
    "collect_background_jobs",
    "collect_scheduled_jobs",
    "declaration_of",
    "describe_job_schedule",
    "parse_job_schedule",
    "scheduled",
]
