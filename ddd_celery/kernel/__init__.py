"""Ports and small types the jobs and schedulers stand on. Imports nothing else of the project."""

from ddd_celery.kernel.abort import AbortController, AbortSignal
from ddd_celery.kernel.actor import Actor, system_actor
from ddd_celery.kernel.clock import Clock, FixedClock, SystemClock
from ddd_celery.kernel.commands import CommandBus, InMemoryCommandBus
from ddd_celery.kernel.errors import (
    DddCeleryError,
    DomainError,
    JobAbortedError,
    JobError,
    JobStoppedError,
    JobTimeoutError,
    StoreUnavailableError,
)
from ddd_celery.kernel.ids import IdGenerator, SequentialIdGenerator, UuidGenerator
from ddd_celery.kernel.instants import iso_ms, require_aware, to_utc
from ddd_celery.kernel.job_queue import BackgroundJobView, EnqueueRequest, JobQueue
from ddd_celery.kernel.lock import InMemoryLock, Lease, Lock, LockUnavailableError
from ddd_celery.kernel.metrics import InMemoryMetrics, Labels, Metrics, NoMetrics
from ddd_celery.kernel.process_runner import (
    ProcessDecision,
    ProcessInstance,
    ProcessRunner,
    TimeoutFired,
)
from ddd_celery.kernel.reporting import ErrorReporter, InMemoryErrorReporter, LoggingErrorReporter
from ddd_celery.kernel.scope import (
    ContextVarExecutionScope,
    ExecutionContext,
    ExecutionScope,
    FixedExecutionScope,
)
from ddd_celery.kernel.tenants import InMemoryTenantDirectory, TenantDirectory
from ddd_celery.kernel.timers import JobTimers, SystemJobTimers
from ddd_celery.kernel.unit_of_work import InMemoryUnitOfWork, UnitOfWork

__all__ = [
    "AbortController",
    "AbortSignal",
    "Actor",
    "BackgroundJobView",
    "Clock",
    "CommandBus",
    "ContextVarExecutionScope",
    "DddCeleryError",
    "DomainError",
    "EnqueueRequest",
    "ErrorReporter",
    "ExecutionContext",
    "ExecutionScope",
    "FixedClock",
    "FixedExecutionScope",
    "IdGenerator",
    "InMemoryCommandBus",
    "InMemoryErrorReporter",
    "InMemoryLock",
    "InMemoryMetrics",
    "InMemoryTenantDirectory",
    "InMemoryUnitOfWork",
    "JobAbortedError",
    "JobError",
    "JobQueue",
    "JobStoppedError",
    "JobTimeoutError",
    "JobTimers",
    "Labels",
    "Lease",
    "Lock",
    "LockUnavailableError",
    "LoggingErrorReporter",
    "Metrics",
    "NoMetrics",
    "ProcessDecision",
    "ProcessInstance",
    "ProcessRunner",
    "SequentialIdGenerator",
    "StoreUnavailableError",
    "SystemClock",
    "SystemJobTimers",
    "TenantDirectory",
    "TimeoutFired",
    "UnitOfWork",
    "UuidGenerator",
    "iso_ms",
    "require_aware",
    "system_actor",
    "to_utc",
]
