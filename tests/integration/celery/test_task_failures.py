"""A failed run is a failed Celery task: ``task_failure`` fires, the state is FAILURE, no retry.

On a real worker (in this process, solo pool) over Redis, with a Redis result backend under the
test's prefix; the outcome is still recorded exactly once. The exception Celery is given never
quotes the error's message; its traceback holds the job's frames, chained to the job's error
(whose message Celery then prints) unless ``ddd_celery_traceback_messages`` is false.

Then a background job's failed attempt, without a worker (``run_message``): Celery's ``Retry``
when it will be retried, its failure once the job is dead, on the same policy.
"""

from __future__ import annotations

import pickle
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from traceback import format_exception
from typing import Any

import pytest
from celery import Celery
from celery.app.task import Context
from celery.contrib.testing.worker import start_worker
from celery.exceptions import Retry
from celery.signals import task_failure, task_retry, task_success
from celery_support import WAIT_S, AppFactory, Runs
from probe_jobs import SYNC, AsyncProbeJob, Probe, SyncProbeJob
from services import REDIS_URL

from ddd_celery.background import AttemptsExhaustedError, InMemoryJobStore
from ddd_celery.celery import CeleryJobs, OccurrenceMessage, install_jobs
from ddd_celery.celery.background import (
    AttemptFailedError,
    BackgroundJobs,
    install_background_jobs,
)
from ddd_celery.celery.background.tasks import run_message as background_run_message
from ddd_celery.celery.tasks import (
    ScheduledJobFailedError,
    ScheduledJobRefusedError,
    raise_if_failed,
)
from ddd_celery.declarations import JobExecution
from ddd_celery.declarations.background import BackgroundJobExecution, background
from ddd_celery.kernel import (
    DomainError,
    InMemoryLock,
    InMemoryMetrics,
    SequentialIdGenerator,
    SystemClock,
)
from ddd_celery.kernel.instants import iso_ms
from ddd_celery.scheduling.execution import not_run
from ddd_celery.scheduling.observability import RUNS_COUNTER
from ddd_celery.scheduling.outcomes import JobRun, Outcome

AT = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
SECRET = "card 4242 4242 4242 4242 declined"
"""What a job's error says: data, which nothing Celery keeps may quote."""

OLD_REDIS_CALL = "ignore:Call to deprecated setex:DeprecationWarning"
"""Celery's Redis result backend still calls ``setex``, which redis-py 8 deprecates."""

pytestmark = pytest.mark.filterwarnings(OLD_REDIS_CALL)


@dataclass
class TaskSignals:
    """The ``task_failure``, ``task_success`` and ``task_retry`` signals of one app's tasks."""

    app: Any
    failures: list[dict[str, Any]] = field(default_factory=list)
    successes: list[str] = field(default_factory=list)
    retries: list[str] = field(default_factory=list)
    _changed: threading.Condition = field(default_factory=threading.Condition)

    def __post_init__(self) -> None:
        task_failure.connect(self._on_failure, weak=False)
        task_success.connect(self._on_success, weak=False)
        task_retry.connect(self._on_retry, weak=False)

    def close(self) -> None:
        task_failure.disconnect(self._on_failure)
        task_success.disconnect(self._on_success)
        task_retry.disconnect(self._on_retry)

    def wait_for_ends(self, count: int) -> None:
        with self._changed:
            ended = self._changed.wait_for(
                lambda: len(self.failures) + len(self.successes) >= count, WAIT_S
            )
        assert ended, f"waited {WAIT_S}s for {count} tasks to end"

    def _ours(self, sender: Any) -> bool:
        return getattr(sender, "app", None) is self.app

    def _on_failure(self, sender: Any = None, **kwargs: Any) -> None:
        if self._ours(sender):
            with self._changed:
                self.failures.append(kwargs)
                self._changed.notify_all()

    def _on_success(self, sender: Any = None, **kwargs: Any) -> None:
        if self._ours(sender):
            with self._changed:
                self.successes.append(sender.request.id)
                self._changed.notify_all()

    def _on_retry(self, sender: Any = None, **kwargs: Any) -> None:
        if self._ours(sender):
            self.retries.append(str(kwargs.get("request")))


def wire(
    make_app: AppFactory,
    redis_prefix: str,
    probe: Probe,
    runs: Runs,
    *,
    traceback_messages: bool = True,
    **overrides: Any,
) -> tuple[Any, CeleryJobs]:
    app = make_app(
        result_backend=REDIS_URL,
        result_backend_transport_options={"global_keyprefix": redis_prefix},
        result_backend_thread_safe=True,  # one backend, the worker's thread's: closed after
        ddd_celery_traceback_messages=traceback_messages,
    )
    clock = SystemClock()
    options: dict[str, Any] = {
        "jobs": [SyncProbeJob, AsyncProbeJob],
        "providers": {Probe: lambda: probe},
        "lock": InMemoryLock(clock),
        "clock": clock,
        "ids": SequentialIdGenerator("corr-"),
        "on_run": runs,
        "environ": {},
        "routes": {SYNC: f"{app.main}-probe"},
    }
    return app, install_jobs(app, **(options | overrides))


