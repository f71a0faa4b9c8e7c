"""StoredJobQueue.enqueue_many: a batch is checked whole, added in one write, published once."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from ddd_celery.background import (
    Dispatch,
    InMemoryJobStore,
    InvalidEnqueueError,
    JobPublisher,
    JobStatus,
    NewJob,
    StoredJobQueue,
    UnknownBackgroundJobError,
)
from ddd_celery.kernel import (
    EnqueueRequest,
    FixedClock,
    FixedExecutionScope,
    InMemoryUnitOfWork,
    SequentialIdGenerator,
)
from tests.unit.background.conftest import START, plus, work
from tests.unit.background.jobs import CompileStatementsJob, ReindexJob, SendReceiptJob

COMPILE = "ledger.compile-statements"
RECEIPT = "ledger.send-receipt"


class CountingStore(InMemoryJobStore):
    """The in-memory store, counting the writes it is asked for."""

    def __init__(self, unit_of_work: InMemoryUnitOfWork | None = None) -> None:
        super().__init__(unit_of_work)
        self.batches: list[int] = []
        self.adds = 0

    def add(self, job: NewJob, *, dispatched: bool) -> str:
        self.adds += 1
        return super().add(job, dispatched=dispatched)

    def add_many(self, jobs: Sequence[NewJob], *, dispatched: bool) -> list[str]:
        self.batches.append(len(jobs))
        return super().add_many(jobs, dispatched=dispatched)


class BatchPublisher(JobPublisher):
    def __init__(self) -> None:
        self.batches: list[list[Dispatch]] = []

    def publish(self, dispatch: Dispatch) -> None:
        raise AssertionError("a batch's wake-ups are published as one batch")

    def publish_many(self, dispatches: Sequence[Dispatch]) -> None:
        self.batches.append(list(dispatches))


@pytest.fixture
def unit_of_work() -> InMemoryUnitOfWork:
    return InMemoryUnitOfWork()


@pytest.fixture
def counted(unit_of_work: InMemoryUnitOfWork) -> CountingStore:
    return CountingStore(unit_of_work)


@pytest.fixture
def publisher() -> BatchPublisher:
    return BatchPublisher()


@pytest.fixture
def batch_queue(
    counted: CountingStore,
    clock: FixedClock,
    scope: FixedExecutionScope,
    unit_of_work: InMemoryUnitOfWork,
    publisher: BatchPublisher,
) -> StoredJobQueue:
    return StoredJobQueue(
        store=counted,
        clock=clock,
        ids=SequentialIdGenerator("job-"),
        scope=scope,
        unit_of_work=unit_of_work,
        publisher=publisher,
        max_payload_bytes=1_000,
    )


def receipts(count: int) -> list[EnqueueRequest]:
    return [EnqueueRequest(SendReceiptJob, {"order": n}) for n in range(count)]


def test_a_batch_is_added_in_one_write_and_published_in_one_batch_after_the_commit(
    batch_queue: StoredJobQueue,
    counted: CountingStore,
    unit_of_work: InMemoryUnitOfWork,
    publisher: BatchPublisher,
) -> None:
    with unit_of_work.begin():
        ids = batch_queue.enqueue_many(receipts(5_000))
        assert counted.list() == []  # kept only when the unit commits
        assert publisher.batches == []

    assert ids == [f"job-{n}" for n in range(1, 5_001)]
    assert (counted.batches, counted.adds) == ([5_000], 0)
    assert [job.payload for job in counted.list()] == [{"order": n} for n in range(5_000)]
    [published] = publisher.batches
    assert published == [Dispatch(job_id, RECEIPT, "ledger") for job_id in ids]


def test_a_batch_rolled_back_is_neither_added_nor_published(
    batch_queue: StoredJobQueue,
    counted: CountingStore,
    unit_of_work: InMemoryUnitOfWork,
    publisher: BatchPublisher,
) -> None:
    def failing_use_case() -> None:
        with unit_of_work.begin():
            batch_queue.enqueue_many(receipts(3))
            raise RuntimeError("the use case fails")

    with pytest.raises(RuntimeError, match="the use case fails"):
        failing_use_case()

    assert (counted.list(), publisher.batches) == ([], [])


def test_only_the_jobs_due_now_are_published_the_delayed_ones_wait_for_the_relay(
    batch_queue: StoredJobQueue, counted: CountingStore, publisher: BatchPublisher
) -> None:
    ids = batch_queue.enqueue_many(
        [
            EnqueueRequest(SendReceiptJob, {"n": 1}),
            EnqueueRequest(CompileStatementsJob, {"month": "2026-10"}, delay_ms=60_000),
            EnqueueRequest("ledger.reindex", {"index": "patients"}, run_at=plus(1_000)),
            EnqueueRequest(ReindexJob, {"index": "visits"}),
        ]
    )

    [published] = publisher.batches
    assert [(d.job_id, d.name, d.queue) for d in published] == [
        (ids[0], RECEIPT, "ledger"),
        (ids[3], "ledger.reindex", "slow"),
    ]
    assert [job.run_at for job in counted.list()] == [START, plus(60_000), plus(1_000), START]


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (EnqueueRequest(CompileStatementsJob, {"month": "not a month"}), "month"),
        (EnqueueRequest(SendReceiptJob, {"text": "x" * 2_000}), "payload"),
        (EnqueueRequest(SendReceiptJob, {}, idempotency_key="a\x00b"), "idempotency_key"),
        (EnqueueRequest(SendReceiptJob, {}, delay_ms=-1), "delay_ms"),
        ("not a request", "requests"),
    ],
)
def test_a_batch_with_one_bad_job_is_refused_whole_naming_its_index_and_job(
    batch_queue: StoredJobQueue,
    counted: CountingStore,
    publisher: BatchPublisher,
    *,
    bad: object,
    field: str,
) -> None:
    requests: list[object] = [*receipts(7), bad, *receipts(2)]

    with pytest.raises(InvalidEnqueueError) as raised:
        batch_queue.enqueue_many(requests)  # type: ignore[arg-type]

    error = raised.value
    assert (error.index, error.field) == (7, field)
    assert str(error).startswith("job 7 of the batch")
    if isinstance(bad, EnqueueRequest):
        assert error.job == (COMPILE if bad.job is CompileStatementsJob else RECEIPT)
        assert repr(error.job) in str(error)
    assert "x" * 20 not in str(error)  # never the value
    assert (counted.batches, counted.adds, counted.list(), publisher.batches) == ([], 0, [], [])


def test_an_unknown_job_in_a_batch_is_refused_whole_naming_its_index(
    batch_queue: StoredJobQueue, counted: CountingStore
) -> None:
    with pytest.raises(UnknownBackgroundJobError) as raised:
        batch_queue.enqueue_many([*receipts(2), EnqueueRequest("ledger.nope", {})])

    assert (raised.value.index, raised.value.job) == (2, "ledger.nope")
    assert str(raised.value).startswith("job 2 of the batch")
    assert counted.batches == []


def test_a_tenant_of_the_work_in_progress_its_keys_and_the_batch_keep_one_job_per_key(
    batch_queue: StoredJobQueue, counted: CountingStore, scope: FixedExecutionScope
) -> None:
    with scope.open(work(tenant="t-1", correlation_id="corr-9")):
        first = batch_queue.enqueue(SendReceiptJob, {"n": 0}, idempotency_key="r-0")
        ids = batch_queue.enqueue_many(
            [
                EnqueueRequest(SendReceiptJob, {"n": 1}, idempotency_key="r-0"),
                EnqueueRequest(SendReceiptJob, {"n": 2}, idempotency_key="r-1"),
                EnqueueRequest(SendReceiptJob, {"n": 3}, idempotency_key="r-1"),
            ]
        )
    with scope.open(work(tenant="t-2")):
        other = batch_queue.enqueue_many(
            [EnqueueRequest(SendReceiptJob, {"n": 4}, idempotency_key="r-0")]
        )
        assert batch_queue.find(ids[1]) is None  # another tenant's

    assert ids[0] == first
    assert ids[1] == ids[2] != first
    assert other[0] not in (first, ids[1])
    kept = {job.id: job for job in counted.list()}
    assert sorted(kept) == sorted([first, ids[1], other[0]])
    assert kept[ids[1]].payload == {"n": 2}
    assert kept[ids[1]].enqueued_by.tenant_id == "t-1"
    assert kept[ids[1]].enqueued_by.correlation_id == "corr-9"
    assert kept[other[0]].enqueued_by.tenant_id == "t-2"
    assert {job.status for job in kept.values()} == {JobStatus.QUEUED}


def test_the_empty_tenant_id_of_the_work_refuses_the_batch_at_its_first_job(
    batch_queue: StoredJobQueue, counted: CountingStore, scope: FixedExecutionScope
) -> None:
    with scope.open(work(tenant="")), pytest.raises(InvalidEnqueueError) as raised:
        batch_queue.enqueue_many(receipts(3))

    assert (raised.value.index, raised.value.field) == (0, "tenant_id")
    assert counted.batches == []


def test_an_empty_batch_asks_nothing_of_the_store(
    batch_queue: StoredJobQueue, counted: CountingStore, publisher: BatchPublisher
) -> None:
    assert batch_queue.enqueue_many([]) == []
    assert (counted.batches, publisher.batches) == ([], [])


def test_a_batch_outside_a_unit_of_work_is_added_and_published_at_once(
    clock: FixedClock, scope: FixedExecutionScope, publisher: BatchPublisher
) -> None:
    store = CountingStore()
    queue = StoredJobQueue(
        store=store,
        clock=clock,
        ids=SequentialIdGenerator("job-"),
        scope=scope,
        publisher=publisher,
    )

    ids = queue.enqueue_many(receipts(3))

    assert [job.id for job in store.list()] == ids
    assert [[d.job_id for d in batch] for batch in publisher.batches] == [ids]


class CountingIds(SequentialIdGenerator):
    """Sequential ids, noting how they were asked for."""

    def __init__(self) -> None:
        super().__init__("job-")
        self.asked: list[int | None] = []

    def next_id(self) -> str:
        self.asked.append(None)
        return super().next_id()

    def next_ids(self, count: int) -> list[str]:
        self.asked.append(count)
        return [super(CountingIds, self).next_id() for _ in range(count)]


def test_the_ids_of_a_batch_are_asked_for_at_once_those_of_its_keyed_jobs_derived(
    clock: FixedClock, scope: FixedExecutionScope, publisher: BatchPublisher
) -> None:
    ids = CountingIds()
    queue = StoredJobQueue(
        store=CountingStore(), clock=clock, ids=ids, scope=scope, publisher=publisher
    )
    keyed = queue.enqueue(SendReceiptJob, {"n": 0}, idempotency_key="r-1")
    ids.asked.clear()

    kept = queue.enqueue_many(
        [
            EnqueueRequest(SendReceiptJob, {"n": 1}),
            EnqueueRequest(SendReceiptJob, {"n": 2}, idempotency_key="r-1"),
            EnqueueRequest(ReindexJob, {"index": "visits"}),
        ]
    )

    assert ids.asked == [2]
    assert kept == ["job-1", keyed, "job-2"]
