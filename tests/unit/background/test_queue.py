"""StoredJobQueue: validation, who enqueues, tenancy, idempotency, unit of work, publishing."""

from __future__ import annotations

import logging
import math
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from ddd_celery import BackgroundJobExecution, background
from ddd_celery.background import (
    Dispatch,
    InMemoryJobStore,
    InvalidEnqueueError,
    JobPublisher,
    JobStatus,
    StoredJobQueue,
    UnknownBackgroundJobError,
)
from ddd_celery.background.errors import JobNotAddedAfterCommitError
from ddd_celery.background.queue import NOT_ADDED_AFTER_COMMIT, PUBLISH_FAILED
from ddd_celery.kernel import (
    FixedClock,
    FixedExecutionScope,
    InMemoryErrorReporter,
    InMemoryUnitOfWork,
    JobQueue,
    SequentialIdGenerator,
)
from tests.unit.background.conftest import START, TRACEPARENT, plus, work
from tests.unit.background.jobs import (
    CompileStatementsJob,
    ReindexJob,
    SendReceiptJob,
    StatementPayload,
)

COMPILE = "ledger.compile-statements"
RECEIPT = "ledger.send-receipt"


class RecordingPublisher(JobPublisher):
    def __init__(self, *, fails: bool = False) -> None:
        self.published: list[Dispatch] = []
        self._fails = fails

    def publish(self, dispatch: Dispatch) -> None:
        if self._fails:
            raise ConnectionError("the broker is down")
        self.published.append(dispatch)


def queue_with(
    store: InMemoryJobStore,
    clock: FixedClock,
    scope: FixedExecutionScope,
    **options: Any,
) -> StoredJobQueue:
    return StoredJobQueue(
        store=store, clock=clock, ids=SequentialIdGenerator("job-"), scope=scope, **options
    )


def test_it_is_the_kernel_job_queue(jobs: StoredJobQueue) -> None:
    assert isinstance(jobs, JobQueue)


def test_an_enqueued_job_is_queued_due_now_with_its_declared_attempts(
    jobs: StoredJobQueue, store: InMemoryJobStore
) -> None:
    job_id = jobs.enqueue(CompileStatementsJob, {"month": "2026-10"})

    view = jobs.find(job_id)
    assert view is not None
    assert (view.id, view.name, view.status, view.attempts, view.max_attempts) == (
        "job-1",
        COMPILE,
        "queued",
        0,
        3,
    )
    assert (view.enqueued_at, view.run_at, view.progress, view.last_error_code) == (
        START,
        START,
        None,
        None,
    )
    [stored] = store.list()
    assert (stored.queue, stored.payload) == ("ledger", {"month": "2026-10"})


def test_a_job_is_enqueued_by_its_name_too(jobs: StoredJobQueue, store: InMemoryJobStore) -> None:
    jobs.enqueue("ledger.reindex", {"index": "patients"})

    [stored] = store.list()
    assert (stored.name, stored.queue, stored.max_attempts) == ("ledger.reindex", "slow", 2)


def test_a_model_instance_is_stored_as_its_json(
    jobs: StoredJobQueue, store: InMemoryJobStore
) -> None:
    jobs.enqueue(CompileStatementsJob, StatementPayload(month="2026-11"))

    assert store.list()[0].payload == {"month": "2026-11"}


def test_a_payload_its_model_refuses_is_refused_naming_the_job_and_the_field_not_the_value(
    jobs: StoredJobQueue, store: InMemoryJobStore
) -> None:
    with pytest.raises(InvalidEnqueueError) as raised:
        jobs.enqueue(CompileStatementsJob, {"month": "secret-4111-1111"})

    error = raised.value
    assert isinstance(error, ValueError)
    assert error.code == "INVALID_ENQUEUE"
    assert error.job == COMPILE
    assert error.field == "month"
    assert COMPILE in str(error)
    assert "'month'" in str(error)
    assert "secret" not in str(error)
    assert store.list() == []