@contextmanager
def worker(app: Any) -> Iterator[TaskSignals]:
    signals = TaskSignals(app)
    try:
        with start_worker(app, pool="solo", perform_ping_check=False, loglevel="WARNING"):
            yield signals
    finally:
        signals.close()


def send(app: Any, registry: CeleryJobs, correlation_id: str = "corr-beat") -> Any:
    """Send an occurrence of the sync probe as beat does; the result handle of its task."""
    return app.send_task(
        SYNC,
        kwargs=OccurrenceMessage(AT, correlation_id).to_kwargs(),
        queue=registry.jobs[SYNC].queue,
        serializer="json",
    )


def fail_with_data(execution: JobExecution) -> None:
    raise ValueError(SECRET)


def refuse(execution: JobExecution) -> None:
    raise DomainError("REMINDER_NOT_DUE", SECRET)


@pytest.mark.parametrize("messages", [True, False], ids=["messages", "no-messages"])
def test_a_run_that_raises_fails_its_task_once_with_its_code_and_type_never_its_message(
    make_app: AppFactory, redis_prefix: str, runs: Runs, messages: bool
) -> None:
    probe = Probe(behaviour=fail_with_data)
    metrics = InMemoryMetrics()
    app, registry = wire(
        make_app, redis_prefix, probe, runs, metrics=metrics, traceback_messages=messages
    )

    with worker(app) as signals:
        result = send(app, registry)
        signals.wait_for_ends(1)
        state = result.state
        stored = result.result

    [failure] = signals.failures
    error = failure["exception"]
    assert isinstance(error, ScheduledJobFailedError)
    assert not isinstance(error, ScheduledJobRefusedError)
    assert (error.job, error.code, error.error_type) == (SYNC, "UNEXPECTED_ERROR", "ValueError")
    assert str(error) == (
        f"{SYNC} failed: UNEXPECTED_ERROR (ValueError), "
        "scheduled_at 2026-03-02T10:00:00.000Z, correlation id corr-beat"
    )
    # the job's error, message included, is the cause Celery prints, unless asked not to
    assert (SECRET in failure["einfo"].traceback) is messages
    assert (error.__cause__ is runs.errors[0]) is messages
    assert "fail_with_data" in failure["einfo"].traceback  # the frames are the job's
    assert (signals.successes, signals.retries) == ([], [])
    assert state == "FAILURE"
    assert isinstance(stored, ScheduledJobFailedError)
    assert SECRET not in str(stored)
    [record] = runs.records
    assert (record.outcome, record.error_code, record.error_type) == (
        "failed",
        "UNEXPECTED_ERROR",
        "ValueError",
    )
    assert metrics.counter(RUNS_COUNTER) == 1
    assert len(probe.seen) == 1


def test_a_domain_refusal_fails_its_task_as_an_expected_error(
    make_app: AppFactory, redis_prefix: str, runs: Runs
) -> None:
    app, registry = wire(make_app, redis_prefix, Probe(behaviour=refuse), runs)

    with worker(app) as signals:
        result = send(app, registry)
        signals.wait_for_ends(1)
        state = result.state

    [failure] = signals.failures
    error = failure["exception"]
    assert isinstance(error, ScheduledJobRefusedError)
    assert (error.code, error.error_type) == ("REMINDER_NOT_DUE", "DomainError")
    assert isinstance(error, tuple(app.tasks[SYNC].throws))
    assert state == "FAILURE"
    assert [r.outcome for r in runs.records] == ["failed"]


def test_a_timed_out_run_fails_its_task_with_job_timeout(
    make_app: AppFactory, redis_prefix: str, runs: Runs
) -> None:
    def outlive(execution: JobExecution) -> None:
        execution.signal.wait(5)

    app, registry = wire(
        make_app, redis_prefix, Probe(behaviour=outlive), runs, settings={SYNC: {"timeout_ms": 100}}
    )

    with worker(app) as signals:
        send(app, registry)
        signals.wait_for_ends(1)

    [failure] = signals.failures
    assert failure["exception"].code == "JOB_TIMEOUT"
    assert [(r.outcome, r.error_code) for r in runs.records] == [("failed", "JOB_TIMEOUT")]


def test_a_run_that_succeeds_ends_its_task_in_success(
    make_app: AppFactory, redis_prefix: str, runs: Runs
) -> None:
    app, registry = wire(make_app, redis_prefix, Probe(), runs)

    with worker(app) as signals:
        send(app, registry)
        signals.wait_for_ends(1)

    assert (len(signals.successes), signals.failures) == (1, [])


