"""The attempt API both drivers share: run_claimed(_sync), renew_lease, conclude."""

from __future__ import annotations

import asyncio
import random
import threading
from typing import Any

import pytest

from ddd_celery import BackgroundJobExecution
from ddd_celery.background import (
    AttemptEnd,
    AttemptOutcome,
    AttemptsExhaustedError,
    BackgroundRegistration,
    ClaimedJob,
    InMemoryJobStore,
    JobInterruptedError,
    JobStatus,
    QueueWorker,
    RunStatus,
    StoredJobQueue,
    conclude,
    registration_of,
    renew_lease,
    run_claimed,
    run_claimed_sync,
)
from ddd_celery.background.attempt import BACKGROUND_ORIGIN
from ddd_celery.declarations import DeclarationError
from ddd_celery.kernel import AbortController, FixedClock, FixedExecutionScope
from ddd_celery.scheduling import JobAbortedError, JobTimeoutError
from tests.unit.background.conftest import START, plus, work
from tests.unit.background.jobs import (
    CompileStatementsJob,
    ImportPatientsJob,
    SendReceiptJob,
    StatementPayload,
)

LEASE_MS = 30_000


class StatementServiceTimeout(Exception):
    """What a driver's own time limit raises in the job (Celery's SoftTimeLimitExceeded)."""


def claim(store: InMemoryJobStore, job_id: str, clock: FixedClock) -> ClaimedJob:
    claimed = store.claim_job(job_id, now=clock.now(), lease_ms=LEASE_MS)
    assert claimed is not None
    return claimed


def run_sync(
    claimed: ClaimedJob,
    registration: BackgroundRegistration,
    *,
    store: InMemoryJobStore,
    clock: FixedClock,
    scope: FixedExecutionScope,
    controller: AbortController | None = None,
    **options: Any,
) -> AttemptOutcome:
    return run_claimed_sync(
        claimed,
        registration,
        scope=scope,
        clock=clock,
        store=store,
        controller=controller or AbortController(),
        **options,
    )


def finish(
    store: InMemoryJobStore, claimed: ClaimedJob, outcome: AttemptOutcome, clock: FixedClock
) -> Any:
    options = registration_of(CompileStatementsJob).options
    return conclude(store, claimed, outcome, options=options, now=clock.now(), random=lambda: 0.0)


def test_the_sync_twin_runs_a_sync_job_in_this_thread_in_its_scope(
    jobs: StoredJobQueue, store: InMemoryJobStore, clock: FixedClock, scope: FixedExecutionScope
) -> None:
    seen: list[Any] = []

    def script(payload: Any, execution: BackgroundJobExecution) -> None:
        seen.append((threading.get_ident(), scope.current(), payload))

    with scope.open(work(tenant="t-1", correlation_id="corr-5")):
        job_id = jobs.enqueue(CompileStatementsJob, {"month": "2026-10"})
    claimed = claim(store, job_id, clock)

    outcome = run_sync(
        claimed,
        registration_of(CompileStatementsJob, lambda: CompileStatementsJob(script)),
        store=store,
        clock=clock,
        scope=scope,
    )

    [(thread, context, payload)] = seen
    assert thread == threading.get_ident()
    assert context.origin == BACKGROUND_ORIGIN
    assert (context.correlation_id, context.tenant_id) == ("corr-5", "t-1")
    assert context.deadline is None
    assert payload == StatementPayload(month="2026-10")
    assert (outcome.end, outcome.error) == (AttemptEnd.SUCCEEDED, None)
    assert scope.current() is None