def test_a_missing_field_is_named(jobs: StoredJobQueue) -> None:
    with pytest.raises(InvalidEnqueueError, match=r"'month'.*missing"):
        jobs.enqueue(CompileStatementsJob, {})


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"when": datetime(2026, 1, 1, tzinfo=UTC)}, "payload.<key>"),
        ({"ids": [1, (2, 3)]}, "payload.<key>[1]"),
        ({"ratio": math.nan}, "payload.<key>"),
        ({"nested": {1: "x"}}, "payload.<key> (a key that is not a str)"),
        ({"items": {"a", "b"}}, "payload.<key>"),
        ([{"ok": 1}, [math.inf]], "payload[1][0]"),
        (object(), "payload"),
    ],
)
def test_a_plain_payload_json_cannot_carry_is_refused_naming_the_field(
    jobs: StoredJobQueue, payload: Any, field: str
) -> None:
    with pytest.raises(InvalidEnqueueError, match="cannot be carried as JSON") as raised:
        jobs.enqueue(SendReceiptJob, payload)

    assert raised.value.field == field
    assert raised.value.job == "ledger.send-receipt"


def test_a_payload_key_is_never_quoted_since_a_key_can_be_data(jobs: StoredJobQueue) -> None:
    with pytest.raises(InvalidEnqueueError) as raised:
        jobs.enqueue(SendReceiptJob, {"patients": {"ssn-078-05-1120": {1, 2}}})

    assert str(raised.value) == (
        "job 'ledger.send-receipt': payload.<key>.<key> cannot be carried as JSON"
    )


class Tally(BaseModel):
    model_config = ConfigDict(extra="forbid")

    counts: dict[str, int]
    lines: list[Line] = []


class Line(BaseModel):
    model_config = ConfigDict(extra="forbid")

    amount: int


@background("ledger.tally", max_attempts=1)
class TallyJob:
    def run(self, payload: Tally, execution: BackgroundJobExecution) -> None:
        raise AssertionError("these specs only enqueue")


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"counts": {"ssn-078-05-1120": "many"}}, "counts.<key>"),
        (
            {"counts": {}, "lines": [{"amount": 1}, {"amount": "ssn-078-05-1120"}]},
            "lines[1].amount",
        ),
        ({"counts": {}, "ssn-078-05-1120": 1}, "<key>"),
        ({"counts": {}, "lines": [{"amount": 1, "x" * 100_000: 1}]}, "lines[0].<key>"),
    ],
)
def test_a_model_names_the_field_it_refuses_by_its_own_field_names_only(
    jobs: StoredJobQueue, payload: Any, field: str
) -> None:
    with pytest.raises(InvalidEnqueueError) as raised:
        jobs.enqueue(TallyJob, payload)

    assert raised.value.field == field
    assert "ssn" not in str(raised.value)
    assert len(str(raised.value)) < 200


def test_a_model_nested_past_its_serializers_depth_is_refused_not_raised_as_an_error_of_its_own(
    jobs: StoredJobQueue,
) -> None:
    deep: Any = {}
    for _ in range(2_000):
        deep = {"a": deep}

    with pytest.raises(InvalidEnqueueError, match="nested deeper than 100 levels"):
        jobs.enqueue(OpaqueJob, {"document": deep})


class Opaque(BaseModel):
    document: Any


@background("ledger.opaque", max_attempts=1)
class OpaqueJob:
    def run(self, payload: Opaque, execution: BackgroundJobExecution) -> None:
        raise AssertionError("these specs only enqueue")


def test_a_plain_json_payload_is_kept_as_given(
    jobs: StoredJobQueue, store: InMemoryJobStore
) -> None:
    payload = {"to": "ana@example.org", "lines": [1, 2.5, None, True, "été"], "meta": {}}

    jobs.enqueue(SendReceiptJob, payload)

    assert store.list()[0].payload == payload