def test_an_occurrence_dropped_unrun_is_missed_and_no_task_failure(
    make_app: AppFactory, redis_prefix: str, runs: Runs
) -> None:
    probe = Probe()
    app, registry = wire(make_app, redis_prefix, probe, runs)

    with worker(app) as signals:
        app.send_task(
            SYNC,
            kwargs=OccurrenceMessage(AT, "corr-late").to_kwargs(),
            queue=registry.jobs[SYNC].queue,
            expires=datetime.now(UTC) - timedelta(seconds=1),
        )
        send(app, registry, "corr-next")
        signals.wait_for_ends(1)

    assert [(r.correlation_id, r.outcome) for r in runs.records] == [
        ("corr-late", "missed"),
        ("corr-next", "succeeded"),
    ]
    assert signals.failures == []


# --- the failure itself, without a worker ---------------------------------------------------


def failed_record(error: BaseException) -> JobRun:
    return not_run(SYNC, AT, Outcome.FAILED, error=error, correlation_id="corr-1")


def raised_by(
    record: JobRun, error: BaseException | None, *, messages: bool = False
) -> BaseException:
    with pytest.raises(ScheduledJobFailedError) as caught:
        raise_if_failed(record, error, messages=messages)
    return caught.value


def frames_of(error: BaseException) -> list[str]:
    """The function names of ``error``'s traceback, outermost first."""
    frames = []
    traceback = error.__traceback__
    while traceback is not None:
        frames.append(traceback.tb_frame.f_code.co_name)
        traceback = traceback.tb_next
    return frames


def raised_in_job() -> ValueError:
    try:
        fail_with_data(None)  # type: ignore[arg-type]
    except ValueError as raised:
        return raised
    raise AssertionError("fail_with_data returned")


def test_without_messages_the_failure_carries_the_job_s_traceback_and_is_not_chained() -> None:
    error = raised_in_job()

    failure = raised_by(failed_record(error), error, messages=False)

    assert failure.__cause__ is None
    assert failure.__suppress_context__
    assert frames_of(failure)[-1] == "fail_with_data"
    assert SECRET not in "".join(format_exception(failure))


def test_with_messages_the_failure_is_chained_to_the_job_s_error_and_its_traceback() -> None:
    error = raised_in_job()

    failure = raised_by(failed_record(error), error, messages=True)

    assert failure.__cause__ is error
    assert frames_of(error)[-1] == "fail_with_data"
    printed = "".join(format_exception(failure))
    assert f"ValueError: {SECRET}" in printed
    assert SECRET not in str(failure)


@pytest.mark.parametrize(
    "error",
    [DomainError("REMINDER_NOT_DUE", SECRET), ValueError(SECRET)],
    ids=["refused", "unexpected"],
)
def test_the_failure_survives_pickle_and_a_json_result_backend_without_the_message(
    make_app: AppFactory, error: BaseException
) -> None:
    failure = raised_by(failed_record(error), error)
    backend = make_app(result_serializer="json", result_backend="cache+memory://").backend

    for copy in (
        pickle.loads(pickle.dumps(failure)),
        backend.exception_to_python(backend.prepare_exception(failure)),
    ):
        assert type(copy) is type(failure)
        assert str(copy) == str(failure)
        assert SECRET not in repr(copy)
    assert pickle.loads(pickle.dumps(failure)).code == failure.code


@pytest.mark.parametrize("outcome", [Outcome.SUCCEEDED, Outcome.MISSED, Outcome.SKIPPED_OVERLAP])
def test_an_outcome_that_is_not_failed_raises_nothing(outcome: Outcome) -> None:
    raise_if_failed(not_run(SYNC, AT, outcome), None, messages=True)


def test_a_per_tenant_failure_names_its_tenant() -> None:
    error = ValueError(SECRET)
    record = failed_record(error)
    record = JobRun(**{**vars_of(record), "tenant_id": "acme"})

    assert str(raised_by(record, error)).endswith(", tenant acme")


def vars_of(record: JobRun) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__dataclass_fields__}


# --- a background job's failed attempt, without a worker ------------------------------------

CHARGE = "celeryfail.charge"
CHARGE_ONCE = "celeryfail.charge-once"
WORKER = "worker1@billing-7"


def charge_the_card() -> None:
    raise ValueError(SECRET)


@background(CHARGE, max_attempts=3, backoff_ms=1, max_backoff_ms=1)
class ChargeJob:
    def run(self, payload: Any, execution: BackgroundJobExecution) -> None:
        charge_the_card()


@background(CHARGE_ONCE, max_attempts=1)
class ChargeOnceJob:
    def run(self, payload: Any, execution: BackgroundJobExecution) -> None:
        charge_the_card()


