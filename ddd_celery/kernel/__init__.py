"""Ports and small types the jobs and schedulers stand on. Imports nothing else of the project."""

from ddd_celery.kernel.abort import AbortController, AbortSignal
from ddd_celery.kernel.actor import Actor, system_actor
from ddd_celery.kernel.clock import Clock, FixedClock, SystemClock
from ddd_celery.kernel.commands import CommandBus, InMemoryCommandBus
from ddd_celery.kernel.errors import DomainError
from ddd_celery.kernel.ids import IdGenerator, SequentialIdGenerator, UuidGenerator
from ddd_celery.kernel.instants import iso_ms, require_aware, to_utc
from ddd_celery.kernel.lock import InMemoryLock, Lease, Lock, LockUnavailableError
from ddd_celery.kernel.metrics import InMemoryMetrics, Labels, Metrics, NoMetrics
from ddd_celery.kernel.reporting import ErrorReporter, InMemoryErrorReporter, LoggingErrorReporter
from ddd_celery.kernel.scope import (
    ContextVarExecutionScope,
    ExecutionContext,
    ExecutionScope,
    FixedExecutionScope,
)
from ddd_celery.kernel.tenants import InMemoryTenantDirectory, TenantDirectory

__all__ = [
    "AbortController",
    "AbortSignal",
    "Actor",
    "Clock",
    "CommandBus",
    "ContextVarExecutionScope",
    "DomainError",
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
    "Labels",
    "Lease",
    "Lock",
    "LockUnavailableError",
    "LoggingErrorReporter",
    "Metrics",
    "NoMetrics",
    "SequentialIdGenerator",
    "SystemClock",
    "TenantDirectory",
    "UuidGenerator",
    "iso_ms",
    "require_aware",
    "system_actor",
    "to_utc",
]
