"""QueueWorker on ManualJobTimers and a fixed clock: the seed's polling worker, specified."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from ddd_celery import BackgroundJobExecution
from ddd_celery.background import (
    BACKGROUND_DURATION_HISTOGRAM,
    BACKGROUND_RUNS_COUNTER,
    AttemptsExhaustedError,
    BackgroundJobRun,
    BackgroundRunDetail,
    InMemoryJobStore,
    JobInterruptedError,
    JobLease,
    JobStatus,
    QueueWorker,
    RunStatus,
    StoredJobQueue,
    report_failed_background_jobs,
)
from ddd_celery.declarations import DeclarationError
from ddd_celery.kernel import (
    DomainError,
    FixedClock,
    FixedExecutionScope,
    InMemoryErrorReporter,
    InMemoryMetrics,
    InMemoryUnitOfWork,
    SequentialIdGenerator,
)
from ddd_celery.scheduling import JobAbortedError, JobTimeoutError
from ddd_celery.testing import ManualJobTimers
from tests.unit.background.conftest import START, TRACEPARENT, plus, work
from tests.unit.background.jobs import (
    CompileStatementsJob,
    Gate,
    ImportPatientsJob,
    ReindexJob,
    SendReceiptJob,
    StatementPayload,
    succeed,
)

POLL_MS = 1_000


class Runs:
    """The ``on_run`` of a spec: every record, with what it raised."""

    def __init__(self) -> None:
        self.records: list[BackgroundJobRun] = []
        self.errors: list[BaseException | None] = []
        self.details: list[BackgroundRunDetail] = []

    def __call__(
        self, run: BackgroundJobRun, error: BaseException | None, detail: BackgroundRunDetail
    ) -> None:
        self.records.append(run)
        self.errors.append(error)
        self.details.append(detail)

    @property
    def statuses(self) -> list[str]:
        return [run.status.value for run in self.records]


class Failing:
    """A sync script that fails its first ``times`` attempts, then succeeds."""

    def __init__(self, times: int, error: Exception | None = None) -> None:
        self.times = times
        self.error = error or RuntimeError("the statement service is down")
        self.executions: list[BackgroundJobExecution] = []

    def __call__(self, payload: Any, execution: BackgroundJobExecution) -> None:
        self.executions.append(execution)
        if len(self.executions) <= self.times:
            raise self.error


@pytest.fixture
def timers(clock: FixedClock) -> ManualJobTimers:
    return ManualJobTimers(clock)


@pytest.fixture
def runs() -> Runs:
    return Runs()


@pytest.fixture
def metrics() -> InMemoryMetrics:
    return InMemoryMetrics()


def top_jitter() -> float:
    """The jitter that keeps each wait at its full backoff, so instants are exact."""
    return 0.999_999


@pytest.fixture
def make_worker(
    *,
    store: InMemoryJobStore,
    clock: FixedClock,
    scope: FixedExecutionScope,
    timers: ManualJobTimers,
    runs: Runs,
    metrics: InMemoryMetrics,
) -> Any:
    def make(**options: Any) -> QueueWorker:
        settings: dict[str, Any] = {
            "store": store,
            "clock": clock,
            "scope": scope,
            "timers": timers,
            "on_run": runs,
            "metrics": metrics,
            "poll_interval_ms": POLL_MS,
            "random": top_jitter,
        }
        settings.update(options)
        return QueueWorker(**settings)

    return make


# -- running and recording ------------------------------------------------------------


async def test_a_due_job_runs_once_and_succeeds(
    jobs: StoredJobQueue, make_worker: Any, runs: Runs, scope: FixedExecutionScope
) -> None:
    seen: list[tuple[Any, BackgroundJobExecution]] = []
    worker = make_worker()
    worker.register(
        CompileStatementsJob, lambda: CompileStatementsJob(lambda p, e: seen.append((p, e)))
    )
    with scope.open(work(tenant="t-1", correlation_id="corr-9")):
        job_id = jobs.enqueue(CompileStatementsJob, {"month": "2026-10"})

    await worker.run_due()
    await worker.run_due()

    [(payload, execution)] = seen
    assert payload == StatementPayload(month="2026-10")
    assert (execution.job_id, execution.attempt, execution.tenant_id) == (job_id, 1, "t-1")
    assert (execution.scheduled_at, execution.enqueued_at, execution.started_at) == (START,) * 3
    assert execution.checkpoint is None
    [run] = runs.records
    assert run == BackgroundJobRun(
        job="ledger.compile-statements",
        job_id=job_id,
        context="ledger",
        queue="ledger",
        attempt=1,
        status=RunStatus.SUCCEEDED,
        scheduled_at=START,
        started_at=START,
        duration_ms=0.0,
        correlation_id="corr-9",
        tenant_id="t-1",
    )
    view = jobs.find(job_id)
    assert view is not None
    assert (view.status, view.attempts) == ("succeeded", 1)


async def test_an_attempt_runs_in_the_scope_of_the_work_that_enqueued_it(
    jobs: StoredJobQueue, make_worker: Any, scope: FixedExecutionScope
) -> None:
    contexts = []
    worker = make_worker()
    worker.register(
        SendReceiptJob, lambda: SendReceiptJob(lambda p, e: contexts.append(scope.current()))
    )
    with scope.open(work(tenant="t-1", correlation_id="corr-7")):
        jobs.enqueue(SendReceiptJob, {})
    jobs.enqueue(SendReceiptJob, {})

    await worker.run_due()

    enqueued_in_work, enqueued_outside = contexts
    assert enqueued_in_work is not None
    assert enqueued_in_work.origin == "background"
    assert str(enqueued_in_work.actor) == "user:u-1"
    assert (enqueued_in_work.correlation_id, enqueued_in_work.tenant_id) == ("corr-7", "t-1")
    assert enqueued_in_work.traceparent == TRACEPARENT
    assert enqueued_in_work.scheduled_at == START
    assert enqueued_outside is not None
    assert str(enqueued_outside.actor) == "system:ledger.send-receipt"
    assert enqueued_outside.correlation_id == "job-2"


async def test_async_and_sync_jobs_both_run(
    jobs: StoredJobQueue, make_worker: Any, runs: Runs
) -> None:
    ran: list[str] = []

    async def index(payload: Any, execution: BackgroundJobExecution) -> None:
        await asyncio.sleep(0)
        ran.append(f"async {payload['index']}")

    worker = make_worker()
    worker.register(ReindexJob, lambda: ReindexJob(index))
    worker.register(SendReceiptJob, lambda: SendReceiptJob(lambda p, e: ran.append("sync")))
    jobs.enqueue(ReindexJob, {"index": "patients"})
    jobs.enqueue(SendReceiptJob, {})

    await worker.run_due()

    assert sorted(ran) == ["async patients", "sync"]
    assert runs.statuses == ["succeeded", "succeeded"]


async def test_a_job_registered_by_name_options_and_run_gets_plain_json(
    jobs: StoredJobQueue, make_worker: Any, runs: Runs
) -> None:
    payloads: list[Any] = []
    worker = make_worker()
    worker.register(
        name="ledger.compile-statements",
        options={"max_attempts": 3},
        run=lambda payload, execution: payloads.append(payload),
    )
    jobs.enqueue(CompileStatementsJob, {"month": "2026-10"})

    await worker.run_due()

    assert payloads == [{"month": "2026-10"}]
    assert runs.statuses == ["succeeded"]


def test_a_job_is_registered_once(make_worker: Any) -> None:
    worker = make_worker()
    worker.register(SendReceiptJob, lambda: SendReceiptJob(succeed))

    with pytest.raises(DeclarationError, match="already registered"):
        worker.register(name="ledger.send-receipt", run=succeed)
    with pytest.raises(DeclarationError, match="not both"):
        worker.register(SendReceiptJob, name="ledger.send-receipt")


@pytest.mark.parametrize("concurrency", [0, -1, True, {"ledger": 0}, {"default": 1.5}])
def test_a_concurrency_out_of_its_values_is_refused(make_worker: Any, concurrency: Any) -> None:
    with pytest.raises(ValueError, match="concurrency is an int >= 1"):
        make_worker(concurrency=concurrency)


def test_each_queue_takes_its_concurrency_or_the_default(make_worker: Any) -> None:
    worker = make_worker(concurrency={"ledger": 4, "default": 2})
    worker.register(SendReceiptJob, lambda: SendReceiptJob(succeed))
    worker.register(ReindexJob, lambda: ReindexJob(Gate()))

    assert worker.queues == {"ledger": 4, "slow": 2}


# -- retries, dead, retry_dead -------------------------------------------------------


async def test_a_failing_job_is_retried_after_its_backoff_until_dead_and_retry_dead_revives_it(
    jobs: StoredJobQueue, make_worker: Any, runs: Runs, clock: FixedClock
) -> None:
    script = Failing(times=3)
    worker = make_worker()
    worker.register(CompileStatementsJob, lambda: CompileStatementsJob(script))
    job_id = jobs.enqueue(CompileStatementsJob, {"month": "2026-10"})

    await worker.run_due()
    clock.advance(999)
    await worker.run_due()
    assert runs.statuses == ["retried"]
    assert runs.records[0].retry_at == plus(1_000)
    clock.advance(1)
    await worker.run_due()
    clock.advance(2_000)
    await worker.run_due()

    assert runs.statuses == ["retried", "retried", "dead"]
    assert [run.attempt for run in runs.records] == [1, 2, 3]
    assert [run.scheduled_at for run in runs.records] == [START, plus(1_000), plus(3_000)]
    assert {run.error_code for run in runs.records} == {"UNEXPECTED_ERROR"}
    assert {run.error_type for run in runs.records} == {"RuntimeError"}
    dead_error = runs.errors[2]
    assert isinstance(dead_error, AttemptsExhaustedError)
    assert dead_error.code == "ATTEMPTS_EXHAUSTED"
    assert dead_error.__cause__ is script.error
    view = jobs.find(job_id)
    assert view is not None
    assert (view.status, view.attempts, view.last_error_code) == ("dead", 3, "UNEXPECTED_ERROR")

    assert jobs.retry_dead(job_id) is True
    await worker.run_due()

    assert runs.statuses[-1] == "succeeded"
    assert runs.records[-1].attempt == 1
    view = jobs.find(job_id)
    assert view is not None
    assert view.status == "succeeded"


async def test_progress_and_checkpoint_are_carried_to_the_next_attempt(
    jobs: StoredJobQueue, make_worker: Any, clock: FixedClock
) -> None:
    checkpoints: list[Any] = []

    def compile_in_steps(payload: Any, execution: BackgroundJobExecution) -> None:
        checkpoints.append(execution.checkpoint)
        done = (execution.checkpoint or {}).get("done", 0) + 10
        execution.report_progress({"done": done, "of": 20})
        execution.save_checkpoint({"done": done})
        if done < 20:
            raise RuntimeError("the statement service dropped the connection")

    worker = make_worker()
    worker.register(CompileStatementsJob, lambda: CompileStatementsJob(compile_in_steps))
    job_id = jobs.enqueue(CompileStatementsJob, {"month": "2026-10"})

    await worker.run_due()
    view = jobs.find(job_id)
    assert view is not None
    assert (view.status, view.progress) == ("failed", {"done": 10, "of": 20})
    clock.advance(1_000)
    await worker.run_due()

    assert checkpoints == [None, {"done": 10}]
    view = jobs.find(job_id)
    assert view is not None
    assert (view.status, view.progress) == ("succeeded", {"done": 20, "of": 20})


async def test_a_domain_error_is_recorded_with_its_code_and_not_reported(
    jobs: StoredJobQueue, make_worker: Any, runs: Runs
) -> None:
    reporter = InMemoryErrorReporter()
    refusal = DomainError("STATEMENT_ALREADY_SENT", "the statement of 2026-10 was sent")
    worker = make_worker(
        on_run=lambda run, error, detail: (
            runs(run, error, detail),
            report_failed_background_jobs(reporter)(run, error, detail),
        )
    )
    worker.register(SendReceiptJob, lambda: SendReceiptJob(Failing(1, refusal)))
    jobs.enqueue(SendReceiptJob, {})

    await worker.run_due()

    [run] = runs.records
    assert (run.status, run.error_code, run.error_type) == (
        RunStatus.DEAD,
        "STATEMENT_ALREADY_SENT",
        "DomainError",
    )
    assert reporter.reported == []


async def test_an_unexpected_failure_is_reported_at_each_attempt(
    jobs: StoredJobQueue, make_worker: Any, clock: FixedClock
) -> None:
    reporter = InMemoryErrorReporter()
    worker = make_worker(on_run=report_failed_background_jobs(reporter))
    script = Failing(times=5)
    worker.register(SendReceiptJob, lambda: SendReceiptJob(script))
    job_id = jobs.enqueue(SendReceiptJob, {})

    await worker.run_due()

    [(error, context)] = reporter.reported
    assert isinstance(error, AttemptsExhaustedError)
    assert error.__cause__ is script.error
    assert context["job_id"] == job_id
    assert (context["status"], context["error_code"]) == ("dead", "UNEXPECTED_ERROR")


async def test_a_payload_that_no_longer_validates_is_dead_at_once(
    store: InMemoryJobStore, make_worker: Any, runs: Runs, jobs: StoredJobQueue
) -> None:
    ran: list[Any] = []
    worker = make_worker()
    worker.register(CompileStatementsJob, lambda: CompileStatementsJob(lambda p, e: ran.append(p)))
    job_id = jobs.enqueue(CompileStatementsJob, {"month": "2026-10"})
    store._jobs[job_id].payload = '{"month": "October"}'  # as kept, JSON text

    await worker.run_due()

    assert ran == []
    [run] = runs.records
    assert (run.status, run.error_code, run.error_type) == (
        RunStatus.DEAD,
        "INVALID_ENQUEUE",
        "InvalidEnqueueError",
    )
    assert not isinstance(runs.errors[0], AttemptsExhaustedError)


def _fields(job: Any) -> dict[str, Any]:
    return {name: getattr(job, name) for name in job.__dataclass_fields__}


# -- polling, delays, concurrency ------------------------------------------------------------


async def test_a_started_worker_polls_each_interval_and_runs_a_delayed_job_at_its_instant(
    jobs: StoredJobQueue, make_worker: Any, runs: Runs, timers: ManualJobTimers
) -> None:
    executions: list[BackgroundJobExecution] = []
    worker = make_worker()
    worker.register(SendReceiptJob, lambda: SendReceiptJob(lambda p, e: executions.append(e)))
    await worker.start()
    job_id = jobs.enqueue(SendReceiptJob, {}, delay_ms=10_000)

    await timers.advance(9_999)
    assert executions == []
    await timers.advance(1)
    await worker.stop()

    [execution] = executions
    assert (execution.job_id, execution.scheduled_at, execution.started_at) == (
        job_id,
        plus(10_000),
        plus(10_000),
    )


async def test_a_job_enqueued_while_idle_runs_at_the_next_poll(
    jobs: StoredJobQueue, make_worker: Any, runs: Runs, timers: ManualJobTimers
) -> None:
    worker = make_worker()
    worker.register(SendReceiptJob, lambda: SendReceiptJob(succeed))
    await worker.start()
    await timers.advance(300)
    jobs.enqueue(SendReceiptJob, {})

    await timers.advance(699)
    assert runs.records == []
    await timers.advance(1)
    await worker.stop()

    assert [run.started_at for run in runs.records] == [plus(1_000)]


async def test_a_queue_runs_at_most_its_concurrency_and_claims_again_when_a_slot_frees(
    jobs: StoredJobQueue, make_worker: Any, runs: Runs, timers: ManualJobTimers
) -> None:
    gates = [Gate() for _ in range(5)]
    handed = iter(gates)
    worker = make_worker(concurrency={"ledger": 2, "default": 1})
    worker.register(ImportPatientsJob, lambda: ImportPatientsJob(next(handed)))
    for index in range(5):
        jobs.enqueue(ImportPatientsJob, {"n": index})
    await worker.start()
    await timers.settle()

    assert [len(gate.started) for gate in gates] == [1, 1, 0, 0, 0]
    gates[0].open()
    await timers.settle()

    assert [len(gate.started) for gate in gates] == [1, 1, 1, 0, 0]
    for gate in gates:
        gate.open()
    await timers.advance(0)
    await worker.stop()
    assert runs.statuses == ["succeeded"] * 5
    assert {run.started_at for run in runs.records} == {START}


async def test_a_job_of_a_queue_the_worker_does_not_know_is_given_back(
    jobs: StoredJobQueue,
    make_worker: Any,
    store: InMemoryJobStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    worker = make_worker()
    worker.register(name="ledger.other-job", run=succeed)
    job_id = jobs.enqueue(SendReceiptJob, {})

    with caplog.at_level(logging.ERROR, logger="ddd_celery.background"):
        await worker.run_due()

    job = store.find(job_id, tenant_id=None)
    assert job is not None
    assert (job.status, job.attempts) == (JobStatus.QUEUED, 0)
    [record] = caplog.records
    assert record.error_type == "UnknownBackgroundJobError"  # type: ignore[attr-defined]


async def test_the_job_of_a_dead_worker_is_handed_back_when_its_lease_expires(
    jobs: StoredJobQueue, make_worker: Any, store: InMemoryJobStore, clock: FixedClock, runs: Runs
) -> None:
    job_id = jobs.enqueue(SendReceiptJob, {})
    assert store.claim_job(job_id, now=clock.now(), lease_ms=5_000) is not None  # then it died
    ran: list[int] = []
    worker = make_worker()
    worker.register(
        name="ledger.send-receipt",
        options={"max_attempts": 2},
        run=lambda p, e: ran.append(e.attempt),
    )
    store._jobs[job_id].job = store._jobs[job_id].job.__class__(
        **{**_fields(store._jobs[job_id].job), "max_attempts": 2}
    )

    await worker.run_due()
    assert ran == []
    clock.advance(5_001)
    await worker.run_due()

    assert ran == [2]


# -- cancel, timeout, stop ------------------------------------------------------------


async def test_a_cancelled_queued_job_never_runs(
    jobs: StoredJobQueue, make_worker: Any, runs: Runs
) -> None:
    worker = make_worker()
    worker.register(SendReceiptJob, lambda: SendReceiptJob(succeed))
    job_id = jobs.enqueue(SendReceiptJob, {})

    assert jobs.cancel(job_id) is True
    await worker.run_due()

    assert runs.records == []


async def test_cancelling_a_running_job_aborts_its_signal_at_the_next_heartbeat(
    jobs: StoredJobQueue, make_worker: Any, runs: Runs, timers: ManualJobTimers
) -> None:
    gate = Gate()
    worker = make_worker(lease_ms=3_000)
    worker.register(ImportPatientsJob, lambda: ImportPatientsJob(gate))
    job_id = jobs.enqueue(ImportPatientsJob, {})
    await worker.start()
    await timers.settle()
    [execution] = gate.started

    assert jobs.cancel(job_id) is True
    await timers.advance(999)
    assert not execution.signal.aborted
    await timers.advance(1)

    assert isinstance(execution.signal.reason, JobInterruptedError)
    assert runs.statuses == ["interrupted"]
    assert (runs.records[0].error_code, runs.records[0].duration_ms) == ("JOB_INTERRUPTED", 1_000.0)
    view = jobs.find(job_id)
    assert view is not None
    assert view.status == "cancelled"
    gate.open()
    await worker.stop()


async def test_an_attempt_past_its_timeout_is_aborted_and_retried(
    jobs: StoredJobQueue, make_worker: Any, runs: Runs, timers: ManualJobTimers
) -> None:
    gate = Gate()
    worker = make_worker()
    worker.register(ReindexJob, lambda: ReindexJob(gate))
    job_id = jobs.enqueue(ReindexJob, {})
    await worker.start()

    await timers.advance(4_999)
    assert runs.records == []
    await timers.advance(1)

    [execution] = gate.started
    assert isinstance(execution.signal.reason, JobTimeoutError)
    [run] = runs.records
    assert (run.status, run.error_code, run.duration_ms) == (
        RunStatus.RETRIED,
        "JOB_TIMEOUT",
        5_000.0,
    )
    view = jobs.find(job_id)
    assert view is not None
    assert (view.status, view.last_error_code, view.run_at) == (
        "failed",
        "JOB_TIMEOUT",
        plus(6_000),
    )
    gate.open()
    await worker.stop()


async def test_stop_waits_for_the_attempts_in_progress_within_its_grace(
    jobs: StoredJobQueue, make_worker: Any, runs: Runs, timers: ManualJobTimers
) -> None:
    gate = Gate()
    worker = make_worker(grace_ms=30_000)
    worker.register(ImportPatientsJob, lambda: ImportPatientsJob(gate))
    jobs.enqueue(ImportPatientsJob, {})
    await worker.start()
    await timers.settle()

    stopping = asyncio.ensure_future(worker.stop())
    await timers.advance(29_999)
    assert not stopping.done()
    gate.open()
    await timers.settle()

    assert stopping.done()
    assert runs.statuses == ["succeeded"]


async def test_an_attempt_still_running_after_the_grace_is_aborted_and_released_uncounted(
    jobs: StoredJobQueue, make_worker: Any, runs: Runs, timers: ManualJobTimers
) -> None:
    gate = Gate()
    worker = make_worker(grace_ms=30_000)
    worker.register(ImportPatientsJob, lambda: ImportPatientsJob(gate))
    job_id = jobs.enqueue(ImportPatientsJob, {})
    await worker.start()
    await timers.settle()

    await timers.run_until(worker.stop())

    [execution] = gate.started
    assert isinstance(execution.signal.reason, JobAbortedError)
    [run] = runs.records
    assert (run.status, run.error_code, run.duration_ms) == (
        RunStatus.RELEASED,
        "JOB_ABORTED",
        30_000.0,
    )
    view = jobs.find(job_id)
    assert view is not None
    assert (view.status, view.attempts, view.run_at) == ("queued", 0, plus(30_000))
    gate.open()


async def test_stop_claims_nothing_more(
    jobs: StoredJobQueue, make_worker: Any, runs: Runs, timers: ManualJobTimers
) -> None:
    worker = make_worker()
    worker.register(SendReceiptJob, lambda: SendReceiptJob(succeed))
    await worker.start()
    await worker.stop()
    jobs.enqueue(SendReceiptJob, {})

    await timers.advance(10 * POLL_MS)

    assert runs.records == []
    await worker.stop()  # a second stop does nothing


async def test_a_worker_is_started_once(make_worker: Any) -> None:
    worker = make_worker()
    await worker.start()

    with pytest.raises(RuntimeError, match="already started"):
        await worker.start()
    await worker.stop()


# -- unit of work, idempotency, observability ---------------------------------------------


async def test_a_job_enqueued_in_a_unit_of_work_runs_only_if_it_commits(
    clock: FixedClock, scope: FixedExecutionScope, make_worker: Any, runs: Runs
) -> None:
    unit_of_work = InMemoryUnitOfWork()
    store = InMemoryJobStore(unit_of_work=unit_of_work)
    jobs = StoredJobQueue(
        store=store,
        clock=clock,
        ids=SequentialIdGenerator(),
        scope=scope,
        unit_of_work=unit_of_work,
    )
    worker = make_worker(store=store)
    worker.register(SendReceiptJob, lambda: SendReceiptJob(succeed))

    def use_case(fails: bool) -> str:
        with unit_of_work.begin():
            job_id = jobs.enqueue(SendReceiptJob, {})
            if fails:
                raise RuntimeError("the use case fails")
            return job_id

    with pytest.raises(RuntimeError, match="the use case fails"):
        use_case(fails=True)
    committed = use_case(fails=False)
    await worker.run_due()

    assert [run.job_id for run in runs.records] == [committed]


async def test_the_same_idempotency_key_runs_once(
    jobs: StoredJobQueue, make_worker: Any, runs: Runs, scope: FixedExecutionScope
) -> None:
    worker = make_worker()
    worker.register(SendReceiptJob, lambda: SendReceiptJob(succeed))
    with scope.open(work(tenant="t-1")):
        jobs.enqueue(SendReceiptJob, {}, idempotency_key="receipt-1")
        jobs.enqueue(SendReceiptJob, {}, idempotency_key="receipt-1")

    await worker.run_due()

    assert runs.statuses == ["succeeded"]


async def test_each_attempt_is_counted_timed_and_logged_without_the_error_message(
    *,
    jobs: StoredJobQueue,
    make_worker: Any,
    metrics: InMemoryMetrics,
    clock: FixedClock,
    caplog: pytest.LogCaptureFixture,
    scope: FixedExecutionScope,
) -> None:
    script = Failing(1, KeyError("card 4111"))
    worker = make_worker()
    worker.register(CompileStatementsJob, lambda: CompileStatementsJob(script))
    with scope.open(work(tenant="t-1", correlation_id="corr-3")):
        job_id = jobs.enqueue(CompileStatementsJob, {"month": "2026-10"})

    with caplog.at_level(logging.DEBUG, logger="ddd_celery.background"):
        await worker.run_due()
        clock.advance(1_000)
        await worker.run_due()

    assert [(r.getMessage(), r.levelname) for r in caplog.records] == [
        ("Background job failed, retrying", "WARNING"),
        ("Background job succeeded", "INFO"),
    ]
    failed = caplog.records[0]
    assert {
        key: getattr(failed, key)
        for key in (
            "job",
            "job_id",
            "context",
            "attempt",
            "status",
            "duration_ms",
            "error_code",
            "error_type",
            "correlation_id",
            "tenant_id",
        )
    } == {
        "job": "ledger.compile-statements",
        "job_id": job_id,
        "context": "ledger",
        "attempt": 1,
        "status": "retried",
        "duration_ms": 0.0,
        "error_code": "UNEXPECTED_ERROR",
        "error_type": "KeyError",
        "correlation_id": "corr-3",
        "tenant_id": "t-1",
    }
    assert "4111" not in caplog.text
    labels = {"job": "ledger.compile-statements", "context": "ledger"}
    assert (
        metrics.counter(
            BACKGROUND_RUNS_COUNTER, **labels, status="retried", error_code="UNEXPECTED_ERROR"
        )
        == 1
    )
    assert (
        metrics.counter(BACKGROUND_RUNS_COUNTER, **labels, status="succeeded", error_code="") == 1
    )
    assert metrics.observations(BACKGROUND_DURATION_HISTOGRAM, **labels) == [0.0, 0.0]


async def test_an_async_job_that_cancels_itself_fails_and_frees_its_slot(
    jobs: StoredJobQueue, make_worker: Any, runs: Runs
) -> None:
    async def give_up(payload: Any, execution: BackgroundJobExecution) -> None:
        raise asyncio.CancelledError

    worker = make_worker()
    worker.register(ImportPatientsJob, lambda: ImportPatientsJob(give_up))
    jobs.enqueue(ImportPatientsJob, {})
    jobs.enqueue(ImportPatientsJob, {})

    await worker.run_due()

    assert runs.statuses == ["retried", "retried"]
    assert {run.error_type for run in runs.records} == {"CancelledError"}


async def test_a_job_registered_after_the_start_has_its_queue_polled(
    jobs: StoredJobQueue, make_worker: Any, runs: Runs, timers: ManualJobTimers
) -> None:
    worker = make_worker()
    worker.register(SendReceiptJob, lambda: SendReceiptJob(succeed))
    await worker.start()
    worker.register(ReindexJob, lambda: ReindexJob(_done))
    jobs.enqueue(ReindexJob, {})

    await timers.advance(POLL_MS)
    await worker.stop()

    assert [(run.job, run.queue) for run in runs.records] == [("ledger.reindex", "slow")]


async def _done(payload: Any, execution: BackgroundJobExecution) -> None:
    return None


async def test_a_long_attempt_keeps_its_lease_by_its_heartbeats(
    jobs: StoredJobQueue, make_worker: Any, runs: Runs, timers: ManualJobTimers
) -> None:
    gate = Gate()
    worker = make_worker(lease_ms=3_000)
    worker.register(ImportPatientsJob, lambda: ImportPatientsJob(gate))
    job_id = jobs.enqueue(ImportPatientsJob, {})
    await worker.start()

    await timers.advance(10_000)
    gate.open()
    await timers.settle()
    await worker.stop()

    assert len(gate.started) == 1
    assert [(run.status.value, run.attempt) for run in runs.records] == [("succeeded", 1)]
    view = jobs.find(job_id)
    assert view is not None
    assert (view.status, view.attempts) == ("succeeded", 1)


async def test_two_workers_on_one_store_run_each_job_once(
    jobs: StoredJobQueue, make_worker: Any, runs: Runs, timers: ManualJobTimers
) -> None:
    ran: list[tuple[str, int]] = []

    def script(name: str) -> Any:
        async def run(payload: Any, execution: BackgroundJobExecution) -> None:
            await asyncio.sleep(0)
            ran.append((name, payload["n"]))

        return run

    first, second = make_worker(concurrency=3), make_worker(concurrency=3)
    first.register(ImportPatientsJob, lambda: ImportPatientsJob(script("first")))
    second.register(ImportPatientsJob, lambda: ImportPatientsJob(script("second")))
    await first.start()
    await second.start()
    for index in range(20):
        jobs.enqueue(ImportPatientsJob, {"n": index})

    await timers.advance(POLL_MS)
    await first.stop()
    await second.stop()

    assert sorted(n for _, n in ran) == list(range(20))
    assert {name for name, _ in ran} == {"first", "second"}
    assert runs.statuses == ["succeeded"] * 20


# -- a store cut off, a job not known ---------------------------------------------------


class CutOffStore(InMemoryJobStore):
    """The in-memory store whose renewals fail while ``cut``, as a store the network cut off."""

    def __init__(self) -> None:
        super().__init__()
        self.cut = False

    def heartbeat(self, lease: JobLease, *, now: datetime, lease_ms: int) -> JobLease:
        if self.cut:
            raise ConnectionError("the store cannot be asked")
        return super().heartbeat(lease, now=now, lease_ms=lease_ms)


def on_the_clock(clock: FixedClock) -> Callable[[], float]:
    """A monotonic clock in seconds that moves with the fixed clock, as the timers do."""

    def monotonic() -> float:
        return (clock.now() - START).total_seconds()

    return monotonic


@pytest.mark.parametrize(("answered_beats", "aborted_at"), [(0, 3_000), (2, 5_000)])
async def test_an_attempt_none_of_whose_renewals_reaches_the_store_for_the_lease_aborts_itself(
    answered_beats: int,
    aborted_at: int,
    *,
    clock: FixedClock,
    make_worker: Any,
    runs: Runs,
    timers: ManualJobTimers,
) -> None:
    store = CutOffStore()
    jobs = StoredJobQueue(
        store=store,
        clock=clock,
        ids=SequentialIdGenerator("job-"),
        scope=FixedExecutionScope(),
        declarations=[ImportPatientsJob],
    )
    gate = Gate()
    worker = make_worker(store=store, lease_ms=3_000, monotonic=on_the_clock(clock))
    worker.register(ImportPatientsJob, lambda: ImportPatientsJob(gate))
    job_id = jobs.enqueue(ImportPatientsJob, {})
    await worker.start()
    await timers.settle()
    [execution] = gate.started
    await timers.advance(answered_beats * 1_000)  # renewals every third of the lease
    store.cut = True

    await timers.advance(aborted_at - answered_beats * 1_000 - 1)
    assert not execution.signal.aborted
    await timers.advance(1)

    assert isinstance(execution.signal.reason, JobInterruptedError)
    assert "could not renew its lease within lease_ms=3000" in str(execution.signal.reason)
    assert runs.statuses == ["interrupted"]
    job = store.find(job_id, tenant_id=None)
    assert job is not None
    assert job.status is JobStatus.RUNNING  # the store was told nothing: its lease runs out
    gate.open()
    await worker.stop()


async def test_a_job_the_worker_does_not_know_is_given_back_at_every_poll_and_logged_once(
    jobs: StoredJobQueue,
    make_worker: Any,
    timers: ManualJobTimers,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ran: list[Any] = []
    worker = make_worker(concurrency=1)
    worker.register(CompileStatementsJob, lambda: CompileStatementsJob(lambda p, e: ran.append(p)))
    unknown = jobs.enqueue(SendReceiptJob, {})  # the same queue, ledger; not registered here
    with caplog.at_level(logging.ERROR, logger="ddd_celery.background"):
        await worker.start()
        await timers.advance(5 * POLL_MS)
        jobs.enqueue(CompileStatementsJob, {"month": "2026-10"})
        await timers.advance(2 * POLL_MS)  # given back, the unknown job is due after it
        await worker.stop()

    refusals = [r for r in caplog.records if getattr(r, "job", None) == "ledger.send-receipt"]
    assert len(refusals) == 1
    assert ran == [StatementPayload(month="2026-10")], "the queue goes on past the unknown job"
    view = jobs.find(unknown)
    assert view is not None
    assert (view.status, view.attempts) == ("queued", 0)
