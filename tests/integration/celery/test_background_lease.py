"""Heartbeats: an attempt whose lease ran out unrenewed stops itself, timed on a monotonic clock."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

from ddd_celery.background import InMemoryJobStore, JobInterruptedError, JobLease
from ddd_celery.celery.background.lease import Heartbeats
from ddd_celery.kernel import FixedClock
from ddd_celery.kernel.abort import AbortController

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
LEASE_MS = 300


class CutOffStore(InMemoryJobStore):
    """A store every heartbeat of which fails as if the network were cut, while ``cut``."""

    def __init__(self) -> None:
        super().__init__()
        self.cut = threading.Event()
        self.beats = 0

    def heartbeat(self, lease: JobLease, *, now: datetime, lease_ms: int) -> JobLease:
        self.beats += 1
        if self.cut.is_set():
            raise ConnectionError("the store cannot be asked")
        return JobLease(
            lease.job_id, lease.attempt, lease.token, now + timedelta(milliseconds=lease_ms)
        )


def heartbeats_on(store: CutOffStore, errors: list[Exception]) -> Heartbeats:
    return Heartbeats(
        store,
        FixedClock(START),
        lease_ms=LEASE_MS,
        every_ms=50,
        on_error=lambda job, job_id, error: errors.append(error),
    )


LEASE = JobLease("job-1", 1, "token-1", START + timedelta(milliseconds=LEASE_MS))


def test_an_attempt_no_beat_of_which_reaches_the_store_for_the_lease_aborts_itself() -> None:
    store, errors = CutOffStore(), []
    store.cut.set()
    controller = AbortController()
    heartbeats = heartbeats_on(store, errors)

    claimed_at = time.monotonic()
    with heartbeats.keep(LEASE, job="ledger.send", controller=controller, claimed_at=claimed_at):
        assert controller.signal.wait(5)
        aborted_after = time.monotonic() - claimed_at
        beats = store.beats
        time.sleep(0.2)

    assert isinstance(controller.signal.reason, JobInterruptedError)
    assert "could not renew its lease within lease_ms=300" in str(controller.signal.reason)
    assert aborted_after >= LEASE_MS / 1000  # never before its lease could have run out
    assert store.beats == beats, "an attempt that stopped itself is beaten no more"
    assert errors != []
    assert all(isinstance(error, ConnectionError) for error in errors)


def test_the_lease_is_timed_from_the_last_beat_the_store_answered() -> None:
    store, errors = CutOffStore(), []
    controller = AbortController()
    heartbeats = heartbeats_on(store, errors)

    with heartbeats.keep(LEASE, job="ledger.send", controller=controller):
        assert not controller.signal.wait(3 * LEASE_MS / 1000), "answered beats keep it going"
        store.cut.set()
        cut_at = time.monotonic()
        assert controller.signal.wait(5)
        aborted_after = time.monotonic() - cut_at

    assert isinstance(controller.signal.reason, JobInterruptedError)
    # the last answered beat was sent at most one period before the cut
    assert aborted_after >= LEASE_MS / 1000 - 0.05 - 0.01
