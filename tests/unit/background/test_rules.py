"""The job rules: the moves table, backoff with jitter, dead after max_attempts, run statuses,
re-send waits, tenant filters and idempotency keys scoped by tenant."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ddd_celery.background import (
    EnqueuedBy,
    JobInterruptedError,
    JobStatus,
    RunStatus,
    heartbeat_interval_ms,
    tenant_key_of,
)
from ddd_celery.background.rules import (
    KEYED_IDS,
    MOVES,
    AttemptEnd,
    IllegalJobMoveError,
    JobEvent,
    after_failure,
    backoff_ms,
    end_of,
    keyed_job_id,
    move,
    redispatch_wait_ms,
    run_status,
    scoped_idempotency_key,
    tenant_filter,
)
from ddd_celery.declarations import BackgroundOptions
from ddd_celery.scheduling import JobAbortedError, JobTimeoutError

NOW = datetime(2026, 10, 1, 8, 0, tzinfo=UTC)
OPTIONS = BackgroundOptions(max_attempts=5, backoff_ms=1_000, max_backoff_ms=10_000)


def never_jitter() -> float:
    return 0.999_999


def test_the_moves_table_is_the_documented_lifecycle() -> None:
    assert {
        (status.value, event.value, target.value) for (status, event), target in MOVES.items()
    } == {
        ("queued", "claim", "running"),
        ("failed", "claim", "running"),
        ("running", "complete", "succeeded"),
        ("running", "retry", "failed"),
        ("running", "die", "dead"),
        ("running", "release", "queued"),
        ("queued", "cancel", "cancelled"),
        ("failed", "cancel", "cancelled"),
        ("running", "cancel", "cancelled"),
        ("dead", "retry_dead", "queued"),
    }


@pytest.mark.parametrize(
    ("status", "event"),
    [
        (JobStatus.SUCCEEDED, JobEvent.CANCEL),
        (JobStatus.CANCELLED, JobEvent.CLAIM),
        (JobStatus.RUNNING, JobEvent.CLAIM),
        (JobStatus.QUEUED, JobEvent.COMPLETE),
        (JobStatus.DEAD, JobEvent.CLAIM),
        (JobStatus.QUEUED, JobEvent.RETRY_DEAD),
    ],
)
def test_an_illegal_move_is_refused(status: JobStatus, event: JobEvent) -> None:
    with pytest.raises(IllegalJobMoveError, match=f"a {status} job cannot {event}"):
        move(status, event)


def test_every_finished_status_is_a_dead_end_but_dead() -> None:
    for status in (JobStatus.SUCCEEDED, JobStatus.CANCELLED):
        assert not [event for (source, event) in MOVES if source is status]
    assert [event for (source, event) in MOVES if source is JobStatus.DEAD] == [JobEvent.RETRY_DEAD]


def test_the_backoff_doubles_with_each_attempt_up_to_its_cap() -> None:
    waits = [backoff_ms(attempt, OPTIONS, never_jitter) for attempt in range(1, 7)]

    assert waits == [1_000, 2_000, 4_000, 8_000, 10_000, 10_000]


def test_the_jitter_keeps_a_wait_in_the_upper_half_of_its_backoff() -> None:
    assert backoff_ms(3, OPTIONS, lambda: 0.0) == 2_000
    assert backoff_ms(3, OPTIONS, lambda: 0.5) == 3_000
    assert 2_000 <= backoff_ms(3, OPTIONS, lambda: 0.999_999) <= 4_000


def test_a_wait_is_never_zero() -> None:
    tiny = BackgroundOptions(backoff_ms=1, max_backoff_ms=1)

    assert backoff_ms(1, tiny, lambda: 0.0) == 1


def test_a_huge_attempt_number_is_capped_without_overflow() -> None:
    assert backoff_ms(10_000, OPTIONS, never_jitter) == 10_000


def test_a_failed_attempt_with_attempts_left_runs_again_after_its_backoff() -> None:
    retry_at = after_failure(2, 5, NOW, OPTIONS, never_jitter)

    assert retry_at == NOW + timedelta(milliseconds=2_000)


def test_the_last_attempt_leaves_the_job_dead() -> None:
    assert after_failure(5, 5, NOW, OPTIONS, never_jitter) is None
    assert after_failure(1, 1, NOW, OPTIONS, never_jitter) is None


def test_after_failure_refuses_a_naive_now() -> None:
    with pytest.raises(ValueError, match="aware"):
        after_failure(1, 3, NOW.replace(tzinfo=None), OPTIONS, never_jitter)


def test_an_aborted_attempt_ends_as_its_reason_says_whatever_the_job_did() -> None:
    assert end_of(None, JobAbortedError("stop")) is AttemptEnd.RELEASED
    assert end_of(None, JobInterruptedError("lost")) is AttemptEnd.INTERRUPTED
    assert end_of(None, JobTimeoutError("late")) is AttemptEnd.FAILED
    assert end_of(RuntimeError("x"), JobAbortedError("stop")) is AttemptEnd.RELEASED


def test_an_attempt_that_was_not_aborted_ends_as_the_job_did() -> None:
    assert end_of(None, None) is AttemptEnd.SUCCEEDED
    assert end_of(RuntimeError("x"), None) is AttemptEnd.FAILED


def test_a_failed_attempt_is_retried_or_dead_by_its_retry_instant() -> None:
    assert run_status(AttemptEnd.FAILED, NOW) is RunStatus.RETRIED
    assert run_status(AttemptEnd.FAILED, None) is RunStatus.DEAD
    assert run_status(AttemptEnd.SUCCEEDED, None) is RunStatus.SUCCEEDED
    assert run_status(AttemptEnd.RELEASED, None) is RunStatus.RELEASED
    assert run_status(AttemptEnd.INTERRUPTED, None) is RunStatus.INTERRUPTED


def test_a_lease_is_renewed_three_times_per_lease() -> None:
    assert heartbeat_interval_ms(30_000) == 10_000
    assert heartbeat_interval_ms(2) == 1


def test_the_tenant_key_is_the_tenant_or_the_empty_text() -> None:
    assert tenant_key_of(EnqueuedBy(tenant_id="t-1")) == "t-1"
    assert tenant_key_of(EnqueuedBy()) == ""


@given(
    attempt=st.integers(min_value=1, max_value=200),
    backoff=st.integers(min_value=1, max_value=100_000),
    spread=st.integers(min_value=0, max_value=10_000_000),
    jitter=st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
)
def test_every_wait_lies_between_half_its_capped_backoff_and_all_of_it(
    attempt: int, backoff: int, spread: int, jitter: float
) -> None:
    options = BackgroundOptions(backoff_ms=backoff, max_backoff_ms=backoff + spread)
    capped = min(backoff + spread, backoff * 2 ** (attempt - 1))

    wait = backoff_ms(attempt, options, lambda: jitter)

    assert max(1, capped / 2) <= wait <= capped


@given(
    backoff=st.integers(min_value=1, max_value=100_000),
    jitter=st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
)
def test_for_the_same_draw_a_later_attempt_never_waits_less(backoff: int, jitter: float) -> None:
    options = BackgroundOptions(backoff_ms=backoff, max_backoff_ms=backoff * 1_000)

    waits = [backoff_ms(attempt, options, lambda: jitter) for attempt in range(1, 20)]

    assert waits == sorted(waits)


@pytest.mark.parametrize(
    ("tenant", "key", "scoped"),
    [
        ("org", "42:inv-1", "3:org:42:inv-1"),
        ("org:42", "inv-1", "6:org:42:inv-1"),
        (None, "k", "0::k"),
        ("été", "k", "5:été:k"),
        ("a\x1fb", "c", "3:a\x1fb:c"),
    ],
)
def test_an_idempotency_key_is_scoped_by_its_tenants_length_in_bytes(
    tenant: str | None, key: str, scoped: str
) -> None:
    assert scoped_idempotency_key(tenant, key) == scoped


def test_derived_job_ids_no_longer_collide_where_a_separator_did() -> None:
    def joined(tenant: str, key: str) -> uuid.UUID:  # the id as it was derived before
        return uuid.uuid5(KEYED_IDS, f"{tenant}\x1f{key}")

    assert joined("a\x1fb", "c") == joined("a", "b\x1fc")
    assert keyed_job_id("a\x1fb", "c") != keyed_job_id("a", "b\x1fc")
    assert keyed_job_id("org", "42:inv-1") != keyed_job_id("org:42", "inv-1")
    assert keyed_job_id(None, "k") == str(uuid.uuid5(KEYED_IDS, "0::k"))


def _unscoped(scoped: str) -> tuple[str, str]:
    """Read a scoped key back: the length says where the tenant ends."""
    length, _, rest = scoped.partition(":")
    raw = rest.encode()
    tenant, separator, key = (
        raw[: int(length)],
        raw[int(length) : int(length) + 1],
        raw[int(length) + 1 :],
    )
    assert separator == b":"
    return tenant.decode(), key.decode()


@given(tenant=st.none() | st.text(min_size=1), key=st.text())
def test_a_scoped_key_reads_back_as_its_tenant_and_key_so_no_two_pairs_share_one(
    tenant: str | None, key: str
) -> None:
    assert _unscoped(scoped_idempotency_key(tenant, key)) == (tenant or "", key)


@pytest.mark.parametrize(
    ("resends", "wait"), [(0, 1_000), (1, 2_000), (2, 4_000), (3, 8_000), (4, 8_000), (60, 8_000)]
)
def test_a_resend_waits_twice_as_long_as_the_one_before_up_to_eight_times(
    resends: int, wait: int
) -> None:
    assert redispatch_wait_ms(1_000, resends) == wait


def test_a_negative_count_of_resends_is_refused() -> None:
    with pytest.raises(ValueError, match="resends"):
        redispatch_wait_ms(1_000, -1)


def test_the_empty_tenant_id_is_refused_as_a_filter() -> None:
    assert tenant_filter(None) is None
    assert tenant_filter("t-1") == "t-1"
    with pytest.raises(ValueError, match="tenant id is never empty"):
        tenant_filter("")