def test_the_sync_twin_runs_an_async_job_on_its_own_loop(
    jobs: StoredJobQueue, store: InMemoryJobStore, clock: FixedClock, scope: FixedExecutionScope
) -> None:
    seen: list[Any] = []

    async def script(payload: Any, execution: BackgroundJobExecution) -> None:
        await asyncio.sleep(0)
        seen.append((scope.current(), execution.attempt))

    job_id = jobs.enqueue(ImportPatientsJob, {"batch": 1})

    outcome = run_sync(
        claim(store, job_id, clock),
        registration_of(ImportPatientsJob, lambda: ImportPatientsJob(script)),
        store=store,
        clock=clock,
        scope=scope,
    )

    [(context, attempt)] = seen
    assert (context.origin, attempt) == (BACKGROUND_ORIGIN, 1)
    assert outcome.end is AttemptEnd.SUCCEEDED


def test_a_job_with_a_timeout_runs_under_its_deadline(
    jobs: StoredJobQueue, store: InMemoryJobStore, clock: FixedClock, scope: FixedExecutionScope
) -> None:
    deadlines: list[Any] = []
    job_id = jobs.enqueue("ledger.reindex", {})

    async def script(payload: Any, execution: BackgroundJobExecution) -> None:
        context = scope.current()
        deadlines.append(None if context is None else context.deadline)

    registration = BackgroundRegistration.of_callable(
        name="ledger.reindex", run=script, options={"timeout_ms": 5_000}
    )
    run_sync(claim(store, job_id, clock), registration, store=store, clock=clock, scope=scope)

    assert deadlines == [plus(5_000)]


def test_a_driver_time_limit_raised_in_the_job_is_a_timeout(
    jobs: StoredJobQueue, store: InMemoryJobStore, clock: FixedClock, scope: FixedExecutionScope
) -> None:
    def script(payload: Any, execution: BackgroundJobExecution) -> None:
        raise StatementServiceTimeout

    job_id = jobs.enqueue(SendReceiptJob, {})
    controller = AbortController()

    outcome = run_sync(
        claim(store, job_id, clock),
        registration_of(SendReceiptJob, lambda: SendReceiptJob(script)),
        store=store,
        clock=clock,
        scope=scope,
        controller=controller,
        timeout_errors=(StatementServiceTimeout,),
    )

    assert outcome.end is AttemptEnd.FAILED
    assert isinstance(outcome.error, JobTimeoutError)
    assert isinstance(outcome.error.__cause__, StatementServiceTimeout)
    assert controller.signal.reason is outcome.error


async def test_the_async_form_calls_a_sync_job_through_the_drivers_caller(
    jobs: StoredJobQueue, store: InMemoryJobStore, clock: FixedClock, scope: FixedExecutionScope
) -> None:
    called: list[str] = []

    async def call_sync(work: Any) -> Any:
        called.append("through the caller")
        return work()

    job_id = jobs.enqueue(SendReceiptJob, {})
    outcome = await run_claimed(
        claim(store, job_id, clock),
        registration_of(SendReceiptJob, lambda: SendReceiptJob(lambda p, e: called.append("ran"))),
        scope=scope,
        clock=clock,
        store=store,
        controller=AbortController(),
        call_sync=call_sync,
    )

    assert called == ["through the caller", "ran"]
    assert outcome.end is AttemptEnd.SUCCEEDED


@pytest.mark.parametrize(
    ("reason", "end"),
    [
        (JobAbortedError("stopping"), AttemptEnd.RELEASED),
        (JobInterruptedError("cancelled"), AttemptEnd.INTERRUPTED),
        (JobTimeoutError("late"), AttemptEnd.FAILED),
    ],
)
def test_once_the_signal_is_aborted_its_reason_decides_even_if_the_job_returns(
    *,
    jobs: StoredJobQueue,
    store: InMemoryJobStore,
    clock: FixedClock,
    scope: FixedExecutionScope,
    reason: BaseException,
    end: AttemptEnd,
) -> None:
    controller = AbortController()

    def script(payload: Any, execution: BackgroundJobExecution) -> None:
        controller.abort(reason)

    job_id = jobs.enqueue(SendReceiptJob, {})
    outcome = run_sync(
        claim(store, job_id, clock),
        registration_of(SendReceiptJob, lambda: SendReceiptJob(script)),
        store=store,
        clock=clock,
        scope=scope,
        controller=controller,
    )

    assert (outcome.end, outcome.error) == (end, reason)


