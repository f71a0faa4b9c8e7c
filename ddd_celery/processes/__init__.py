"""Process managers: ``StoredProcessRunner``, the ``ProcessStore`` port and its in-memory adapter,
the timeout and outbox jobs, the errors, what observes a step (its counter, the ``StepTracer``).

Imports no Celery, Redis or SQL.
"""

from ddd_celery.processes.errors import (
    CORRUPT_PROCESS_STATE,
    INVALID_DECISION,
    NO_TIMEOUT_JOB,
    PROCESS_CONFLICT,
    PROCESS_NOT_STARTED,
    STALE_PROCESS_VERSION,
    UNKNOWN_PROCESS,
    CorruptProcessStateError,
    InvalidDecisionError,
    NoTimeoutJobError,
    ProcessConflictError,
    ProcessError,
    ProcessNotStartedError,
    StaleProcessVersionError,
    UnknownProcessError,
)
from ddd_celery.processes.jobs import (
    PROCESS_COMMANDS_JOB,
    ProcessCommandsJob,
    ProcessCommandsPayload,
    ProcessTimeoutJob,
    ProcessTimeoutPayload,
)
from ddd_celery.processes.memory import InMemoryProcessStore
from ddd_celery.processes.observability import (
    PROCESS_STEPS_COUNTER,
    NoStepTracer,
    ProcessStep,
    StepOutcome,
    StepTrace,
    StepTracer,
)
from ddd_celery.processes.runner import (
    DEFAULT_BACKOFF_MS,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_BACKOFF_MS,
    DEFAULT_RESEND_AFTER_MS,
    StoredProcessRunner,
)
from ddd_celery.processes.store import ProcessStore, StoredProcess

__all__ = [
    "CORRUPT_PROCESS_STATE",
    "DEFAULT_BACKOFF_MS",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_MAX_BACKOFF_MS",
    "DEFAULT_RESEND_AFTER_MS",
    "INVALID_DECISION",
    "NO_TIMEOUT_JOB",
    "PROCESS_COMMANDS_JOB",
    "PROCESS_CONFLICT",
    "PROCESS_NOT_STARTED",
    "PROCESS_STEPS_COUNTER",
    "STALE_PROCESS_VERSION",
    "UNKNOWN_PROCESS",
    "CorruptProcessStateError",
    "InMemoryProcessStore",
    "InvalidDecisionError",
    "NoStepTracer",
    "NoTimeoutJobError",
    "ProcessCommandsJob",
    "ProcessCommandsPayload",
    "ProcessConflictError",
    "ProcessError",
    "ProcessNotStartedError",
    "ProcessStep",
    "ProcessStore",
    "ProcessTimeoutJob",
    "ProcessTimeoutPayload",
    "StaleProcessVersionError",
    "StepOutcome",
    "StepTrace",
    "StepTracer",
    "StoredProcess",
    "StoredProcessRunner",
    "UnknownProcessError",
]
