"""InMemoryJobCheckpoints and InMemoryJobRunState: what crosses a restart, what overlaps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from ddd_celery.kernel import FixedClock
from ddd_celery.scheduling.checkpoints import InMemoryJobCheckpoints
from ddd_celery.scheduling.run_state import Claim, InMemoryJobRunState

JOB = "billing.send-payment-reminders"
SIX = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
QUARTER = timedelta(minutes=15)


def test_a_job_never_written_has_no_checkpoint() -> None:
    assert InMemoryJobCheckpoints().read(JOB) is None


def test_a_checkpoint_reads_back_in_utc() -> None:
    checkpoints = InMemoryJobCheckpoints()

    checkpoints.write(JOB, datetime(2026, 3, 2, 7, 0, tzinfo=timezone(timedelta(hours=1))))

    read = checkpoints.read(JOB)
    assert read == SIX
    assert read is not None
    assert read.utcoffset() == timedelta(0)


def test_a_checkpoint_only_moves_forward() -> None:
    checkpoints = InMemoryJobCheckpoints()

    checkpoints.write(JOB, SIX + QUARTER)
    checkpoints.write(JOB, SIX)

    assert checkpoints.read(JOB) == SIX + QUARTER


def test_checkpoints_are_kept_per_job() -> None:
    checkpoints = InMemoryJobCheckpoints()

    checkpoints.write(JOB, SIX)

    assert checkpoints.read("billing.export-ledger") is None


def test_a_naive_checkpoint_is_refused() -> None:
    with pytest.raises(ValueError, match="aware"):
        InMemoryJobCheckpoints().write(JOB, datetime(2026, 3, 2, 6, 0))


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(SIX)


@pytest.fixture
def state(clock: FixedClock) -> InMemoryJobRunState:
    return InMemoryJobRunState(clock)


def test_the_first_claim_starts_a_run(state: InMemoryJobRunState) -> None:
    assert state.claim(JOB, SIX, queue=False, ttl_ms=60_000) is Claim.STARTED
    assert state.running(JOB) == SIX


def test_a_claim_while_a_run_is_in_progress_is_busy_without_queueing(
    state: InMemoryJobRunState,
) -> None:
    state.claim(JOB, SIX, queue=False, ttl_ms=60_000)

    assert state.claim(JOB, SIX + QUARTER, queue=False, ttl_ms=60_000) is Claim.BUSY
    assert state.running(JOB) == SIX


def test_with_queueing_one_occurrence_waits_and_the_next_ones_are_busy(
    state: InMemoryJobRunState,
) -> None:
    state.claim(JOB, SIX, queue=True, ttl_ms=60_000)

    assert state.claim(JOB, SIX + QUARTER, queue=True, ttl_ms=60_000) is Claim.QUEUED
    assert state.claim(JOB, SIX + 2 * QUARTER, queue=True, ttl_ms=60_000) is Claim.BUSY


def test_finishing_promotes_the_queued_occurrence_to_the_run_in_progress(
    state: InMemoryJobRunState,
) -> None:
    state.claim(JOB, SIX, queue=True, ttl_ms=60_000)
    state.claim(JOB, SIX + QUARTER, queue=True, ttl_ms=60_000)

    assert state.finish(JOB, SIX, ttl_ms=60_000) == SIX + QUARTER
    assert state.running(JOB) == SIX + QUARTER
    assert state.finish(JOB, SIX + QUARTER, ttl_ms=60_000) is None
    assert state.running(JOB) is None


def test_finishing_a_run_that_is_no_longer_in_progress_changes_nothing(
    state: InMemoryJobRunState,
) -> None:
    state.claim(JOB, SIX + QUARTER, queue=False, ttl_ms=60_000)

    assert state.finish(JOB, SIX, ttl_ms=60_000) is None
    assert state.running(JOB) == SIX + QUARTER


def test_a_run_whose_end_is_never_reported_expires_after_its_time_to_live(
    clock: FixedClock, state: InMemoryJobRunState
) -> None:
    state.claim(JOB, SIX, queue=False, ttl_ms=60_000)

    clock.advance(59_999)
    assert state.running(JOB) == SIX
    clock.advance(1)
    assert state.running(JOB) is None
    assert state.claim(JOB, SIX + QUARTER, queue=False, ttl_ms=60_000) is Claim.STARTED


def test_dropping_the_queued_occurrence_returns_it_once(state: InMemoryJobRunState) -> None:
    state.claim(JOB, SIX, queue=True, ttl_ms=60_000)
    state.claim(JOB, SIX + QUARTER, queue=True, ttl_ms=60_000)

    assert state.drop_queued(JOB) == SIX + QUARTER
    assert state.drop_queued(JOB) is None
    assert state.finish(JOB, SIX, ttl_ms=60_000) is None


def test_run_state_is_kept_per_job(state: InMemoryJobRunState) -> None:
    state.claim(JOB, SIX, queue=False, ttl_ms=60_000)

    assert state.claim("billing.export-ledger", SIX, queue=False, ttl_ms=60_000) is Claim.STARTED


def test_a_run_time_to_live_that_is_not_positive_is_refused(state: InMemoryJobRunState) -> None:
    with pytest.raises(ValueError, match="positive"):
        state.claim(JOB, SIX, queue=False, ttl_ms=0)