def test_a_class_not_declared_is_an_unknown_job(jobs: StoredJobQueue) -> None:
    class NotAJob:
        pass

    with pytest.raises(UnknownBackgroundJobError, match="is not declared with @background") as e:
        jobs.enqueue(NotAJob, {})

    assert isinstance(e.value, LookupError)
    assert e.value.code == "UNKNOWN_JOB"


def test_an_unknown_name_is_an_unknown_job(jobs: StoredJobQueue) -> None:
    with pytest.raises(UnknownBackgroundJobError, match="no background job is named"):
        jobs.enqueue("ledger.nope", {})


def test_a_queue_given_its_declarations_knows_those_jobs_only(
    store: InMemoryJobStore, clock: FixedClock, scope: FixedExecutionScope
) -> None:
    jobs = queue_with(store, clock, scope, declarations=[CompileStatementsJob])

    jobs.enqueue(COMPILE, {"month": "2026-10"})
    with pytest.raises(UnknownBackgroundJobError, match="not one of this queue's jobs"):
        jobs.enqueue(SendReceiptJob, {})
    with pytest.raises(UnknownBackgroundJobError):
        jobs.enqueue("ledger.send-receipt", {})


def test_a_delayed_job_is_due_after_its_delay(
    jobs: StoredJobQueue, store: InMemoryJobStore
) -> None:
    job_id = jobs.enqueue(SendReceiptJob, {}, delay_ms=90_000)

    view = jobs.find(job_id)
    assert view is not None
    assert view.run_at == plus(90_000)


def test_a_job_is_due_at_its_run_at_in_utc(jobs: StoredJobQueue) -> None:
    paris = timezone(timedelta(hours=2))
    job_id = jobs.enqueue(SendReceiptJob, {}, run_at=datetime(2026, 10, 1, 12, 0, tzinfo=paris))

    view = jobs.find(job_id)
    assert view is not None
    assert view.run_at == datetime(2026, 10, 1, 10, 0, tzinfo=UTC)
    assert view.run_at.tzinfo is UTC


@pytest.mark.parametrize(
    ("options", "field", "message"),
    [
        ({"delay_ms": 5, "run_at": START}, "delay_ms", "not both"),
        ({"delay_ms": -1}, "delay_ms", ">= 0"),
        ({"delay_ms": True}, "delay_ms", "an int"),
        ({"delay_ms": 10**30}, "delay_ms", "past the year 9999"),
        ({"run_at": datetime(2026, 10, 1, 9, 0)}, "run_at", "aware"),
        ({"run_at": "2026-10-01"}, "run_at", "a datetime"),
        ({"idempotency_key": 42}, "idempotency_key", "a str"),
    ],
)
def test_a_delay_or_a_run_at_out_of_its_values_is_refused(
    jobs: StoredJobQueue, store: InMemoryJobStore, options: Any, field: str, message: str
) -> None:
    with pytest.raises(InvalidEnqueueError, match=message) as raised:
        jobs.enqueue(SendReceiptJob, {}, **options)

    assert raised.value.field == field
    assert store.list() == []


def test_the_work_that_enqueues_is_captured(
    jobs: StoredJobQueue, store: InMemoryJobStore, scope: FixedExecutionScope
) -> None:
    with scope.open(work(tenant="t-1", correlation_id="corr-42")):
        jobs.enqueue(SendReceiptJob, {})

    by = store.list()[0].enqueued_by
    assert (by.correlation_id, by.actor, by.tenant_id, by.traceparent) == (
        "corr-42",
        "user:u-1",
        "t-1",
        TRACEPARENT,
    )


def test_the_traceparent_is_read_from_the_tracer_when_one_is_given(
    store: InMemoryJobStore, clock: FixedClock, scope: FixedExecutionScope
) -> None:
    jobs = queue_with(store, clock, scope, traceparent=lambda: "00-trace-span-01")

    jobs.enqueue(SendReceiptJob, {})
    with scope.open(work()):
        jobs.enqueue(SendReceiptJob, {})

    assert [job.enqueued_by.traceparent for job in store.list()] == [
        "00-trace-span-01",
        "00-trace-span-01",
    ]