def test_a_released_attempt_gives_the_job_back_uncounted(
    jobs: StoredJobQueue, store: InMemoryJobStore, clock: FixedClock
) -> None:
    job_id = jobs.enqueue(CompileStatementsJob, {"month": "2026-10"})
    claimed = claim(store, job_id, clock)
    clock.advance(2_000)
    outcome = AttemptOutcome.abandoned(
        JobAbortedError("stopping"), started_at=START, ended_at=clock.now()
    )

    conclusion = finish(store, claimed, outcome, clock)

    assert (conclusion.run.status, conclusion.run.duration_ms) == (RunStatus.RELEASED, 2_000.0)
    job = store.find(job_id, tenant_id=None)
    assert job is not None
    assert (job.status, job.attempts, job.run_at) == (JobStatus.QUEUED, 0, plus(2_000))


def test_an_attempt_whose_lease_is_gone_at_the_end_is_interrupted_and_changes_nothing(
    jobs: StoredJobQueue, store: InMemoryJobStore, clock: FixedClock
) -> None:
    job_id = jobs.enqueue(CompileStatementsJob, {"month": "2026-10"})
    claimed = claim(store, job_id, clock)
    assert jobs.cancel(job_id)
    outcome = AttemptOutcome(AttemptEnd.SUCCEEDED, None, START, START)

    conclusion = finish(store, claimed, outcome, clock)

    assert conclusion.run.status is RunStatus.INTERRUPTED
    assert conclusion.run.error_code == "JOB_INTERRUPTED"
    assert isinstance(conclusion.error, JobInterruptedError)
    job = store.find(job_id, tenant_id=None)
    assert job is not None
    assert job.status is JobStatus.CANCELLED


def test_the_last_failed_attempt_reports_attempts_exhausted(
    jobs: StoredJobQueue, store: InMemoryJobStore, clock: FixedClock
) -> None:
    job_id = jobs.enqueue(SendReceiptJob, {})
    claimed = claim(store, job_id, clock)
    error = ConnectionError("mail server down")

    conclusion = conclude(
        store,
        claimed,
        AttemptOutcome(AttemptEnd.FAILED, error, START, START),
        options=registration_of(SendReceiptJob).options,
        now=clock.now(),
        random=random.random,
    )

    assert (conclusion.run.status, conclusion.run.error_code, conclusion.run.retry_at) == (
        RunStatus.DEAD,
        "UNEXPECTED_ERROR",
        None,
    )
    assert isinstance(conclusion.error, AttemptsExhaustedError)
    assert conclusion.error.__cause__ is error
    assert "mail server down" not in str(conclusion.error)


def test_renewing_a_lost_lease_aborts_the_signal(
    jobs: StoredJobQueue, store: InMemoryJobStore, clock: FixedClock
) -> None:
    job_id = jobs.enqueue(SendReceiptJob, {})
    claimed = claim(store, job_id, clock)
    controller = AbortController()
    clock.advance(10_000)

    renewed = renew_lease(
        store, claimed.lease, now=clock.now(), lease_ms=LEASE_MS, controller=controller, job="j"
    )
    assert renewed is not None
    assert renewed.expires_at == plus(10_000 + LEASE_MS)
    assert jobs.cancel(job_id)
    lost = renew_lease(
        store, renewed, now=clock.now(), lease_ms=LEASE_MS, controller=controller, job="j"
    )

    assert lost is None
    assert isinstance(controller.signal.reason, JobInterruptedError)


