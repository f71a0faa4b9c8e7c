"""Background jobs: the job rules, the queue, the store port and its in-memory adapter, the
attempt shared by every driver, the polling worker, the errors.

Imports no Celery, Redis or SQL. Its names are imported with ``from ddd_celery.background
import JobStore``: the attribute ``ddd_celery.background`` is the ``@background`` decorator.
"""

from ddd_celery.background.attempt import (
    AttemptOutcome,
    BackgroundRegistration,
    Conclusion,
    conclude,
    registration_of,
    renew_lease,
    run_claimed,
    run_claimed_sync,
)
from ddd_celery.background.errors import (
    ATTEMPTS_EXHAUSTED,
    INVALID_ENQUEUE,
    JOB_INTERRUPTED,
    JOB_NOT_ADDED,
    AttemptsExhaustedError,
    InvalidEnqueueError,
    JobInterruptedError,
    JobNotAddedAfterCommitError,
    UnknownBackgroundJobError,
)
from ddd_celery.background.memory import InMemoryJobStore
from ddd_celery.background.observability import (
    BACKGROUND_DURATION_HISTOGRAM,
    BACKGROUND_RUNS_COUNTER,
    BackgroundJobRun,
    BackgroundRecorder,
    BackgroundRunDetail,
    OnBackgroundRun,
    report_failed_background_jobs,
)
from ddd_celery.background.publisher import JobPublisher
from ddd_celery.background.queue import StoredJobQueue, view_of
from ddd_celery.background.rules import (
    DEFAULT_LEASE_MS,
    AttemptEnd,
    RunStatus,
    heartbeat_interval_ms,
    tenant_key_of,
)
from ddd_celery.background.store import (
    AttemptRecord,
    AttemptState,
    ClaimedJob,
    Dispatch,
    EnqueuedBy,
    JobFilter,
    JobLease,
    JobPage,
    JobState,
    JobStats,
    JobStatus,
    JobStore,
    LostLeaseError,
    NewJob,
    StoredJob,
)
from ddd_celery.background.worker import QueueWorker

__all__ = [
    "ATTEMPTS_EXHAUSTED",
    "BACKGROUND_DURATION_HISTOGRAM",
    "BACKGROUND_RUNS_COUNTER",
    "DEFAULT_LEASE_MS",
    "INVALID_ENQUEUE",
    "JOB_INTERRUPTED",
    "JOB_NOT_ADDED",
    "AttemptEnd",
    "AttemptOutcome",
    "AttemptRecord",
    "AttemptState",
    "AttemptsExhaustedError",
    "BackgroundJobRun",
    "BackgroundRecorder",
    "BackgroundRegistration",
    "BackgroundRunDetail",
    "ClaimedJob",
    "Conclusion",
    "Dispatch",
    "EnqueuedBy",
    "InMemoryJobStore",
    "InvalidEnqueueError",
    "JobFilter",
    "JobInterruptedError",
    "JobLease",
    "JobNotAddedAfterCommitError",
    "JobPage",
    "JobPublisher",
    "JobState",
    "JobStats",
    "JobStatus",
    "JobStore",
    "LostLeaseError",
    "NewJob",
    "OnBackgroundRun",
    "QueueWorker",
    "RunStatus",
    "StoredJob",
    "StoredJobQueue",
    "UnknownBackgroundJobError",
    "conclude",
    "heartbeat_interval_ms",
    "registration_of",
    "renew_lease",
    "report_failed_background_jobs",
    "run_claimed",
    "run_claimed_sync",
    "tenant_key_of",
    "view_of",
]
