"""The ``JobQueue`` port: how a use case hands work to a background job, and finds it again."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class BackgroundJobView:
    """A background job as ``find`` shows it to the application.

    ``status`` is one of ``queued``, ``running``, ``succeeded``, ``failed`` (waiting for its
    retry at ``run_at``), ``dead`` or ``cancelled``. ``attempts`` counts the attempt in
    progress. ``last_error_code`` is the code of the last failure, never its message.
    """

    id: str
    name: str
    status: str
    attempts: int
    max_attempts: int
    enqueued_at: datetime
    run_at: datetime
    progress: Any = None
    last_error_code: str | None = None
    finished_at: datetime | None = None
    tenant_id: str | None = None


@dataclass(frozen=True, slots=True)
class EnqueueRequest:
    """One job of ``JobQueue.enqueue_many``: what ``enqueue`` is given, as a value."""

    job: type[Any] | str
    """Its ``@background`` class, or its name."""
    payload: Any
    delay_ms: int | None = None
    run_at: datetime | None = None
    idempotency_key: str | None = None


class JobQueue(ABC):
    """Enqueues background jobs for a worker to run later, at least once.

    A job enqueued inside a unit of work is kept and published only when it commits. ``find``
    and ``cancel`` reach the jobs of the tenant of the work in progress only (every job when the
    work has no tenant).
    """

    @abstractmethod
    def enqueue(
        self,
        job: type[Any] | str,
        payload: Any,
        *,
        delay_ms: int | None = None,
        run_at: datetime | None = None,
        idempotency_key: str | None = None,
    ) -> str:
        """Enqueue ``job`` (its ``@background`` class or name) with ``payload``; its id.

        Due now, after ``delay_ms``, or at the aware instant ``run_at`` (not both). The same
        ``idempotency_key`` in the same tenant returns the first job's id and adds nothing.

        Raises:
            ValueError: ``InvalidEnqueueError``, naming the field: a payload the job's type
                refuses, JSON cannot carry or a store cannot keep, or a ``delay_ms`` or
                ``run_at`` that cannot be (both, naive, out of range).
            LookupError: ``job`` is not a known background job.
            ConnectionError: the store cannot be asked when the job is added now (outside a unit
                of work, or on a store that writes in it); an add after the commit that fails
                raises ``JobNotAddedAfterCommitError`` from the end of the unit of work instead.
        """

    @abstractmethod
    def enqueue_many(self, requests: Iterable[EnqueueRequest]) -> list[str]:
        """Enqueue every job of ``requests`` at once; the id of each, in their order.

        Each job is what ``enqueue`` of its request would make (the same checks, the same
        idempotency per tenant: a key its tenant already has, or that an earlier request has,
        answers that job's id), written to the store in one go and, inside a unit of work,
        kept and published only when it commits, as one batch. A batch with one job that
        ``enqueue`` would refuse is refused whole, before any store is asked: the error
        ``enqueue`` raises for it, whose message and ``index`` name its place in the batch
        (from 0) and its job.

        Raises:
            ValueError: ``InvalidEnqueueError`` of the first job refused (``index``).
            LookupError: ``UnknownBackgroundJobError`` of the first unknown job (``index``).
            ConnectionError: as for ``enqueue``.
        """

    @abstractmethod
    def find(self, job_id: str) -> BackgroundJobView | None:
        """The job, or None when unknown or another tenant's.

        Raises:
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """

    @abstractmethod
    def cancel(self, job_id: str) -> bool:
        """Cancel a queued, failed or running job; True when it was one and is now cancelled.

        A running job's signal is aborted on the worker that runs it.

        Raises:
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """
