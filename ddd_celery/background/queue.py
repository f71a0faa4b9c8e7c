"""``StoredJobQueue``: the kernel's ``JobQueue`` on a ``JobStore``.

It names the job, validates its payload, captures who enqueues (correlation id, actor, tenant,
traceparent), adds it to the store and publishes its wake-up after the unit of work commits:

* a store that writes in the caller's transaction (``store.transactional``): added now, in it;
  published after the commit;
* any other store (Redis, memory): inside a unit of work, added and published after the commit,
  neither on rollback; outside one, at once. An add that fails after the commit raises from the
  end of the unit of work: the work committed, the job was not kept, and the caller is told.

A job due later is added without a wake-up: the relay publishes it when it is due, so a delay
of hours lives in the store, never in a broker. A publish that fails is logged and left to the
relay (the job was added ``dispatched``, and is published again once that is stale): it never
raises into the use case, whose work has committed.

An idempotency key names its job: the job's id is derived from the tenant and the key, so the
same key in the same tenant returns the same id even when the add waits for a commit.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from ddd_celery.background.errors import InvalidEnqueueError, UnknownBackgroundJobError
from ddd_celery.background.payloads import to_stored
from ddd_celery.background.publisher import JobPublisher
from ddd_celery.background.rules import tenant_key_of
from ddd_celery.background.store import Dispatch, EnqueuedBy, JobStore, NewJob, StoredJob
from ddd_celery.declarations.background import (
    BackgroundJobDeclaration,
    background_declaration_named,
)
from ddd_celery.kernel.clock import Clock
from ddd_celery.kernel.ids import IdGenerator
from ddd_celery.kernel.instants import to_utc
from ddd_celery.kernel.job_queue import BackgroundJobView, JobQueue
from ddd_celery.kernel.scope import ExecutionScope
from ddd_celery.kernel.unit_of_work import UnitOfWork

PUBLISH_FAILED = "Background job not published, the relay will"
DEFAULT_LOGGER = "ddd_celery.background"
_KEYED_IDS = uuid.UUID("0b6f1e4e-4d0c-4b61-9a53-5f3f7d2c8a10")
"""The namespace of the ids derived from an idempotency key (UUID version 5)."""


class StoredJobQueue(JobQueue):
    """Enqueue, find, cancel and retry background jobs kept in ``store``.

    ``declarations`` limits the jobs it knows (the ``@background`` classes, or their
    declarations); by default every job declared in the process. ``traceparent`` returns the
    W3C traceparent of the work in progress (or None); without it, the scope's is kept.
    """

    def __init__(
        self,
        *,
        store: JobStore,
        clock: Clock,
        ids: IdGenerator,
        scope: ExecutionScope,
        unit_of_work: UnitOfWork | None = None,
        publisher: JobPublisher | None = None,
        traceparent: Callable[[], str | None] | None = None,
        declarations: Iterable[BackgroundJobDeclaration | type[Any]] | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._ids = ids
        self._scope = scope
        self._unit_of_work = unit_of_work
        self._publisher = publisher
        self._traceparent = traceparent
        self._logger = logger or logging.getLogger(DEFAULT_LOGGER)
        self._declarations: dict[str, BackgroundJobDeclaration] | None = None
        if declarations is not None:
            self._declarations = {}
            for item in declarations:
                declaration = (
                    item if isinstance(item, BackgroundJobDeclaration) else (_declared(item))
                )
                self._declarations[declaration.name] = declaration

    def enqueue(
        self,
        job: type[Any] | str,
        payload: Any,
        *,
        delay_ms: int | None = None,
        run_at: datetime | None = None,
        idempotency_key: str | None = None,
    ) -> str:
        declaration = self._declaration(job)
        name = declaration.name
        stored = to_stored(name, payload, declaration.payload_type)
        now = self._clock.now()
        due_at = _run_at(name, now, delay_ms, run_at)
        if idempotency_key is not None and not isinstance(idempotency_key, str):
            raise InvalidEnqueueError(
                "idempotency_key must be a str", job=name, field="idempotency_key"
            )
        enqueued_by = self._enqueued_by()
        job_id = (
            self._ids.next_id()
            if idempotency_key is None
            else str(uuid.uuid5(_KEYED_IDS, f"{tenant_key_of(enqueued_by)}\x1f{idempotency_key}"))
        )
        dispatched = due_at <= now and self._publisher is not None
        new = NewJob(
            id=job_id,
            name=name,
            queue=declaration.queue,
            payload=stored,
            enqueued_at=now,
            run_at=due_at,
            max_attempts=declaration.options.max_attempts,
            enqueued_by=enqueued_by,
            idempotency_key=idempotency_key,
        )

        def publish(added: str) -> None:
            if dispatched:
                self._publish(Dispatch(added, name, new.queue))

        unit_of_work = self._unit_of_work
        if unit_of_work is None or not unit_of_work.in_progress():
            added = self._store.add(new, dispatched=dispatched)
            publish(added)
            return added
        if self._store.transactional:
            added = self._store.add(new, dispatched=dispatched)
            unit_of_work.after_commit(lambda: publish(added))
            return added
        unit_of_work.after_commit(lambda: publish(self._store.add(new, dispatched=dispatched)))
        return job_id

    def find(self, job_id: str) -> BackgroundJobView | None:
        job = self._store.find(job_id, tenant_id=self._tenant())
        return None if job is None else view_of(job)

    def cancel(self, job_id: str) -> bool:
        return self._store.cancel(job_id, tenant_id=self._tenant(), now=self._clock.now())

    def retry_dead(self, job_id: str) -> bool:
        """Queue a dead job of the current tenant again, its attempts reset; False if not dead.

        Published after the commit when the queue has a publisher, else left to the relay or
        a polling worker.
        """
        tenant = self._tenant()
        job = self._store.find(job_id, tenant_id=tenant)
        if job is None or not self._store.retry_dead(
            job_id, tenant_id=tenant, now=self._clock.now()
        ):
            return False
        if self._publisher is not None:
            dispatch = Dispatch(job.id, job.name, job.queue)
            if self._unit_of_work is None:
                self._publish(dispatch)
            else:
                self._unit_of_work.after_commit(lambda: self._publish(dispatch))
        return True

    def _declaration(self, job: type[Any] | str) -> BackgroundJobDeclaration:
        if isinstance(job, str):
            found = (
                background_declaration_named(job)
                if self._declarations is None
                else self._declarations.get(job)
            )
            if found is None:
                raise UnknownBackgroundJobError(f"no background job is named {job!r}", job=job)
            return found
        declaration = _declared(job)
        if self._declarations is not None and declaration.name not in self._declarations:
            raise UnknownBackgroundJobError(
                f"{declaration.name!r} is not one of this queue's jobs", job=declaration.name
            )
        return declaration

    def _enqueued_by(self) -> EnqueuedBy:
        context = self._scope.current()
        traceparent = self._traceparent() if self._traceparent is not None else None
        if context is None:
            return EnqueuedBy(traceparent=traceparent)
        return EnqueuedBy(
            correlation_id=context.correlation_id,
            actor=str(context.actor),
            tenant_id=context.tenant_id,
            traceparent=traceparent or context.traceparent,
        )

    def _tenant(self) -> str | None:
        context = self._scope.current()
        return None if context is None else context.tenant_id

    def _publish(self, dispatch: Dispatch) -> None:
        assert self._publisher is not None
        try:
            self._publisher.publish(dispatch)
        except Exception as error:  # committed work must not fail; the relay publishes it
            self._logger.warning(
                PUBLISH_FAILED,
                extra={
                    "job": dispatch.name,
                    "job_id": dispatch.job_id,
                    "error_type": type(error).__name__,
                },
            )


def view_of(job: StoredJob) -> BackgroundJobView:
    """The kernel's view of a stored job."""
    return BackgroundJobView(
        id=job.id,
        name=job.name,
        status=job.status.value,
        attempts=job.attempts,
        max_attempts=job.max_attempts,
        enqueued_at=job.enqueued_at,
        run_at=job.run_at,
        progress=job.progress,
        last_error_code=job.last_error_code,
        finished_at=job.finished_at,
        tenant_id=job.tenant_id,
    )


def _declared(job_class: type[Any]) -> BackgroundJobDeclaration:
    declaration = getattr(job_class, "__dict__", {}).get("__background_job__")
    if not isinstance(declaration, BackgroundJobDeclaration):
        name = getattr(job_class, "__qualname__", repr(job_class))
        raise UnknownBackgroundJobError(f"{name} is not declared with @background")
    return declaration


def _run_at(job: str, now: datetime, delay_ms: object, run_at: object) -> datetime:
    if delay_ms is not None and run_at is not None:
        raise InvalidEnqueueError("give delay_ms or run_at, not both", job=job, field="delay_ms")
    if delay_ms is not None:
        if isinstance(delay_ms, bool) or not isinstance(delay_ms, int) or delay_ms < 0:
            raise InvalidEnqueueError(
                "delay_ms must be an int of milliseconds >= 0", job=job, field="delay_ms"
            )
        try:
            return now + timedelta(milliseconds=delay_ms)
        except OverflowError:
            raise InvalidEnqueueError(
                "delay_ms goes past the year 9999", job=job, field="delay_ms"
            ) from None
    if run_at is not None:
        if not isinstance(run_at, datetime):
            raise InvalidEnqueueError("run_at must be a datetime", job=job, field="run_at")
        if run_at.tzinfo is None or run_at.utcoffset() is None:
            raise InvalidEnqueueError(
                "run_at must be an aware datetime (with a tzinfo)", job=job, field="run_at"
            )
        return to_utc(run_at)
    return now
