"""A failed run is a failed Celery task: ``task_failure`` fires, the state is FAILURE, no retry.

On a real worker (in this process, solo pool) over Redis, with a Redis result backend under the
test's prefix; the outcome is still recorded exactly once, and what Celery sees never quotes
the error's message.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery.contrib.testing.worker import start_worker
from celery.signals import task_failure, task_retry, task_success
from celery_support import WAIT_S, AppFactory, Runs
from probe_jobs import SYNC, AsyncProbeJob, Probe, SyncProbeJob
from services import REDIS_URL

from ddd_celery.celery import CeleryJobs, OccurrenceMessage, install_jobs
from ddd_celery.celery.tasks import (
    ScheduledJobFailedError,
    ScheduledJobRefusedError,
    raise_if_failed,
)
from ddd_celery.declarations import JobExecution
from ddd_celery.kernel import (
    DomainError,
    InMemoryLock,
    InMemoryMetrics,
    SequentialIdGenerator,
    SystemClock,
)
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
    make_app: AppFactory, redis_prefix: str, probe: Probe, runs: Runs, **overrides: Any
) -> tuple[Any, CeleryJobs]:
    app = make_app(
        result_backend=REDIS_URL,
        result_backend_transport_options={"global_keyprefix": redis_prefix},
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


def test_a_run_that_raises_fails_its_task_once_with_its_code_and_type_never_its_message(
    make_app: AppFactory, redis_prefix: str, runs: Runs
) -> None:
    probe = Probe(behaviour=fail_with_data)
    metrics = InMemoryMetrics()
    app, registry = wire(make_app, redis_prefix, probe, runs, metrics=metrics)

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
    assert SECRET not in failure["einfo"].traceback
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


def raised_by(record: JobRun, error: BaseException | None) -> BaseException:
    with pytest.raises(ScheduledJobFailedError) as caught:
        raise_if_failed(record, error)
    return caught.value


def test_the_failure_carries_the_job_s_traceback_and_is_not_chained_to_its_error() -> None:
    try:
        fail_with_data(None)  # type: ignore[arg-type]
    except ValueError as raised:
        error = raised

    failure = raised_by(failed_record(error), error)

    assert failure.__cause__ is None
    assert failure.__suppress_context__
    frames = []
    traceback = failure.__traceback__
    while traceback is not None:
        frames.append(traceback.tb_frame.f_code.co_name)
        traceback = traceback.tb_next
    assert frames[-1] == "fail_with_data"


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
    raise_if_failed(not_run(SYNC, AT, outcome), None)


def test_a_per_tenant_failure_names_its_tenant() -> None:
    error = ValueError(SECRET)
    record = failed_record(error)
    record = JobRun(**{**vars_of(record), "tenant_id": "acme"})

    assert str(raised_by(record, error)).endswith(", tenant acme")


def vars_of(record: JobRun) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__dataclass_fields__}
