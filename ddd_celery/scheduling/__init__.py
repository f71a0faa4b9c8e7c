"""Scheduled jobs: the schedule math, the occurrence rules and the in-process drivers.

Imports no Celery, Redis or SQL.
"""

from ddd_celery.declarations.cron_evaluator import latest_occurrence, next_occurrence
from ddd_celery.scheduling.checkpoints import InMemoryJobCheckpoints, JobCheckpoints
from ddd_celery.scheduling.errors import (
    INVALID_JOB_SETTINGS,
    JOB_ABORTED,
    JOB_LOCK_UNAVAILABLE,
    JOB_TIMEOUT,
    UNEXPECTED_ERROR,
    UNKNOWN_JOB,
    InvalidJobScheduleError,
    InvalidJobSettingsError,
    JobAbortedError,
    JobLockUnavailableError,
    JobTimeoutError,
    UnknownJobError,
)
from ddd_celery.scheduling.in_process import InProcessJobScheduler
from ddd_celery.scheduling.last_runs import InMemoryJobLastRuns, JobLastRuns
from ddd_celery.scheduling.observability import (
    DURATION_HISTOGRAM,
    RUNS_COUNTER,
    OnRun,
    RunDetail,
    RunRecorder,
    report_failed_runs,
)
from ddd_celery.scheduling.occurrence_store import (
    Beginning,
    ComposedOccurrenceStore,
    OccurrenceStore,
    RunEnd,
    occurrence_store,
)
from ddd_celery.scheduling.outcomes import JobRun, Outcome
from ddd_celery.scheduling.run_state import Claim, InMemoryJobRunState, JobRunState
from ddd_celery.scheduling.scheduler import JobScheduler
from ddd_celery.scheduling.timers import JobTimers, SystemJobTimers

__all__ = [
    "DURATION_HISTOGRAM",
    "INVALID_JOB_SETTINGS",
    "JOB_ABORTED",
    "JOB_LOCK_UNAVAILABLE",
    "JOB_TIMEOUT",
    "RUNS_COUNTER",
    "UNEXPECTED_ERROR",
    "UNKNOWN_JOB",
    "Beginning",
    "Claim",
    "ComposedOccurrenceStore",
    "InMemoryJobCheckpoints",
    "InMemoryJobLastRuns",
    "InMemoryJobRunState",
    "InProcessJobScheduler",
    "InvalidJobScheduleError",
    "InvalidJobSettingsError",
    "JobAbortedError",
    "JobCheckpoints",
    "JobLastRuns",
    "JobLockUnavailableError",
    "JobRun",
    "JobRunState",
    "JobScheduler",
    "JobTimeoutError",
    "JobTimers",
    "OccurrenceStore",
    "OnRun",
    "Outcome",
    "RunDetail",
    "RunEnd",
    "RunRecorder",
    "SystemJobTimers",
    "UnknownJobError",
    "latest_occurrence",
    "next_occurrence",
    "occurrence_store",
    "report_failed_runs",
]