def test_a_job_enqueued_outside_any_work_has_no_author_and_its_id_as_correlation_id(
    jobs: StoredJobQueue, store: InMemoryJobStore
) -> None:
    """Its attempts log the job's id as their correlation id: the store holds the same."""
    job_id = jobs.enqueue(SendReceiptJob, {})

    by = store.list()[0].enqueued_by
    assert (by.correlation_id, by.actor, by.tenant_id, by.traceparent) == (
        job_id,
        None,
        None,
        None,
    )


def test_find_and_cancel_reach_the_jobs_of_the_current_tenant_only(
    jobs: StoredJobQueue, scope: FixedExecutionScope
) -> None:
    with scope.open(work(tenant="t-1")):
        mine = jobs.enqueue(SendReceiptJob, {})

    with scope.open(work(tenant="t-2")):
        assert jobs.find(mine) is None
        assert jobs.cancel(mine) is False
    with scope.open(work(tenant="t-1")):
        view = jobs.find(mine)
        assert view is not None
        assert view.tenant_id == "t-1"
        assert jobs.cancel(mine) is True
    view = jobs.find(mine)
    assert view is not None
    assert view.status == "cancelled"


def test_work_without_a_tenant_reaches_every_job(
    jobs: StoredJobQueue, scope: FixedExecutionScope
) -> None:
    with scope.open(work(tenant="t-1")):
        theirs = jobs.enqueue(SendReceiptJob, {})

    with scope.open(work(tenant=None)):
        assert jobs.find(theirs) is not None
        assert jobs.cancel(theirs) is True


def test_the_same_idempotency_key_in_the_same_tenant_enqueues_once(
    jobs: StoredJobQueue, store: InMemoryJobStore, scope: FixedExecutionScope
) -> None:
    with scope.open(work(tenant="t-1")):
        first = jobs.enqueue(SendReceiptJob, {"n": 1}, idempotency_key="receipt-7")
        again = jobs.enqueue(SendReceiptJob, {"n": 2}, idempotency_key="receipt-7")
    with scope.open(work(tenant="t-2")):
        other_tenant = jobs.enqueue(SendReceiptJob, {"n": 3}, idempotency_key="receipt-7")

    assert first == again
    assert other_tenant != first
    assert [job.payload for job in store.list()] == [{"n": 1}, {"n": 3}]


def test_retry_dead_queues_a_dead_job_of_the_tenant_again(
    jobs: StoredJobQueue, store: InMemoryJobStore, scope: FixedExecutionScope, clock: FixedClock
) -> None:
    with scope.open(work(tenant="t-1")):
        job_id = jobs.enqueue(SendReceiptJob, {})
    claimed = store.claim_job(job_id, now=clock.now(), lease_ms=1_000)
    assert claimed is not None
    store.fail(claimed.lease, now=clock.now(), error_code="X", error_type="E", retry_at=None)

    with scope.open(work(tenant="t-2")):
        assert jobs.retry_dead(job_id) is False
    with scope.open(work(tenant="t-1")):
        assert jobs.retry_dead(job_id) is True
        assert jobs.retry_dead(job_id) is False

    view = jobs.find(job_id)
    assert view is not None
    assert (view.status, view.attempts) == ("queued", 0)


# -- publishing and the unit of work ------------------------------------------------------------


def test_a_job_due_now_is_published_and_added_dispatched(
    store: InMemoryJobStore, clock: FixedClock, scope: FixedExecutionScope
) -> None:
    publisher = RecordingPublisher()
    jobs = queue_with(store, clock, scope, publisher=publisher)

    job_id = jobs.enqueue(ReindexJob, {"index": "patients"})

    assert publisher.published == [Dispatch(job_id, "ledger.reindex", "slow")]
    assert store.take_due(now=plus(60_000), limit=10, redispatch_after_ms=60_000) == []


