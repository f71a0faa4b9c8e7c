"""The contract of ``JobRunState``: every adapter passes the same tests.

Subclass ``JobRunStateContract`` in a test module and provide the fixture
``run_state_subject``, returning a ``JobRunStateSubject`` (parametrise it to run the suite over
several adapters). Instants are whole milliseconds: what every store keeps.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from ddd_celery.scheduling.run_state import Claim, JobRunState

JOB = "billing.send-payment-reminders"
T0 = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=15)
T2 = T0 + timedelta(minutes=30)
TTL_MS = 10_000
MARGIN_MS = 4_000
"""Time to live left when a test checks a key is still held: real time passes between two steps
on a store with its own clock (Redis), a second or more on a loaded machine."""


@dataclass(frozen=True, slots=True)
class JobRunStateSubject:
    """An adapter under test, another instance on the same store, and the means to let time pass."""

    state: JobRunState
    """The run state under test."""
    peer: JobRunState
    """Another instance on the same store, as another beat or a worker holds it (``state``
    itself for a store that lives in one process)."""
    elapse: Callable[[int], object]
    """Let that many milliseconds pass for the store's expiry.

    The contract keeps a second of margin around every expiry, so a store that expires on its
    own clock may let real time run a little."""


class JobRunStateContract:
    """The run in progress of each job and at most one occurrence queued behind it."""

    def test_a_job_never_claimed_has_no_run_in_progress(
        self, run_state_subject: JobRunStateSubject
    ) -> None:
        assert run_state_subject.state.running(JOB) is None

    def test_a_claim_on_an_idle_job_starts_the_occurrence(
        self, run_state_subject: JobRunStateSubject
    ) -> None:
        claim = run_state_subject.state.claim(JOB, T0, queue=False, ttl_ms=TTL_MS)

        assert claim is Claim.STARTED
        assert run_state_subject.state.running(JOB) == T0

    def test_the_run_in_progress_is_read_in_utc_whatever_zone_it_was_claimed_in(
        self, run_state_subject: JobRunStateSubject
    ) -> None:
        paris = T0.astimezone(ZoneInfo("Europe/Paris"))
        run_state_subject.state.claim(JOB, paris, queue=False, ttl_ms=TTL_MS)

        running = run_state_subject.state.running(JOB)
        assert running == T0
        assert running is not None
        assert running.utcoffset() == timedelta(0)

    def test_a_claim_during_a_run_is_busy_when_not_queueing(
        self, run_state_subject: JobRunStateSubject
    ) -> None:
        run_state_subject.state.claim(JOB, T0, queue=False, ttl_ms=TTL_MS)

        assert run_state_subject.state.claim(JOB, T1, queue=False, ttl_ms=TTL_MS) is Claim.BUSY
        assert run_state_subject.state.running(JOB) == T0
        assert run_state_subject.state.finish(JOB, T0, ttl_ms=TTL_MS) is None

    def test_a_claim_during_a_run_waits_behind_it_when_queueing(
        self, run_state_subject: JobRunStateSubject
    ) -> None:
        run_state_subject.state.claim(JOB, T0, queue=True, ttl_ms=TTL_MS)

        assert run_state_subject.state.claim(JOB, T1, queue=True, ttl_ms=TTL_MS) is Claim.QUEUED
        assert run_state_subject.state.running(JOB) == T0

    def test_a_claim_sent_again_answers_as_the_claim_that_made_it(
        self, run_state_subject: JobRunStateSubject
    ) -> None:
        state = run_state_subject.state
        assert state.claim(JOB, T0, queue=True, ttl_ms=TTL_MS) is Claim.STARTED
        assert state.claim(JOB, T1, queue=True, ttl_ms=TTL_MS) is Claim.QUEUED

        assert state.claim(JOB, T0, queue=True, ttl_ms=TTL_MS) is Claim.STARTED
        assert state.claim(JOB, T0, queue=False, ttl_ms=TTL_MS) is Claim.STARTED
        assert state.claim(JOB, T1, queue=True, ttl_ms=TTL_MS) is Claim.QUEUED
        assert state.claim(JOB, T2, queue=True, ttl_ms=TTL_MS) is Claim.BUSY
        assert state.finish(JOB, T0, ttl_ms=TTL_MS) == T1
        assert state.finish(JOB, T1, ttl_ms=TTL_MS) is None

    def test_only_one_occurrence_waits_behind_a_run(
        self, run_state_subject: JobRunStateSubject
    ) -> None:
        run_state_subject.state.claim(JOB, T0, queue=True, ttl_ms=TTL_MS)
        run_state_subject.state.claim(JOB, T1, queue=True, ttl_ms=TTL_MS)

        assert run_state_subject.state.claim(JOB, T2, queue=True, ttl_ms=TTL_MS) is Claim.BUSY
        assert run_state_subject.state.finish(JOB, T0, ttl_ms=TTL_MS) == T1

    def test_finishing_a_run_with_nothing_queued_frees_the_job(
        self, run_state_subject: JobRunStateSubject
    ) -> None:
        run_state_subject.state.claim(JOB, T0, queue=True, ttl_ms=TTL_MS)

        assert run_state_subject.state.finish(JOB, T0, ttl_ms=TTL_MS) is None
        assert run_state_subject.state.running(JOB) is None
        assert run_state_subject.state.claim(JOB, T1, queue=True, ttl_ms=TTL_MS) is Claim.STARTED

    def test_finishing_a_run_promotes_the_queued_occurrence(
        self, run_state_subject: JobRunStateSubject
    ) -> None:
        run_state_subject.state.claim(JOB, T0, queue=True, ttl_ms=TTL_MS)
        run_state_subject.state.claim(JOB, T1, queue=True, ttl_ms=TTL_MS)

        assert run_state_subject.state.finish(JOB, T0, ttl_ms=TTL_MS) == T1
        assert run_state_subject.state.running(JOB) == T1
        assert run_state_subject.state.claim(JOB, T2, queue=True, ttl_ms=TTL_MS) is Claim.QUEUED

    def test_a_promoted_run_lives_for_the_time_to_live_given_to_finish(
        self, run_state_subject: JobRunStateSubject
    ) -> None:
        run_state_subject.state.claim(JOB, T0, queue=True, ttl_ms=TTL_MS)
        run_state_subject.state.claim(JOB, T1, queue=True, ttl_ms=TTL_MS)
        run_state_subject.elapse(TTL_MS // 2)
        run_state_subject.state.finish(JOB, T0, ttl_ms=3 * TTL_MS)

        run_state_subject.elapse(3 * TTL_MS - MARGIN_MS)
        assert run_state_subject.state.running(JOB) == T1
        run_state_subject.elapse(MARGIN_MS)
        assert run_state_subject.state.running(JOB) is None

    def test_a_run_in_progress_expires_after_its_time_to_live(
        self, run_state_subject: JobRunStateSubject
    ) -> None:
        run_state_subject.state.claim(JOB, T0, queue=False, ttl_ms=TTL_MS)

        run_state_subject.elapse(TTL_MS - MARGIN_MS)
        assert run_state_subject.state.running(JOB) == T0
        run_state_subject.elapse(MARGIN_MS)
        assert run_state_subject.state.running(JOB) is None
        assert run_state_subject.state.claim(JOB, T1, queue=False, ttl_ms=TTL_MS) is Claim.STARTED

    def test_the_queued_occurrence_expires_with_the_run_it_waits_behind(
        self, run_state_subject: JobRunStateSubject
    ) -> None:
        run_state_subject.state.claim(JOB, T0, queue=True, ttl_ms=TTL_MS)
        run_state_subject.state.claim(JOB, T1, queue=True, ttl_ms=TTL_MS)

        run_state_subject.elapse(TTL_MS)
        assert run_state_subject.state.drop_queued(JOB) is None
        assert run_state_subject.state.claim(JOB, T2, queue=True, ttl_ms=TTL_MS) is Claim.STARTED
        assert run_state_subject.state.finish(JOB, T2, ttl_ms=TTL_MS) is None

    def test_finishing_a_run_that_expired_changes_nothing(
        self, run_state_subject: JobRunStateSubject
    ) -> None:
        run_state_subject.state.claim(JOB, T0, queue=True, ttl_ms=TTL_MS)
        run_state_subject.elapse(TTL_MS)
        run_state_subject.peer.claim(JOB, T1, queue=True, ttl_ms=TTL_MS)
        run_state_subject.peer.claim(JOB, T2, queue=True, ttl_ms=TTL_MS)

        assert run_state_subject.state.finish(JOB, T0, ttl_ms=TTL_MS) is None
        assert run_state_subject.state.running(JOB) == T1
        assert run_state_subject.state.drop_queued(JOB) == T2

    def test_finishing_an_occurrence_that_is_not_in_progress_changes_nothing(
        self, run_state_subject: JobRunStateSubject
    ) -> None:
        run_state_subject.state.claim(JOB, T0, queue=True, ttl_ms=TTL_MS)
        run_state_subject.state.claim(JOB, T1, queue=True, ttl_ms=TTL_MS)

        assert run_state_subject.state.finish(JOB, T1, ttl_ms=TTL_MS) is None
        assert run_state_subject.state.running(JOB) == T0
        assert run_state_subject.state.drop_queued(JOB) == T1

    def test_dropping_the_queue_removes_and_returns_the_waiting_occurrence(
        self, run_state_subject: JobRunStateSubject
    ) -> None:
        run_state_subject.state.claim(JOB, T0, queue=True, ttl_ms=TTL_MS)
        run_state_subject.state.claim(JOB, T1, queue=True, ttl_ms=TTL_MS)

        assert run_state_subject.state.drop_queued(JOB) == T1
        assert run_state_subject.state.drop_queued(JOB) is None
        assert run_state_subject.state.running(JOB) == T0
        assert run_state_subject.state.finish(JOB, T0, ttl_ms=TTL_MS) is None

    def test_dropping_the_queue_keeps_the_run_in_progress_until_its_time_to_live(
        self, run_state_subject: JobRunStateSubject
    ) -> None:
        run_state_subject.state.claim(JOB, T0, queue=True, ttl_ms=TTL_MS)
        run_state_subject.state.claim(JOB, T1, queue=True, ttl_ms=TTL_MS)
        run_state_subject.state.drop_queued(JOB)

        run_state_subject.elapse(TTL_MS - MARGIN_MS)
        assert run_state_subject.state.running(JOB) == T0
        run_state_subject.elapse(MARGIN_MS)
        assert run_state_subject.state.running(JOB) is None

    def test_dropping_the_queue_of_a_job_with_nothing_waiting_returns_none(
        self, run_state_subject: JobRunStateSubject
    ) -> None:
        assert run_state_subject.state.drop_queued(JOB) is None
        run_state_subject.state.claim(JOB, T0, queue=True, ttl_ms=TTL_MS)
        assert run_state_subject.state.drop_queued(JOB) is None
        assert run_state_subject.state.running(JOB) == T0

    def test_instances_share_the_run_in_progress_and_its_queue(
        self, run_state_subject: JobRunStateSubject
    ) -> None:
        run_state_subject.state.claim(JOB, T0, queue=True, ttl_ms=TTL_MS)

        assert run_state_subject.peer.running(JOB) == T0
        assert run_state_subject.peer.claim(JOB, T1, queue=True, ttl_ms=TTL_MS) is Claim.QUEUED
        assert run_state_subject.state.claim(JOB, T2, queue=True, ttl_ms=TTL_MS) is Claim.BUSY
        assert run_state_subject.peer.finish(JOB, T0, ttl_ms=TTL_MS) == T1
        assert run_state_subject.state.running(JOB) == T1

    def test_jobs_have_their_own_runs(self, run_state_subject: JobRunStateSubject) -> None:
        run_state_subject.state.claim(JOB, T0, queue=True, ttl_ms=TTL_MS)

        assert run_state_subject.state.claim(f"{JOB}:eu", T0, queue=True, ttl_ms=TTL_MS) is (
            Claim.STARTED
        )
        assert run_state_subject.state.running("billing") is None

    def test_a_naive_instant_is_refused_and_nothing_is_claimed(
        self, run_state_subject: JobRunStateSubject
    ) -> None:
        with pytest.raises(ValueError, match="naive"):
            run_state_subject.state.claim(JOB, T0.replace(tzinfo=None), queue=True, ttl_ms=TTL_MS)

        assert run_state_subject.state.running(JOB) is None

    def test_a_naive_instant_is_refused_when_finishing(
        self, run_state_subject: JobRunStateSubject
    ) -> None:
        run_state_subject.state.claim(JOB, T0, queue=True, ttl_ms=TTL_MS)

        with pytest.raises(ValueError, match="naive"):
            run_state_subject.state.finish(JOB, T0.replace(tzinfo=None), ttl_ms=TTL_MS)
        assert run_state_subject.state.running(JOB) == T0

    @pytest.mark.parametrize("ttl_ms", [0, -1])
    def test_a_run_that_is_not_given_a_positive_time_to_live_is_refused(
        self, run_state_subject: JobRunStateSubject, ttl_ms: int
    ) -> None:
        with pytest.raises(ValueError, match="time to live"):
            run_state_subject.state.claim(JOB, T0, queue=True, ttl_ms=ttl_ms)

        assert run_state_subject.state.running(JOB) is None

    def test_racing_claims_start_one_occurrence_and_queue_one(
        self, run_state_subject: JobRunStateSubject
    ) -> None:
        claimants = [run_state_subject.state, run_state_subject.peer] * 8
        start = threading.Barrier(len(claimants))
        claims: list[Claim] = []

        def claim(state: JobRunState, minutes: int) -> None:
            start.wait()
            at = T0 + timedelta(minutes=minutes)
            claims.append(state.claim(JOB, at, queue=True, ttl_ms=TTL_MS))

        threads = [
            threading.Thread(target=claim, args=(state, minutes))
            for minutes, state in enumerate(claimants)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        assert Counter(claims) == {Claim.STARTED: 1, Claim.QUEUED: 1, Claim.BUSY: 14}

    def test_running_many_answers_each_job_as_running_does_past_a_batch(
        self, run_state_subject: JobRunStateSubject
    ) -> None:
        jobs = [f"{JOB}:{index}" for index in range(2_100)]
        for index, job in enumerate(jobs[::3]):
            at = T0 + timedelta(minutes=index)
            run_state_subject.peer.claim(job, at, queue=False, ttl_ms=TTL_MS)

        read = run_state_subject.state.running_many([*jobs, "billing.never-claimed"])

        assert read == {job: run_state_subject.state.running(job) for job in read}
        assert set(read) == {*jobs, "billing.never-claimed"}
        assert read[jobs[3]] == T0 + timedelta(minutes=1)
        assert read[jobs[1]] is None

    def test_running_many_judges_each_run_live_or_expired_as_running_does(
        self, run_state_subject: JobRunStateSubject
    ) -> None:
        state = run_state_subject.state
        expiring, live, promoted, finished = (f"{JOB}:{name}" for name in "abcd")
        state.claim(expiring, T0, queue=False, ttl_ms=TTL_MS)
        state.claim(live, T0, queue=False, ttl_ms=3 * TTL_MS)
        state.claim(promoted, T0, queue=True, ttl_ms=TTL_MS)
        state.claim(promoted, T1, queue=True, ttl_ms=TTL_MS)
        state.finish(promoted, T0, ttl_ms=3 * TTL_MS)
        state.claim(finished, T0, queue=False, ttl_ms=3 * TTL_MS)
        state.finish(finished, T0, ttl_ms=TTL_MS)
        run_state_subject.elapse(TTL_MS)

        read = run_state_subject.peer.running_many([expiring, live, promoted, finished])

        assert read == {expiring: None, live: T0, promoted: T1, finished: None}
        assert read == {job: state.running(job) for job in read}

    def test_running_many_names_each_job_once_whatever_its_name(
        self, run_state_subject: JobRunStateSubject
    ) -> None:
        names = [
            'beat.a "quoted" \\ name',
            "beat.été ⏰ 日本",
            "beat.50%_off",
            "beat.",
            "beat.x\ny",
        ]
        for minutes, name in enumerate(names[::2]):
            at = T0 + timedelta(minutes=minutes)
            run_state_subject.peer.claim(name, at, queue=False, ttl_ms=TTL_MS)

        read = run_state_subject.state.running_many(name for name in [*names, *names])

        assert read == {name: run_state_subject.state.running(name) for name in names}
        assert read[names[2]] == T0 + timedelta(minutes=1)
        assert read[names[1]] is None
        assert run_state_subject.state.running_many([]) == {}