def background_app(*, messages: bool) -> tuple[Any, BackgroundJobs]:
    app = Celery(f"failures-{uuid.uuid4().hex[:8]}", broker="memory://", set_as_current=False)
    app.conf.ddd_celery_traceback_messages = messages
    clock = SystemClock()
    install_jobs(app, jobs=[], lock=InMemoryLock(clock), clock=clock, environ={})
    registry = install_background_jobs(
        app, jobs=[ChargeJob, ChargeOnceJob], store=InMemoryJobStore()
    )
    return app, registry


def attempt(app: Any, job_id: str, name: str, request: Context) -> BaseException:
    """Run one attempt of ``job_id`` as its task does; what the task raised."""
    with pytest.raises((AttemptFailedError, AttemptsExhaustedError)) as caught:
        background_run_message(app, name, (), {"job_id": job_id}, request=request)
    return caught.value


def test_a_retried_attempt_is_celery_s_retry_chained_to_the_job_s_error() -> None:
    app, registry = background_app(messages=True)
    job_id = registry.queue().enqueue(ChargeJob, {})
    request = Context(hostname=WORKER, retries=0)

    retry = attempt(app, job_id, CHARGE, request)

    job = registry.store.find(job_id, tenant_id=None)
    assert job is not None
    assert isinstance(retry, AttemptFailedError)
    assert isinstance(retry, Retry)  # the task ends in RETRY, Celery sends nothing
    assert (retry.job, retry.code, retry.when) == (CHARGE, "UNEXPECTED_ERROR", job.run_at)
    assert str(retry) == (
        f"{CHARGE} {job_id} attempt 1/3 failed with UNEXPECTED_ERROR (ValueError), "
        f"retried at {iso_ms(job.run_at)}"
    )
    assert isinstance(retry.__cause__, ValueError)
    assert retry.exc is retry.__cause__  # what Flower's task-retried event shows
    assert frames_of(retry.__cause__)[-1] == "charge_the_card"
    assert f"ValueError: {SECRET}" in "".join(format_exception(retry))
    assert request.retries == 0


def test_without_messages_a_retry_carries_the_job_s_frames_and_no_message() -> None:
    app, registry = background_app(messages=False)
    job_id = registry.queue().enqueue(ChargeJob, {})

    retry = attempt(app, job_id, CHARGE, Context(hostname=WORKER, retries=0))

    assert isinstance(retry, AttemptFailedError)
    assert (retry.exc, retry.__cause__, retry.__suppress_context__) == (None, None, True)
    assert frames_of(retry)[-1] == "charge_the_card"
    printed = "".join(format_exception(retry))
    assert "UNEXPECTED_ERROR (ValueError)" in printed
    assert SECRET not in printed


@pytest.mark.parametrize("messages", [True, False], ids=["messages", "no-messages"])
def test_the_attempt_that_kills_the_job_fails_its_task_with_the_job_s_frames(
    messages: bool,
) -> None:
    app, registry = background_app(messages=messages)
    job_id = registry.queue().enqueue(ChargeOnceJob, {})

    failure = attempt(app, job_id, CHARGE_ONCE, Context(hostname=WORKER, retries=0))

    assert isinstance(failure, AttemptsExhaustedError)
    assert not isinstance(failure, Retry)
    assert str(failure) == (
        f"{CHARGE_ONCE} {job_id} attempt 1/1 failed with UNEXPECTED_ERROR (ValueError): dead"
    )
    printed = "".join(format_exception(failure))
    assert "charge_the_card" in printed
    assert (SECRET in printed) is messages
    assert isinstance(failure.__cause__, ValueError) is messages
    if not messages:
        assert frames_of(failure)[-1] == "charge_the_card"


def test_the_task_s_request_counts_retries_and_names_the_worker_of_the_claim() -> None:
    app, registry = background_app(messages=True)
    job_id = registry.queue().enqueue(ChargeJob, {})
    request = Context(hostname=WORKER, retries=0)

    attempt(app, job_id, CHARGE, request)
    second = Context(hostname="worker2@billing-8", retries=0)
    attempt(app, job_id, CHARGE, second)  # a wake-up a millisecond early waits for the backoff

    job = registry.store.find(job_id, tenant_id=None)
    assert job is not None
    assert (request.retries, second.retries) == (0, 1)
    assert [(a.number, a.worker) for a in job.history] == [
        (1, WORKER),
        (2, "worker2@billing-8"),
    ]


def test_an_attempt_failed_error_survives_pickle_with_its_job_code_and_retry_instant() -> None:
    error = AttemptFailedError("m", ValueError("x"), AT, job=CHARGE, code="CARD_DECLINED")

    copy = pickle.loads(pickle.dumps(error))

    assert type(copy) is AttemptFailedError
    assert (str(copy), copy.job, copy.code, copy.when) == ("m", CHARGE, "CARD_DECLINED", AT)