def test_a_delayed_job_is_not_published_but_left_to_the_relay(
    store: InMemoryJobStore, clock: FixedClock, scope: FixedExecutionScope
) -> None:
    publisher = RecordingPublisher()
    jobs = queue_with(store, clock, scope, publisher=publisher)

    job_id = jobs.enqueue(SendReceiptJob, {}, delay_ms=10_000)

    assert publisher.published == []
    assert store.take_due(now=plus(9_999), limit=10, redispatch_after_ms=60_000) == []
    taken = store.take_due(now=plus(10_000), limit=10, redispatch_after_ms=60_000)
    assert [d.job_id for d in taken] == [job_id]


def test_a_publish_that_fails_is_logged_and_left_to_the_relay(
    store: InMemoryJobStore,
    clock: FixedClock,
    scope: FixedExecutionScope,
    caplog: pytest.LogCaptureFixture,
) -> None:
    jobs = queue_with(store, clock, scope, publisher=RecordingPublisher(fails=True))

    with caplog.at_level(logging.WARNING, logger="ddd_celery.background"):
        job_id = jobs.enqueue(SendReceiptJob, {})

    [record] = caplog.records
    assert record.getMessage() == PUBLISH_FAILED
    assert (record.job, record.job_id, record.error_type) == (  # type: ignore[attr-defined]
        "ledger.send-receipt",
        job_id,
        "ConnectionError",
    )
    assert "broker is down" not in caplog.text
    assert store.take_due(now=plus(60_000), limit=10, redispatch_after_ms=60_000) == []
    stale = store.take_due(now=plus(60_001), limit=10, redispatch_after_ms=60_000)
    assert [d.job_id for d in stale] == [job_id]


def test_in_a_unit_of_work_a_job_is_added_and_published_after_the_commit(
    store: InMemoryJobStore, clock: FixedClock, scope: FixedExecutionScope
) -> None:
    unit_of_work, publisher = InMemoryUnitOfWork(), RecordingPublisher()
    jobs = queue_with(store, clock, scope, publisher=publisher, unit_of_work=unit_of_work)

    with unit_of_work.begin():
        job_id = jobs.enqueue(SendReceiptJob, {})
        assert store.list() == []
        assert publisher.published == []

    assert [job.id for job in store.list()] == [job_id]
    assert [d.job_id for d in publisher.published] == [job_id]


def test_on_rollback_a_job_is_neither_added_nor_published(
    store: InMemoryJobStore, clock: FixedClock, scope: FixedExecutionScope
) -> None:
    unit_of_work, publisher = InMemoryUnitOfWork(), RecordingPublisher()
    jobs = queue_with(store, clock, scope, publisher=publisher, unit_of_work=unit_of_work)

    def use_case() -> None:
        with unit_of_work.begin():
            jobs.enqueue(SendReceiptJob, {})
            raise RuntimeError("the use case fails")

    with pytest.raises(RuntimeError, match="the use case fails"):
        use_case()

    assert store.list() == []
    assert publisher.published == []
    assert unit_of_work.rollbacks == 1


def test_a_transactional_store_is_written_in_the_unit_of_work_and_published_after_it(
    clock: FixedClock, scope: FixedExecutionScope
) -> None:
    unit_of_work, publisher = InMemoryUnitOfWork(), RecordingPublisher()
    store = InMemoryJobStore(unit_of_work=unit_of_work)
    jobs = queue_with(store, clock, scope, publisher=publisher, unit_of_work=unit_of_work)
    assert store.transactional

    with unit_of_work.begin():
        kept = jobs.enqueue(SendReceiptJob, {})
        assert publisher.published == []

    def use_case() -> None:
        with unit_of_work.begin():
            jobs.enqueue(SendReceiptJob, {})
            raise RuntimeError("the use case fails")

    with pytest.raises(RuntimeError, match="the use case fails"):
        use_case()

    assert [job.id for job in store.list()] == [kept]
    assert [d.job_id for d in publisher.published] == [kept]


