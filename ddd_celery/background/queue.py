"""``StoredJobQueue``: the kernel's ``JobQueue`` on a ``JobStore``.

It names the job, validates its payload, captures who enqueues (correlation id, actor, tenant,
traceparent; outside any work, the job's id is its correlation id, as its attempts log), adds
it to the store and publishes its wake-up after the unit of work commits:

* a store that writes in the caller's transaction (``store.transactional``): added now, in it;
  published after the commit;
* any other store (Redis, memory): inside a unit of work, added and published after the commit,
  neither on rollback; outside one, at once. An add after the commit that finds the store
  unreachable is sent again (the same job id, so a store that did add it keeps one job) for up
  to ``add_retry_ms``, counted from the first add that failed, so a short outage costs a wait;
  what still fails raises ``JobNotAddedAfterCommitError`` from the end of the unit of work,
  naming the job id and saying the work committed, and is sent to the ``ErrorReporter``.

Before any store is asked, ``enqueue`` refuses (``InvalidEnqueueError``, the same on every
store) what some store cannot keep: a payload larger than ``max_payload_bytes`` as JSON, nested
deeper than ``MAX_NESTING``, with a NUL character in a string; a tenant id (at most
``MAX_TENANT_ID_BYTES``), idempotency key (``MAX_IDEMPOTENCY_KEY_BYTES``), correlation id,
actor or traceparent with a NUL character or a lone surrogate, or an empty tenant id.

A job due later is added without a wake-up: the relay publishes it when it is due, so a delay
of hours lives in the store, never in a broker. A publish that fails is logged and left to the
relay (the job was added ``dispatched``, and is published again once that is stale): it never
raises into the use case, whose work has committed.

An idempotency key names its job: the job's id is derived from the tenant and the key, so the
same key in the same tenant returns the same id even when the add waits for a commit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from ddd_celery.background.errors import (
    InvalidEnqueueError,
    JobNotAddedAfterCommitError,
    UnknownBackgroundJobError,
)
from ddd_celery.background.payloads import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    check_text,
    to_stored,
)
from ddd_celery.background.publisher import JobPublisher
from ddd_celery.background.rules import keyed_job_id
from ddd_celery.background.store import (
    Dispatch,
    EnqueuedBy,
    JobStore,
    JsonValue,
    NewJob,
    StoredJob,
    dispatched_now,
)
from ddd_celery.declarations.background import (
    BackgroundJobDeclaration,
    background_declaration_named,
)
from ddd_celery.kernel.clock import Clock
from ddd_celery.kernel.ids import IdGenerator
from ddd_celery.kernel.instants import to_utc
from ddd_celery.kernel.job_queue import BackgroundJobView, EnqueueRequest, JobQueue
from ddd_celery.kernel.reporting import ErrorReporter
from ddd_celery.kernel.scope import ExecutionScope
from ddd_celery.kernel.unit_of_work import UnitOfWork

PUBLISH_FAILED = "Background job not published, the relay will"
NOT_ADDED_AFTER_COMMIT = "Background job not added after its unit of work committed"
DEFAULT_ADD_RETRY_MS = 5_000
"""How long an add after a commit is retried: a store restarting or failing over, not down."""
MAX_TENANT_ID_BYTES = 256
MAX_IDEMPOTENCY_KEY_BYTES = 512
_FIRST_RETRY_S = 0.05
_LONGEST_RETRY_S = 1.0
DEFAULT_LOGGER = "ddd_celery.background"
_Added = TypeVar("_Added")


class StoredJobQueue(JobQueue):
    """Enqueue, find, cancel and retry background jobs kept in ``store``.

    ``declarations`` limits the jobs it knows (the ``@background`` classes, or their
    declarations); by default every job declared in the process. ``traceparent`` returns the
    W3C traceparent of the work in progress (or None); without it, the scope's is kept.
    ``max_payload_bytes`` bounds a payload's JSON; ``add_retry_ms`` how long an add after a
    commit is retried; ``errors`` receives each ``JobNotAddedAfterCommitError``.
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
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        add_retry_ms: int = DEFAULT_ADD_RETRY_MS,
        errors: ErrorReporter | None = None,
    ) -> None:
        for setting, value in (
            ("max_payload_bytes", max_payload_bytes),
            ("add_retry_ms", add_retry_ms),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{setting} must be an int >= 0, not {value!r}")
        self._store = store
        self._clock = clock
        self._ids = ids
        self._scope = scope
        self._unit_of_work = unit_of_work
        self._publisher = publisher
        self._traceparent = traceparent
        self._logger = logger or logging.getLogger(DEFAULT_LOGGER)
        self._max_payload_bytes = max_payload_bytes
        self._add_retry_s = add_retry_ms / 1000
        self._errors = errors
        self._failing_since: float | None = None
        """When the adds after a commit began to fail (monotonic s); None while they succeed."""
        self._failed_at = 0.0
        """When an add after a commit last failed (monotonic s)."""
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
        now = self._clock.now()
        request = EnqueueRequest(job, payload, delay_ms, run_at, idempotency_key)
        new = self._new_job(request, now, self._enqueued_by())
        dispatched = new.run_at <= now and self._publisher is not None

        def publish(added: str) -> None:
            if dispatched:
                self._publish(Dispatch(added, new.name, new.queue))

        unit_of_work = self._unit_of_work
        if unit_of_work is None or not unit_of_work.in_progress():
            added = self._store.add(new, dispatched=dispatched)
            publish(added)
            return added
        if self._store.transactional:
            added = self._store.add(new, dispatched=dispatched)
            unit_of_work.after_commit(lambda: publish(added))
            return added
        unit_of_work.after_commit(lambda: publish(self._add_after_commit(new, dispatched)))
        return new.id

    def enqueue_many(self, requests: Iterable[EnqueueRequest]) -> list[str]:
        """Every job checked first (a refusal names its ``index``), then one ``add_many`` and,
        after the commit, one ``publish_many`` of the wake-ups of those due now."""
        jobs = self._new_jobs(requests)
        if not jobs:
            return []
        dispatched = self._publisher is not None

        def publish(kept: list[str]) -> None:
            if dispatched:
                wakeups = {
                    added: Dispatch(added, job.name, job.queue)
                    for added, job in zip(kept, jobs, strict=True)
                    if dispatched_now(job, dispatched)
                }
                self._publish_many(list(wakeups.values()))

        unit_of_work = self._unit_of_work
        if unit_of_work is None or not unit_of_work.in_progress():
            kept = self._store.add_many(jobs, dispatched=dispatched)
            publish(kept)
            return kept
        if self._store.transactional:
            kept = self._store.add_many(jobs, dispatched=dispatched)
            unit_of_work.after_commit(lambda: publish(kept))
            return kept

        def add_then_publish() -> None:
            publish(
                self._retrying(
                    lambda: self._store.add_many(jobs, dispatched=dispatched), jobs[0], len(jobs)
                )
            )

        unit_of_work.after_commit(add_then_publish)
        return [job.id for job in jobs]

    def _new_jobs(self, requests: Iterable[EnqueueRequest]) -> list[NewJob]:
        """The jobs of a batch, each checked as ``enqueue`` checks one; the first refused
        raises, naming its ``index``.

        What the jobs share is found once for the batch, not once a job: the enqueuing work
        (checked with the first job, as its own parts), each job type's declaration, the
        instant; the ids of the jobs without an idempotency key come from one
        ``IdGenerator.next_ids``.
        """
        now = self._clock.now()
        enqueued_by = self._enqueued_by()
        declarations: dict[type[Any] | str, BackgroundJobDeclaration] = {}
        checked: list[tuple[BackgroundJobDeclaration, EnqueueRequest, JsonValue, datetime]] = []
        unkeyed = 0
        for index, request in enumerate(requests):
            try:
                if not isinstance(request, EnqueueRequest):
                    raise InvalidEnqueueError(
                        f"a batch holds EnqueueRequest values, not {type(request).__name__}",
                        field="requests",
                    )
                job = request.job
                shared = isinstance(job, str | type)
                declaration = declarations.get(job) if shared else None
                if declaration is None:
                    declaration = self._declaration(job)
                    if shared:
                        declarations[job] = declaration
                stored, due_at = self._checked(request, declaration, now, enqueued_by, index == 0)
            except (InvalidEnqueueError, UnknownBackgroundJobError) as error:
                raise error.in_batch(index) from error
            checked.append((declaration, request, stored, due_at))
            unkeyed += request.idempotency_key is None
        ids = iter(self._ids.next_ids(unkeyed) if unkeyed else ())
        jobs = []
        for declaration, request, stored, due_at in checked:
            key = request.idempotency_key
            job_id = next(ids) if key is None else keyed_job_id(enqueued_by.tenant_id, key)
            jobs.append(
                self._job(
                    declaration,
                    job_id,
                    stored,
                    now=now,
                    due_at=due_at,
                    enqueued_by=enqueued_by,
                    idempotency_key=key,
                )
            )
        return jobs

    def _new_job(self, request: EnqueueRequest, now: datetime, enqueued_by: EnqueuedBy) -> NewJob:
        """The job ``request`` asks for, every part checked (``InvalidEnqueueError``,
        ``UnknownBackgroundJobError``), enqueued at ``now`` by ``enqueued_by``."""
        declaration = self._declaration(request.job)
        stored, due_at = self._checked(request, declaration, now, enqueued_by, True)
        idempotency_key = request.idempotency_key
        job_id = (
            self._ids.next_id()
            if idempotency_key is None
            else keyed_job_id(enqueued_by.tenant_id, idempotency_key)
        )
        return self._job(
            declaration,
            job_id,
            stored,
            now=now,
            due_at=due_at,
            enqueued_by=enqueued_by,
            idempotency_key=idempotency_key,
        )

    def _checked(
        self,
        request: EnqueueRequest,
        declaration: BackgroundJobDeclaration,
        now: datetime,
        enqueued_by: EnqueuedBy,
        check_enqueued_by: bool,
    ) -> tuple[JsonValue, datetime]:
        """The payload to store and the instant due of ``request``, every part checked, and
        ``enqueued_by`` too when ``check_enqueued_by`` (once for the jobs it enqueues)."""
        name = declaration.name
        stored = to_stored(
            name,
            request.payload,
            declaration.payload_type,
            max_payload_bytes=self._max_payload_bytes,
        )
        due_at = _run_at(name, now, request.delay_ms, request.run_at)
        idempotency_key = request.idempotency_key
        if idempotency_key is not None:
            if not isinstance(idempotency_key, str):
                raise InvalidEnqueueError(
                    "idempotency_key must be a str", job=name, field="idempotency_key"
                )
            check_text(
                name, "idempotency_key", idempotency_key, max_bytes=MAX_IDEMPOTENCY_KEY_BYTES
            )
        if check_enqueued_by:
            _check_enqueued_by(name, enqueued_by)
        return stored, due_at

    @staticmethod
    def _job(
        declaration: BackgroundJobDeclaration,
        job_id: str,
        stored: JsonValue,
        *,
        now: datetime,
        due_at: datetime,
        enqueued_by: EnqueuedBy,
        idempotency_key: str | None,
    ) -> NewJob:
        if not enqueued_by.correlation_id:
            # Enqueued outside any work: its attempts log the job's id as their correlation id,
            # and the store says the same (``find`` tells one story).
            enqueued_by = EnqueuedBy(
                correlation_id=job_id,
                actor=enqueued_by.actor,
                tenant_id=enqueued_by.tenant_id,
                traceparent=enqueued_by.traceparent,
            )
        return NewJob(
            id=job_id,
            name=declaration.name,
            queue=declaration.queue,
            payload=stored,
            enqueued_at=now,
            run_at=due_at,
            max_attempts=declaration.options.max_attempts,
            enqueued_by=enqueued_by,
            idempotency_key=idempotency_key,
        )

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

    def _add_after_commit(self, job: NewJob, dispatched: bool) -> str:
        """Add ``job`` once its unit of work committed (``_retrying``)."""
        return self._retrying(lambda: self._store.add(job, dispatched=dispatched), job, 1)

    def _retrying(self, add: Callable[[], _Added], job: NewJob, jobs: int) -> _Added:
        """``add`` (of ``job``, the first of ``jobs``) once its unit of work committed,
        retrying a store that cannot be asked.

        The same job ids are sent each time, so an add that did reach the store before its
        reply was lost keeps one job of each. Retried while less than ``add_retry_ms`` has
        passed since the outage began (the first failing add of this queue, in any unit, after
        a success or a quiet ``add_retry_ms``): once it outlasts that, each add is tried once
        until one succeeds, so a long outage does not hold every commit that long.
        """
        attempts = 0
        wait = _FIRST_RETRY_S
        while True:
            attempts += 1
            started = time.monotonic()
            try:
                added = add()
            except ConnectionError as error:
                failing_since = self._failing_since
                if failing_since is None or started - self._failed_at > self._add_retry_s:
                    failing_since = self._failing_since = started
                self._failed_at = failed_at = time.monotonic()
                left = failing_since + self._add_retry_s - failed_at
                if left > 0:
                    time.sleep(min(wait, left))
                    wait = min(wait * 2, _LONGEST_RETRY_S)
                    continue
                raise self._not_added(job, jobs, attempts, error) from error
            except Exception as error:  # not an outage: sending it again would not help
                raise self._not_added(job, jobs, attempts, error) from error
            self._failing_since = None
            return added

    def _not_added(
        self, job: NewJob, jobs: int, attempts: int, error: Exception
    ) -> JobNotAddedAfterCommitError:
        """The error of an add after the commit given up on (of ``jobs`` jobs, ``job`` the
        first), logged and reported."""
        what = f"the job {job.id!r}" if jobs == 1 else f"the {jobs} jobs of a batch from {job.id!r}"
        not_added = JobNotAddedAfterCommitError(
            f"its unit of work committed, but {what} could not be added to the "
            f"store after it ({attempts} attempt(s), {type(error).__name__}); it may still be "
            "added if the store received a request before it stopped answering: enqueue it "
            "again with the same idempotency key, the work is not to be redone",
            job=job.name,
            job_id=job.id,
            attempts=attempts,
        )
        not_added.__cause__ = error
        context = {
            "job": job.name,
            "job_id": job.id,
            "correlation_id": job.enqueued_by.correlation_id,
            "tenant_id": job.tenant_id,
            "error_type": type(error).__name__,
        }
        self._logger.error(NOT_ADDED_AFTER_COMMIT, extra=context)
        if self._errors is not None:
            try:
                self._errors.report(not_added, context)
            except Exception:  # a reporter's failure must not hide the error itself
                self._logger.exception(NOT_ADDED_AFTER_COMMIT, extra=context)
        return not_added

    def _publish_many(self, dispatches: list[Dispatch]) -> None:
        """Publish a batch's wake-ups; one that fails is logged and left to the relay."""
        assert self._publisher is not None
        if not dispatches:
            return
        try:
            self._publisher.publish_many(dispatches)
        except Exception as error:  # committed work must not fail; the relay publishes them
            self._logger.warning(
                PUBLISH_FAILED,
                extra={
                    "job": dispatches[0].name,
                    "job_id": dispatches[0].job_id,
                    "jobs": len(dispatches),
                    "error_type": type(error).__name__,
                },
            )

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


def _check_enqueued_by(job: str, by: EnqueuedBy) -> None:
    """Refuse the texts of the enqueuing work a store cannot keep (its columns, its keys)."""
    if by.tenant_id is not None:
        if by.tenant_id == "":
            raise InvalidEnqueueError(
                "the tenant id is empty: a tenant id is never the empty text",
                job=job,
                field="tenant_id",
            )
        check_text(job, "tenant_id", by.tenant_id, max_bytes=MAX_TENANT_ID_BYTES)
    for field, text in (
        ("correlation_id", by.correlation_id),
        ("actor", by.actor),
        ("traceparent", by.traceparent),
    ):
        if text is not None:
            check_text(job, field, text)


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
