"""The contract of ``OccurrenceStore``: every adapter does what the separate ports would do.

Subclass ``OccurrenceStoreContract`` in a test module and provide the fixture
``occurrence_store_subject``, returning an ``OccurrenceStoreSubject``. The suite reads what a
store did through the separate ports on the same store (the lock, the run state, the
checkpoints, the last runs), so a combined store is held to exactly what the composed one does.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from ddd_celery.kernel.lock import Lock
from ddd_celery.scheduling.checkpoints import JobCheckpoints
from ddd_celery.scheduling.last_runs import JobLastRuns
from ddd_celery.scheduling.occurrence import lock_key
from ddd_celery.scheduling.occurrence_store import (
    IN_THE_LOCK,
    IN_THE_RUN_STATE,
    Beginning,
    OccurrenceStore,
)
from ddd_celery.scheduling.outcomes import JobRun, Outcome
from ddd_celery.scheduling.run_state import Claim, JobRunState

JOB = "billing.send-payment-reminders"
T0 = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=15)
LOCK_TTL_MS = 60_000
RUN_TTL_MS = 30_000


@dataclass(frozen=True, slots=True)
class OccurrenceStoreSubject:
    """A store under test, another beat's on the same stores, and those stores' own ports."""

    store: OccurrenceStore
    peer: OccurrenceStore
    """Another instance on the same stores, as another beat holds it."""
    lock: Lock
    run_state: JobRunState
    checkpoints: JobCheckpoints | None
    """Where ``begin`` writes the checkpoint; None for a store that leaves it to the caller."""
    last_runs: JobLastRuns
    half_broken: OccurrenceStore
    """A store on the same stores of which a part cannot be asked: what it did before the
    failure must be what it says it did."""


def beginning(
    at: datetime = T0,
    *,
    job: str = JOB,
    locked: bool = True,
    claim: bool = True,
    queue: bool = False,
) -> Beginning:
    return Beginning(
        job=job,
        scheduled_at=at,
        lock_key=lock_key(job, at) if locked else None,
        lock_ttl_ms=LOCK_TTL_MS,
        claim=claim,
        queue=queue,
        run_ttl_ms=RUN_TTL_MS,
    )


def succeeded(at: datetime, job: str = JOB) -> JobRun:
    return JobRun(
        job=job,
        scheduled_at=at,
        outcome=Outcome.SUCCEEDED,
        context=job.split(".", 1)[0],
        started_at=at + timedelta(milliseconds=5),
        duration_ms=12.5,
        correlation_id="c0ffee",
    )


class OccurrenceStoreContract:
    """Lock, checkpoint and claim in one call per batch; last run and end of run in one."""

    def test_a_free_occurrence_is_locked_checkpointed_and_started(
        self, occurrence_store_subject: OccurrenceStoreSubject
    ) -> None:
        subject = occurrence_store_subject
        begun = beginning()

        assert subject.store.begin([begun]) == []

        assert begun.error is None
        assert begun.lock_held is False
        assert begun.claimed is Claim.STARTED
        assert begun.lease is not None
        assert begun.lease.key == lock_key(JOB, T0)
        assert subject.lock.acquire(lock_key(JOB, T0), LOCK_TTL_MS) is None
        assert subject.run_state.running(JOB) == T0
        if subject.checkpoints is not None:
            assert begun.checkpointed is True
            assert subject.checkpoints.read(JOB) == T0

    def test_the_lock_taken_and_the_claim_refused_keep_the_lease_and_the_run_in_progress(
        self, occurrence_store_subject: OccurrenceStoreSubject
    ) -> None:
        subject = occurrence_store_subject
        subject.run_state.claim(JOB, T0, queue=False, ttl_ms=RUN_TTL_MS)
        begun = beginning(T1)

        subject.store.begin([begun])

        assert begun.claimed is Claim.BUSY
        assert begun.lease is not None
        assert subject.lock.acquire(lock_key(JOB, T1), LOCK_TTL_MS) is None
        assert subject.run_state.running(JOB) == T0
        if subject.checkpoints is not None:
            assert subject.checkpoints.read(JOB) == T1

    def test_an_occurrence_claimed_during_a_run_waits_behind_it_when_queueing(
        self, occurrence_store_subject: OccurrenceStoreSubject
    ) -> None:
        subject = occurrence_store_subject
        subject.run_state.claim(JOB, T0, queue=False, ttl_ms=RUN_TTL_MS)
        begun = beginning(T1, queue=True)

        subject.store.begin([begun])

        assert begun.claimed is Claim.QUEUED
        assert subject.run_state.finish(JOB, T0, ttl_ms=RUN_TTL_MS) == T1

    def test_a_lock_held_elsewhere_stops_there_nothing_claimed_nor_checkpointed(
        self, occurrence_store_subject: OccurrenceStoreSubject
    ) -> None:
        subject = occurrence_store_subject
        assert subject.lock.acquire(lock_key(JOB, T0), LOCK_TTL_MS) is not None
        begun = beginning()

        subject.store.begin([begun])

        assert begun.lock_held is True
        assert begun.lease is None
        assert begun.claimed is None
        assert begun.checkpointed is False
        assert subject.run_state.running(JOB) is None
        if subject.checkpoints is not None:
            assert subject.checkpoints.read(JOB) is None

    def test_without_a_lock_or_a_claim_only_what_is_asked_is_done(
        self, occurrence_store_subject: OccurrenceStoreSubject
    ) -> None:
        subject = occurrence_store_subject
        unlocked, unclaimed = beginning(locked=False), beginning(job=f"{JOB}:entry", claim=False)

        subject.store.begin([unlocked, unclaimed])

        assert unlocked.lease is None
        assert unlocked.claimed is Claim.STARTED
        assert subject.lock.acquire(lock_key(JOB, T0), LOCK_TTL_MS) is not None
        assert unclaimed.lease is not None
        assert unclaimed.claimed is None
        assert subject.run_state.running(f"{JOB}:entry") is None

    def test_each_occurrence_of_a_batch_keeps_its_own_lock_and_answer(
        self, occurrence_store_subject: OccurrenceStoreSubject
    ) -> None:
        subject = occurrence_store_subject
        jobs = [f"{JOB}:{index}" for index in range(12)]
        subject.lock.acquire(lock_key(jobs[3], T0), LOCK_TTL_MS)
        subject.run_state.claim(jobs[5], T0 - timedelta(minutes=1), queue=False, ttl_ms=RUN_TTL_MS)
        batch = [beginning(job=job) for job in jobs]

        subject.store.begin(batch)

        answers = {begun.job: begun.claimed for begun in batch}
        assert batch[3].lock_held is True
        assert answers[jobs[3]] is None
        assert answers[jobs[5]] is Claim.BUSY
        others = [job for job in jobs if job not in (jobs[3], jobs[5])]
        assert all(answers[job] is Claim.STARTED for job in others)
        assert len({begun.lease.token for begun in batch if begun.lease is not None}) == 11

    def test_an_occurrence_twice_in_a_batch_is_begun_once_the_second_held(
        self, occurrence_store_subject: OccurrenceStoreSubject
    ) -> None:
        subject = occurrence_store_subject
        first, again, other = beginning(), beginning(), beginning(job=f"{JOB}:other")

        subject.store.begin([first, again, other])

        assert (first.claimed, first.lock_held) == (Claim.STARTED, False)
        assert (again.claimed, again.lock_held, again.lease) == (None, True, None)
        assert other.claimed is Claim.STARTED
        assert first.lease is not None
        assert subject.lock.release(first.lease) is True, "the lock is the first's"

    def test_leases_no_beat_still_wants_are_released_with_the_batch(
        self, occurrence_store_subject: OccurrenceStoreSubject
    ) -> None:
        subject = occurrence_store_subject
        old = beginning(T0)
        subject.store.begin([old])
        assert old.lease is not None

        released = subject.store.begin([beginning(T1)], releasing=[old.lease])

        assert released == [None]
        assert subject.lock.acquire(lock_key(JOB, T0), LOCK_TTL_MS) is not None

    def test_a_lease_another_owner_holds_is_not_released(
        self, occurrence_store_subject: OccurrenceStoreSubject
    ) -> None:
        subject = occurrence_store_subject
        mine = beginning(T0)
        subject.store.begin([mine])
        assert mine.lease is not None
        subject.store.begin([], releasing=[mine.lease])
        theirs = subject.lock.acquire(lock_key(JOB, T0), LOCK_TTL_MS)
        assert theirs is not None

        subject.store.begin([], releasing=[mine.lease])

        assert subject.lock.acquire(lock_key(JOB, T0), LOCK_TTL_MS) is None
        assert subject.lock.release(theirs) is True

    def test_two_beats_racing_on_a_batch_begin_each_occurrence_once(
        self, occurrence_store_subject: OccurrenceStoreSubject
    ) -> None:
        subject = occurrence_store_subject
        jobs = [f"{JOB}:{index}" for index in range(40)]
        batches = {name: [beginning(job=job) for job in jobs] for name in ("one", "other")}
        start = threading.Barrier(2)

        def race(store: OccurrenceStore, batch: list[Beginning]) -> None:
            start.wait()
            store.begin(batch)

        threads = [
            threading.Thread(target=race, args=(subject.store, batches["one"])),
            threading.Thread(target=race, args=(subject.peer, batches["other"])),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        started = Counter(
            begun.job for batch in batches.values() for begun in batch if begun.lease is not None
        )
        assert started == Counter(jobs)
        for one, other in zip(batches["one"], batches["other"], strict=True):
            assert {one.lock_held, other.lock_held} == {True, False}
            assert {one.claimed, other.claimed} == {Claim.STARTED, None}

    def test_two_beats_racing_on_a_batch_in_opposite_orders_begin_each_occurrence_once(
        self, occurrence_store_subject: OccurrenceStoreSubject
    ) -> None:
        """Beats list the same occurrences in any order: none may wait for the other forever
        (a store taking rows in the order given deadlocks, and fails a whole batch)."""
        subject = occurrence_store_subject
        jobs = [f"{JOB}:{index}" for index in range(40)]
        one = [beginning(job=job, queue=True) for job in jobs]
        other = [beginning(job=job, queue=True) for job in reversed(jobs)]
        start = threading.Barrier(2)

        def race(store: OccurrenceStore, batch: list[Beginning]) -> None:
            start.wait()
            store.begin(batch)

        threads = [
            threading.Thread(target=race, args=(subject.store, one)),
            threading.Thread(target=race, args=(subject.peer, other)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        assert [begun.error for begun in one + other] == [None] * 80
        started = Counter(begun.job for begun in one + other if begun.claimed is Claim.STARTED)
        assert started == Counter(jobs)
        assert sum(begun.lock_held for begun in one + other) == 40

    def test_a_begin_repeated_with_the_tokens_of_the_first_answers_as_the_first(
        self, occurrence_store_subject: OccurrenceStoreSubject
    ) -> None:
        """redis-py sends a script again on a new connection when the first reply is late: the
        beat whose first send took a lock must find it its own, never another beat's (that
        would record ``skipped-locked`` and send nothing: a lost occurrence)."""
        subject = occurrence_store_subject
        jobs = [f"{JOB}:{name}" for name in ("free", "queued", "busy", "held", "unclaimed")]
        subject.run_state.claim(jobs[1], T0, queue=False, ttl_ms=RUN_TTL_MS)
        subject.run_state.claim(jobs[2], T0, queue=False, ttl_ms=RUN_TTL_MS)
        theirs = subject.lock.acquire(lock_key(jobs[3], T1), LOCK_TTL_MS)
        assert theirs is not None
        first = [
            beginning(T1, job=jobs[0]),
            beginning(T1, job=jobs[1], queue=True),
            beginning(T1, job=jobs[2]),
            beginning(T1, job=jobs[3]),
            beginning(T1, job=jobs[4], claim=False),
        ]
        subject.store.begin(first)
        again = [
            replace(beginning(T1, job=b.job, claim=b.claim, queue=b.queue), token=b.token)
            for b in first
        ]

        subject.store.begin(again)

        answers = [(b.lock_held, b.claimed, b.lease is not None) for b in first]
        assert answers == [
            (False, Claim.STARTED, True),
            (False, Claim.QUEUED, True),
            (False, Claim.BUSY, True),
            (True, None, False),
            (False, None, True),
        ]
        if not subject.store.keeps_tokens:
            # Each port draws its own token: the lock the first begin took reads another's.
            assert [b.lock_held for b in again] == [True, True, True, True, True]
            return
        assert [(b.lock_held, b.claimed, b.lease is not None) for b in again] == answers
        assert [b.lease.token for b in again if b.lease is not None] == [
            b.lease.token for b in first if b.lease is not None
        ]
        assert subject.run_state.running(jobs[0]) == T1
        assert subject.run_state.finish(jobs[1], T0, ttl_ms=RUN_TTL_MS) == T1, "queued once"
        assert subject.run_state.running(jobs[2]) == T0
        for begun in first:
            if begun.lease is not None:
                assert subject.lock.release(begun.lease) is True, "the first's lease holds"
        assert subject.lock.release(theirs) is True

    def test_a_store_failing_half_way_says_what_it_did_and_never_raises(
        self, occurrence_store_subject: OccurrenceStoreSubject
    ) -> None:
        subject = occurrence_store_subject
        batch = [beginning(job=f"{JOB}:{index}") for index in range(3)]

        subject.half_broken.begin(batch)

        for begun in batch:
            assert begun.error is not None
            assert begun.failed_in in (IN_THE_LOCK, IN_THE_RUN_STATE)
            assert begun.claimed is None
            if begun.failed_in == IN_THE_RUN_STATE:
                assert begun.lease is not None
                assert begun.may_have_claimed is True
                assert subject.lock.acquire(lock_key(begun.job, T0), LOCK_TTL_MS) is None
            else:
                assert begun.lease is None

    def test_free_ends_the_claim_and_drops_what_waited_behind_it(
        self, occurrence_store_subject: OccurrenceStoreSubject
    ) -> None:
        subject = occurrence_store_subject
        begun = beginning(T0)
        subject.store.begin([begun])
        subject.run_state.claim(JOB, T1, queue=True, ttl_ms=RUN_TTL_MS)

        assert subject.store.free(begun) == T1

        assert subject.run_state.running(JOB) is None

    def test_free_never_ends_a_claim_whose_lock_is_another_beats(
        self, occurrence_store_subject: OccurrenceStoreSubject
    ) -> None:
        subject = occurrence_store_subject
        theirs, mine = beginning(T0), beginning(T0)
        subject.peer.begin([theirs])
        subject.store.begin([mine])
        assert mine.lock_held is True

        assert subject.store.free(mine) is None

        assert subject.run_state.running(JOB) == T0

    def test_end_keeps_the_last_run_and_promotes_what_waited(
        self, occurrence_store_subject: OccurrenceStoreSubject
    ) -> None:
        subject = occurrence_store_subject
        subject.run_state.claim(JOB, T0, queue=False, ttl_ms=RUN_TTL_MS)
        subject.run_state.claim(JOB, T1, queue=True, ttl_ms=RUN_TTL_MS)

        ended = subject.store.end(JOB, T0, ttl_ms=RUN_TTL_MS, last_run=succeeded(T0))

        assert ended.promoted == T1
        assert ended.last_run_error is None
        assert ended.finish_error is None
        assert subject.run_state.running(JOB) == T1
        assert subject.last_runs.read(JOB) == succeeded(T0)

    def test_end_never_replaces_the_last_run_of_a_later_occurrence(
        self, occurrence_store_subject: OccurrenceStoreSubject
    ) -> None:
        subject = occurrence_store_subject
        subject.last_runs.write(succeeded(T1))
        subject.run_state.claim(JOB, T0, queue=False, ttl_ms=RUN_TTL_MS)

        ended = subject.store.end(JOB, T0, ttl_ms=RUN_TTL_MS, last_run=succeeded(T0))

        assert ended.promoted is None
        assert subject.run_state.running(JOB) is None
        assert subject.last_runs.read(JOB) == succeeded(T1)

    def test_end_of_a_run_no_longer_in_progress_changes_no_run(
        self, occurrence_store_subject: OccurrenceStoreSubject
    ) -> None:
        subject = occurrence_store_subject
        subject.run_state.claim(JOB, T1, queue=False, ttl_ms=RUN_TTL_MS)

        ended = subject.store.end(JOB, T0, ttl_ms=RUN_TTL_MS, last_run=None)

        assert ended.promoted is None
        assert subject.run_state.running(JOB) == T1
        assert subject.last_runs.read(JOB) is None