def test_the_same_idempotency_key_twice_in_a_unit_of_work_adds_one_job(
    store: InMemoryJobStore, clock: FixedClock, scope: FixedExecutionScope
) -> None:
    unit_of_work = InMemoryUnitOfWork()
    jobs = queue_with(store, clock, scope, unit_of_work=unit_of_work)

    with scope.open(work(tenant="t-1")), unit_of_work.begin():
        first = jobs.enqueue(SendReceiptJob, {"n": 1}, idempotency_key="k")
        again = jobs.enqueue(SendReceiptJob, {"n": 2}, idempotency_key="k")
    with scope.open(work(tenant="t-1")):
        later = jobs.enqueue(SendReceiptJob, {"n": 3}, idempotency_key="k")

    assert first == again == later
    assert [job.payload for job in store.list()] == [{"n": 1}]


def test_cancel_and_retry_dead_of_a_transactional_store_wait_for_the_commit(
    clock: FixedClock, scope: FixedExecutionScope
) -> None:
    unit_of_work = InMemoryUnitOfWork()
    store = InMemoryJobStore(unit_of_work=unit_of_work)
    jobs = queue_with(store, clock, scope, unit_of_work=unit_of_work)
    job_id = jobs.enqueue(SendReceiptJob, {})

    def cancel_then_fail() -> None:
        with unit_of_work.begin():
            assert jobs.cancel(job_id) is True
            raise RuntimeError("the use case fails")

    with pytest.raises(RuntimeError, match="the use case fails"):
        cancel_then_fail()
    assert store.list()[0].status is JobStatus.QUEUED

    with unit_of_work.begin():
        assert jobs.cancel(job_id) is True
        assert store.list()[0].status is JobStatus.QUEUED
    assert store.list()[0].status is JobStatus.CANCELLED


def test_retry_dead_publishes_when_the_queue_has_a_publisher(
    store: InMemoryJobStore, clock: FixedClock, scope: FixedExecutionScope
) -> None:
    publisher = RecordingPublisher()
    jobs = queue_with(store, clock, scope, publisher=publisher)
    job_id = jobs.enqueue(SendReceiptJob, {}, delay_ms=1)
    clock.advance(1)
    claimed = store.claim_job(job_id, now=clock.now(), lease_ms=1_000)
    assert claimed is not None
    store.fail(claimed.lease, now=clock.now(), error_code="X", error_type="E", retry_at=None)

    assert jobs.retry_dead(job_id) is True

    assert publisher.published == [Dispatch(job_id, "ledger.send-receipt", "ledger")]


class UnreachableStore(InMemoryJobStore):
    """A store whose next ``failures`` adds raise ``error`` (each one counted)."""

    def __init__(self, failures: int = 1_000_000, error: Exception | None = None) -> None:
        super().__init__()
        self.failures = failures
        self.adds = 0
        self._error = error or ConnectionError("the store cannot be reached")

    def add(self, job: Any, *, dispatched: bool) -> str:
        self.adds += 1
        if self.failures > 0:
            self.failures -= 1
            raise self._error
        return super().add(job, dispatched=dispatched)


def test_an_add_after_the_commit_is_sent_again_while_the_store_cannot_be_asked(
    clock: FixedClock, scope: FixedExecutionScope
) -> None:
    unit_of_work, publisher, store = InMemoryUnitOfWork(), RecordingPublisher(), UnreachableStore(2)
    jobs = queue_with(
        store, clock, scope, unit_of_work=unit_of_work, publisher=publisher, add_retry_ms=5_000
    )

    with unit_of_work.begin():
        job_id = jobs.enqueue(SendReceiptJob, {})

    assert store.adds == 3
    assert [job.id for job in store.list()] == [job_id]
    assert [d.job_id for d in publisher.published] == [job_id]


