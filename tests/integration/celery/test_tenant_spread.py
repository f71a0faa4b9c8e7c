"""A spread occurrence on the Celery driver, in this process, on the in-memory stores.

The occurrence's task is run as a worker runs it (``run_message``), its tenant tasks are caught
where the driver hands them to the broker (``app.send_task``) and run one by one, in any order,
as workers would (``run_tenant_message``): every tenant runs once, a failure stops none of the
others, and the occurrence is recorded once, by the last tenant run, with the first failure in
the directory's order. The processes themselves: ``acceptance/test_process_tenant_spread.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery import Celery
from celery.exceptions import WorkerLostError
from celery_support import Runs

from ddd_celery.celery import install_jobs
from ddd_celery.celery.message import OccurrenceMessage, UnreadableMessageError
from ddd_celery.celery.spread import TenantRunMessage
from ddd_celery.celery.tasks import run_message
from ddd_celery.celery.tenant_tasks import on_tenant_task_failure, run_tenant_message
from ddd_celery.declarations import JobExecution, scheduled
from ddd_celery.kernel.clock import FixedClock
from ddd_celery.kernel.errors import StoreUnavailableError
from ddd_celery.kernel.lock import InMemoryLock
from ddd_celery.kernel.tenants import InMemoryTenantDirectory, TenantDirectory
from ddd_celery.scheduling.outcomes import Outcome
from ddd_celery.scheduling.run_state import InMemoryJobRunState

JOB = "spreadtest.close-month"
AT = datetime(2026, 3, 1, 0, 0, tzinfo=UTC)
TENANTS = ["acme", "globex", "initech", "umbrella"]
RAN: list[tuple[str | None, str | None]] = []
FAILING: set[str] = set()


@scheduled(JOB, every="1d", tenancy="per-tenant", tenant_runs="spread", timeout_ms=60_000)
class CloseMonthJob:
    def run(self, execution: JobExecution) -> None:
        RAN.append((execution.tenant_id, execution.signal.reason and "aborted"))
        if execution.tenant_id in FAILING:
            raise ValueError(f"{execution.tenant_id} cannot close")


class BrokenDirectory(TenantDirectory):
    def tenants(self) -> list[str]:
        raise ConnectionError("the directory is down")


@dataclass
class Spread:
    app: Celery
    clock: FixedClock
    runs: Runs
    run_state: InMemoryJobRunState
    sent: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    refuse_after: int | None = None

    def send_task(self, name: str, *, kwargs: dict[str, Any], **options: Any) -> None:
        if self.refuse_after is not None and len(self.sent) >= self.refuse_after:
            raise OSError("the broker is down")
        self.sent.append((name, kwargs))

    def occurrence(self) -> Any:
        message = OccurrenceMessage(AT, "corr-1").to_kwargs()
        return run_message(self.app, JOB, (), message)

    def tenant(self, index: int) -> Any:
        _name, kwargs = self.sent[index]
        return run_tenant_message(self.app, JOB, (), kwargs)


def _spread(tenants: TenantDirectory) -> Spread:
    clock = FixedClock(AT + timedelta(seconds=1))
    runs = Runs()
    run_state = InMemoryJobRunState(clock)
    app = Celery("spread", broker="memory://", set_as_current=False)
    install_jobs(
        app,
        jobs=[CloseMonthJob],
        lock=InMemoryLock(clock),
        run_state=run_state,
        clock=clock,
        tenants=tenants,
        on_run=runs,
        environ={},
    )
    spread = Spread(app, clock, runs, run_state)
    app.send_task = spread.send_task  # type: ignore[method-assign]
    run_state.claim(JOB, AT, queue=False, ttl_ms=120_000)  # as beat claims it
    return spread


@pytest.fixture
def spread() -> Iterator[Spread]:
    RAN.clear()
    FAILING.clear()
    yield _spread(InMemoryTenantDirectory(TENANTS))
    RAN.clear()
    FAILING.clear()


def test_the_occurrence_sends_one_tenant_task_per_tenant_and_records_nothing_yet(
    spread: Spread,
) -> None:
    assert spread.occurrence() is None

    assert [name for name, _ in spread.sent] == [f"{JOB}.tenant"] * len(TENANTS)
    assert [kwargs["tenant_id"] for _, kwargs in spread.sent] == TENANTS
    assert {kwargs["correlation_id"] for _, kwargs in spread.sent} == {"corr-1"}
    assert RAN == []
    assert spread.runs.records == []
    assert spread.run_state.running(JOB) == AT


def test_the_last_tenant_run_records_the_one_outcome_and_ends_the_run(spread: Spread) -> None:
    spread.occurrence()

    for index in (2, 0, 3):
        spread.tenant(index)
        assert spread.runs.records == []
        assert spread.run_state.running(JOB) == AT
    spread.clock.advance(500)
    spread.tenant(1)

    assert sorted(tenant for tenant, _ in RAN) == sorted(TENANTS)
    [record] = spread.runs.records
    assert (record.outcome, record.correlation_id, record.tenant_id) == (
        Outcome.SUCCEEDED,
        "corr-1",
        None,
    )
    assert record.duration_ms == 500
    assert spread.run_state.running(JOB) is None


def test_a_failing_tenant_stops_none_and_the_first_in_the_directory_fails_the_occurrence(
    spread: Spread,
) -> None:
    FAILING.update({"globex", "umbrella"})
    spread.occurrence()

    ended = [spread.tenant(index) for index in (3, 0, 2, 1)]

    assert sorted(tenant for tenant, _ in RAN) == sorted(TENANTS)
    [record] = spread.runs.records
    assert (record.outcome, record.tenant_id, record.error_type) == (
        Outcome.FAILED,
        "globex",
        "ValueError",
    )
    # each tenant task ends with its own tenant's record; the last one held the first error
    assert [run.tenant_id for run, _ in ended] == ["umbrella", "acme", "initech", "globex"]
    assert [run.outcome for run, _ in ended].count(Outcome.FAILED) == 2
    assert isinstance(spread.runs.errors[0], ValueError)


def test_a_tenant_run_past_the_occurrences_deadline_does_not_call_the_job(
    spread: Spread,
) -> None:
    spread.occurrence()
    for index in range(3):
        spread.tenant(index)
    spread.clock.advance(60_000)

    late, _error = spread.tenant(3)

    assert "umbrella" not in [tenant for tenant, _ in RAN]
    assert (late.outcome, late.error_code) == (Outcome.FAILED, "JOB_TIMEOUT")
    [record] = spread.runs.records
    assert (record.outcome, record.error_code, record.tenant_id) == (
        Outcome.FAILED,
        "JOB_TIMEOUT",
        "umbrella",
    )


def test_tenants_a_failed_publish_left_unsent_are_struck_off_so_the_occurrence_ends(
    spread: Spread,
) -> None:
    spread.refuse_after = 2
    spread.occurrence()
    assert spread.runs.records == []

    spread.tenant(0)
    spread.tenant(1)

    assert [tenant for tenant, _ in RAN] == ["acme", "globex"]
    [record] = spread.runs.records
    assert (record.outcome, record.tenant_id, record.error_type) == (
        Outcome.FAILED,
        "initech",
        "OSError",
    )


def test_a_directory_that_cannot_answer_fails_the_occurrence_at_once() -> None:
    spread = _spread(BrokenDirectory())

    record, _error = spread.occurrence()

    assert spread.sent == []
    assert (record.outcome, record.error_type) == (Outcome.FAILED, "ConnectionError")
    assert spread.runs.records == [record]
    assert spread.run_state.running(JOB) is None


def test_a_pool_process_lost_in_a_tenant_run_strikes_its_tenant_off(spread: Spread) -> None:
    spread.occurrence()
    for index in range(3):
        spread.tenant(index)
    task = spread.app.tasks[f"{JOB}.tenant"]

    on_tenant_task_failure(
        sender=task, exception=WorkerLostError("signal 9"), kwargs=spread.sent[3][1]
    )

    [record] = spread.runs.records
    assert (record.outcome, record.tenant_id, record.error_type) == (
        Outcome.FAILED,
        "umbrella",
        "WorkerLostError",
    )


def test_any_other_failure_of_a_tenant_task_is_left_to_its_run(spread: Spread) -> None:
    spread.occurrence()
    task = spread.app.tasks[f"{JOB}.tenant"]

    on_tenant_task_failure(sender=task, exception=ValueError("x"), kwargs=spread.sent[0][1])

    assert spread.run_state.tenant_runs().pending(JOB, AT) == len(TENANTS)


@pytest.mark.parametrize(
    ("change", "field", "why"),
    [
        (
            {"x": "1"},
            "kwargs",
            "unexpected field(s); a tenant run has scheduled_at, correlation_id, tenant_id "
            "and started_at",
        ),
        ({"started_at": None}, "started_at", "must be an ISO 8601 instant string"),
        ({"started_at": "2026-03-01T00:00:00"}, "started_at", "is not an ISO 8601 instant"),
        ({"tenant_id": None}, "tenant_id", "must name the tenant of the run"),
    ],
    ids=["extra-field", "no-start", "naive-start", "no-tenant"],
)
def test_a_tenant_message_that_cannot_be_read_names_its_field_and_every_field_it_has(
    change: dict[str, Any], field: str, why: str
) -> None:
    kwargs = {**TenantRunMessage(OccurrenceMessage(AT, "c", "acme"), AT).to_kwargs(), **change}

    with pytest.raises(UnreadableMessageError) as refused:
        TenantRunMessage.from_kwargs(kwargs)

    assert refused.value.field == field
    assert why in str(refused.value)


class Unanswering:
    """The joins of ``inner``, whose first ``failures`` strike-offs raise ``error``."""

    def __init__(self, inner: Any, failures: int, error: Exception) -> None:
        self.inner, self.failures, self.error, self.calls = inner, failures, error, 0

    def complete(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return self.inner.complete(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _unanswering(
    spread: Spread, monkeypatch: pytest.MonkeyPatch, failures: int, error: Exception
) -> Unanswering:
    joins = Unanswering(spread.run_state.tenant_runs(), failures, error)
    monkeypatch.setattr(spread.run_state, "tenant_runs", lambda: joins)
    return joins


def test_a_strike_off_the_store_did_not_answer_is_sent_again_so_the_occurrence_is_recorded(
    spread: Spread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failover of the join's Redis takes seconds: a tenant run that ended meanwhile asks
    again rather than leave the occurrence unrecorded until its run expires."""
    spread.occurrence()
    joins = _unanswering(spread, monkeypatch, 3, StoreUnavailableError("no answer"))

    for index in range(len(TENANTS)):
        spread.tenant(index)

    assert joins.calls == len(TENANTS) + 3
    [record] = spread.runs.records
    assert record.outcome is Outcome.SUCCEEDED
    assert spread.run_state.running(JOB) is None


def test_a_store_down_past_the_retries_leaves_the_occurrence_to_expire_with_its_run(
    spread: Spread, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("ddd_celery.celery.spread.STRIKE_OFF_RETRY_S", 0.2)
    spread.occurrence()
    joins = _unanswering(spread, monkeypatch, 10_000, StoreUnavailableError("no answer"))

    for index in range(len(TENANTS)):
        spread.tenant(index)

    assert len(TENANTS) * 2 < joins.calls < 10_000
    assert spread.runs.records == []
    assert spread.run_state.running(JOB) == AT  # until the run's time to live
    followed = [
        r for r in caplog.records if getattr(r, "operation", None) == "complete a tenant run"
    ]
    assert len(followed) == len(TENANTS)


def test_a_strike_off_refused_for_another_reason_is_not_sent_again(
    spread: Spread, monkeypatch: pytest.MonkeyPatch
) -> None:
    spread.occurrence()
    joins = _unanswering(spread, monkeypatch, 1, ValueError("not a join"))

    spread.tenant(0)

    assert joins.calls == 1