def test_a_report_after_the_lease_is_lost_aborts_and_stops_the_job(
    jobs: StoredJobQueue, store: InMemoryJobStore, clock: FixedClock, scope: FixedExecutionScope
) -> None:
    steps: list[str] = []

    def script(payload: Any, execution: BackgroundJobExecution) -> None:
        execution.report_progress(1)
        steps.append("reported")
        jobs.cancel(execution.job_id)
        execution.save_checkpoint({"after": 1})
        steps.append("never")

    job_id = jobs.enqueue(SendReceiptJob, {})
    controller = AbortController()
    outcome = run_sync(
        claim(store, job_id, clock),
        registration_of(SendReceiptJob, lambda: SendReceiptJob(script)),
        store=store,
        clock=clock,
        scope=scope,
        controller=controller,
    )

    assert steps == ["reported"]
    assert outcome.end is AttemptEnd.INTERRUPTED
    assert isinstance(controller.signal.reason, JobInterruptedError)


def test_progress_that_json_cannot_carry_is_refused_naming_the_job(
    jobs: StoredJobQueue, store: InMemoryJobStore, clock: FixedClock, scope: FixedExecutionScope
) -> None:
    errors: list[BaseException] = []

    def script(payload: Any, execution: BackgroundJobExecution) -> None:
        try:
            execution.report_progress({"at": START})
        except ValueError as error:
            errors.append(error)

    job_id = jobs.enqueue(SendReceiptJob, {})
    run_sync(
        claim(store, job_id, clock),
        registration_of(SendReceiptJob, lambda: SendReceiptJob(script)),
        store=store,
        clock=clock,
        scope=scope,
    )

    [error] = errors
    assert str(error) == "job 'ledger.send-receipt': progress.<key> cannot be carried as JSON"


def test_a_factory_builds_a_new_job_for_each_attempt(
    jobs: StoredJobQueue, store: InMemoryJobStore, clock: FixedClock, scope: FixedExecutionScope
) -> None:
    built: list[SendReceiptJob] = []

    def factory() -> SendReceiptJob:
        built.append(SendReceiptJob(lambda p, e: None))
        return built[-1]

    registration = registration_of(SendReceiptJob, factory)
    for _ in range(2):
        job_id = jobs.enqueue(SendReceiptJob, {})
        run_sync(claim(store, job_id, clock), registration, store=store, clock=clock, scope=scope)

    assert len(built) == 2
    assert built[0] is not built[1]


def test_a_registration_by_name_is_checked_like_a_declaration() -> None:
    with pytest.raises(DeclarationError, match="lower case"):
        BackgroundRegistration.of_callable(name="Nope", run=lambda p, e: None)
    with pytest.raises(DeclarationError, match="'max_attempts' must be positive"):
        BackgroundRegistration.of_callable(
            name="ledger.x", run=lambda p, e: None, options={"max_attempts": 0}
        )
    with pytest.raises(DeclarationError, match="unknown option 'maxAttempts'"):
        BackgroundRegistration.of_callable(
            name="ledger.x", run=lambda p, e: None, options={"maxAttempts": 3}
        )
    with pytest.raises(DeclarationError, match="run must be a callable"):
        BackgroundRegistration.of_callable(name="ledger.x", run="not callable")  # type: ignore[arg-type]


async def test_with_the_system_timers_a_sync_job_runs_in_a_worker_thread_in_its_scope(
    jobs: StoredJobQueue, store: InMemoryJobStore, clock: FixedClock, scope: FixedExecutionScope
) -> None:
    seen: list[Any] = []
    worker = QueueWorker(store=store, clock=clock, scope=scope)
    worker.register(
        SendReceiptJob,
        lambda: SendReceiptJob(lambda p, e: seen.append((threading.get_ident(), scope.current()))),
    )
    with scope.open(work(correlation_id="corr-8")):
        jobs.enqueue(SendReceiptJob, {})

    await worker.run_due()

    [(thread, context)] = seen
    assert thread != threading.get_ident()
    assert context.correlation_id == "corr-8"