def test_an_add_given_up_after_the_commit_raises_an_error_that_says_the_work_committed(
    clock: FixedClock, scope: FixedExecutionScope, caplog: pytest.LogCaptureFixture
) -> None:
    unit_of_work, publisher, reporter = (
        InMemoryUnitOfWork(),
        RecordingPublisher(),
        InMemoryErrorReporter(),
    )
    store = UnreachableStore()
    jobs = queue_with(
        store,
        clock,
        scope,
        unit_of_work=unit_of_work,
        publisher=publisher,
        add_retry_ms=200,
        errors=reporter,
    )

    def use_case() -> str:
        with scope.open(work(tenant="t-1", correlation_id="corr-9")), unit_of_work.begin():
            return jobs.enqueue(SendReceiptJob, {"card": "4111"})

    with (
        caplog.at_level(logging.ERROR, logger="ddd_celery.background"),
        pytest.raises(JobNotAddedAfterCommitError) as raised,
    ):
        use_case()

    error = raised.value
    assert not isinstance(error, ConnectionError)
    assert unit_of_work.commits == 1
    assert (error.code, error.job, error.job_id) == ("JOB_NOT_ADDED", RECEIPT, "job-1")
    assert "committed" in str(error)
    assert "'job-1'" in str(error)
    assert error.attempts == store.adds > 1
    assert isinstance(error.__cause__, ConnectionError)
    assert "4111" not in str(error)
    [(reported, context)] = reporter.reported
    assert reported is error
    assert context == {
        "job": RECEIPT,
        "job_id": "job-1",
        "correlation_id": "corr-9",
        "tenant_id": "t-1",
        "error_type": "ConnectionError",
    }
    [record] = caplog.records
    assert record.getMessage() == NOT_ADDED_AFTER_COMMIT
    assert (record.job, record.job_id) == (RECEIPT, "job-1")  # type: ignore[attr-defined]
    assert store.list() == []
    assert publisher.published == []


def test_once_an_outage_outlasts_the_retry_each_add_after_a_commit_is_tried_once(
    clock: FixedClock, scope: FixedExecutionScope
) -> None:
    unit_of_work, store = InMemoryUnitOfWork(), UnreachableStore()
    jobs = queue_with(store, clock, scope, unit_of_work=unit_of_work, add_retry_ms=200)

    def use_case() -> None:
        with unit_of_work.begin():
            jobs.enqueue(SendReceiptJob, {})

    with pytest.raises(JobNotAddedAfterCommitError):
        use_case()
    retried = store.adds
    with pytest.raises(JobNotAddedAfterCommitError) as raised:
        use_case()

    assert retried > 1
    assert raised.value.attempts == 1
    store.failures = 0
    use_case()
    store.failures = 2
    use_case()
    assert store.adds == retried + 1 + 1 + 3, "a success ends the outage: retried again"
    assert len(store.list()) == 2


def test_an_add_that_fails_after_the_commit_for_another_reason_is_not_sent_again(
    clock: FixedClock, scope: FixedExecutionScope
) -> None:
    unit_of_work = InMemoryUnitOfWork()
    store = UnreachableStore(error=ValueError("the store refuses it"))
    jobs = queue_with(store, clock, scope, unit_of_work=unit_of_work, add_retry_ms=5_000)

    def use_case() -> None:
        with unit_of_work.begin():
            jobs.enqueue(SendReceiptJob, {})

    with pytest.raises(JobNotAddedAfterCommitError) as raised:
        use_case()

    assert store.adds == raised.value.attempts == 1
    assert isinstance(raised.value.__cause__, ValueError)
    assert unit_of_work.commits == 1


def test_an_add_outside_a_unit_of_work_raises_the_stores_error_at_once(
    clock: FixedClock, scope: FixedExecutionScope
) -> None:
    store = UnreachableStore()
    jobs = queue_with(store, clock, scope, add_retry_ms=5_000)

    with pytest.raises(ConnectionError, match="cannot be reached"):
        jobs.enqueue(SendReceiptJob, {})
    assert store.adds == 1
