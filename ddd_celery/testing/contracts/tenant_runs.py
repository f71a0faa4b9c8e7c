"""The contract of ``JobTenantRuns``: every adapter passes the same tests.

Subclass ``JobTenantRunsContract`` in a test module and provide the fixture
``tenant_runs_subject``, returning a ``JobTenantRunsSubject`` (parametrise it to run the suite
over several adapters).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from ddd_celery.scheduling.tenant_runs import JobTenantRuns, TenantFailure, TenantTally

JOB = "billing.close-month"
T0 = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)
T1 = T0 + timedelta(days=31)
TTL_MS = 10_000
MARGIN_MS = 4_000
"""Time to live left when a test checks a join is still there (see the run state's contract)."""
TENANTS = ["acme", "globex", "initech"]
BOOM = TenantFailure("globex", "UNEXPECTED_ERROR", "ValueError")


@dataclass(frozen=True, slots=True)
class JobTenantRunsSubject:
    """An adapter under test, another instance on the same store, and the means to let time pass."""

    runs: JobTenantRuns
    peer: JobTenantRuns
    """Another instance on the same store, as another worker holds it (``runs`` itself for a
    store that lives in one process)."""
    elapse: Callable[[int], object]
    """Let that many milliseconds pass for the store's expiry."""


def _fail(tenant: str) -> TenantFailure:
    return TenantFailure(tenant, "UNEXPECTED_ERROR", "RuntimeError")


class JobTenantRunsContract:
    """The tenants of a spread occurrence still to run, and the one tally once all ran."""

    def test_an_occurrence_never_started_has_no_join(
        self, tenant_runs_subject: JobTenantRunsSubject
    ) -> None:
        assert tenant_runs_subject.runs.pending(JOB, T0) is None
        assert tenant_runs_subject.runs.complete(JOB, T0, "acme", failure=None) is None

    def test_a_start_opens_the_join_with_every_tenant_pending(
        self, tenant_runs_subject: JobTenantRunsSubject
    ) -> None:
        assert tenant_runs_subject.runs.start(JOB, T0, TENANTS, ttl_ms=TTL_MS) is True

        assert tenant_runs_subject.peer.pending(JOB, T0) == len(TENANTS)

    def test_a_start_sent_again_opens_nothing(
        self, tenant_runs_subject: JobTenantRunsSubject
    ) -> None:
        runs = tenant_runs_subject.runs
        runs.start(JOB, T0, TENANTS, ttl_ms=TTL_MS)
        runs.complete(JOB, T0, "acme", failure=None)

        assert tenant_runs_subject.peer.start(JOB, T0, TENANTS, ttl_ms=TTL_MS) is False
        assert runs.pending(JOB, T0) == len(TENANTS) - 1

    def test_only_the_last_tenant_to_end_gets_the_tally(
        self, tenant_runs_subject: JobTenantRunsSubject
    ) -> None:
        runs, peer = tenant_runs_subject.runs, tenant_runs_subject.peer
        runs.start(JOB, T0, TENANTS, ttl_ms=TTL_MS)

        first = runs.complete(JOB, T0, "initech", failure=None)
        second = peer.complete(JOB, T0, "acme", failure=None)
        last = runs.complete(JOB, T0, "globex", failure=None)

        assert (first, second) == (None, None)
        assert last == TenantTally(len(TENANTS), None)
        assert peer.pending(JOB, T0) == 0

    def test_a_failure_is_kept_and_the_others_still_run(
        self, tenant_runs_subject: JobTenantRunsSubject
    ) -> None:
        runs = tenant_runs_subject.runs
        runs.start(JOB, T0, TENANTS, ttl_ms=TTL_MS)

        assert runs.complete(JOB, T0, "globex", failure=BOOM) is None
        assert runs.complete(JOB, T0, "acme", failure=None) is None
        assert runs.complete(JOB, T0, "initech", failure=None) == TenantTally(3, BOOM)

    def test_the_failure_kept_is_the_first_in_the_directorys_order_not_in_time(
        self, tenant_runs_subject: JobTenantRunsSubject
    ) -> None:
        runs = tenant_runs_subject.runs
        runs.start(JOB, T0, TENANTS, ttl_ms=TTL_MS)

        runs.complete(JOB, T0, "initech", failure=_fail("initech"))
        runs.complete(JOB, T0, "acme", failure=_fail("acme"))
        tally = runs.complete(JOB, T0, "globex", failure=_fail("globex"))

        assert tally == TenantTally(3, _fail("acme"))

    def test_a_tenant_struck_off_twice_counts_once(
        self, tenant_runs_subject: JobTenantRunsSubject
    ) -> None:
        runs, peer = tenant_runs_subject.runs, tenant_runs_subject.peer
        runs.start(JOB, T0, TENANTS, ttl_ms=TTL_MS)
        runs.complete(JOB, T0, "acme", failure=None)

        assert peer.complete(JOB, T0, "acme", failure=_fail("acme")) is None
        assert runs.pending(JOB, T0) == 2
        runs.complete(JOB, T0, "globex", failure=None)
        assert runs.complete(JOB, T0, "initech", failure=None) == TenantTally(3, None)

    def test_a_tenant_the_join_does_not_list_changes_nothing(
        self, tenant_runs_subject: JobTenantRunsSubject
    ) -> None:
        runs = tenant_runs_subject.runs
        runs.start(JOB, T0, ["acme"], ttl_ms=TTL_MS)

        assert runs.complete(JOB, T0, "umbrella", failure=_fail("umbrella")) is None
        assert runs.pending(JOB, T0) == 1
        assert runs.complete(JOB, T0, "acme", failure=None) == TenantTally(1, None)

    def test_the_last_completion_sent_again_gets_the_same_tally_and_no_other_does(
        self, tenant_runs_subject: JobTenantRunsSubject
    ) -> None:
        runs, peer = tenant_runs_subject.runs, tenant_runs_subject.peer
        runs.start(JOB, T0, ["acme", "globex"], ttl_ms=TTL_MS)
        runs.complete(JOB, T0, "acme", failure=None)
        tally = runs.complete(JOB, T0, "globex", failure=BOOM)

        assert peer.complete(JOB, T0, "globex", failure=BOOM) == tally == TenantTally(2, BOOM)
        assert peer.complete(JOB, T0, "acme", failure=None) is None
        assert runs.start(JOB, T0, ["acme", "globex"], ttl_ms=TTL_MS) is False

    def test_occurrences_and_jobs_keep_joins_of_their_own(
        self, tenant_runs_subject: JobTenantRunsSubject
    ) -> None:
        runs = tenant_runs_subject.runs
        other = "billing.send-invoices"
        runs.start(JOB, T0, ["acme"], ttl_ms=TTL_MS)
        runs.start(JOB, T1, ["acme", "globex"], ttl_ms=TTL_MS)
        runs.start(other, T0, ["acme"], ttl_ms=TTL_MS)

        assert runs.complete(JOB, T1, "acme", failure=None) is None
        assert runs.complete(JOB, T0, "acme", failure=None) == TenantTally(1, None)
        assert runs.pending(JOB, T1) == 1
        assert runs.pending(other, T0) == 1

    def test_an_instant_is_the_same_occurrence_in_every_zone(
        self, tenant_runs_subject: JobTenantRunsSubject
    ) -> None:
        runs = tenant_runs_subject.runs
        runs.start(JOB, T0.astimezone(ZoneInfo("Europe/Paris")), ["acme"], ttl_ms=TTL_MS)

        assert runs.complete(JOB, T0, "acme", failure=None) == TenantTally(1, None)

    def test_a_join_expires_after_its_time_to_live(
        self, tenant_runs_subject: JobTenantRunsSubject
    ) -> None:
        runs = tenant_runs_subject.runs
        runs.start(JOB, T0, TENANTS, ttl_ms=TTL_MS)
        tenant_runs_subject.elapse(TTL_MS - MARGIN_MS)
        assert runs.pending(JOB, T0) == len(TENANTS)

        tenant_runs_subject.elapse(MARGIN_MS)

        assert runs.pending(JOB, T0) is None
        assert runs.complete(JOB, T0, "acme", failure=None) is None
        assert runs.start(JOB, T0, TENANTS, ttl_ms=TTL_MS) is True

    def test_a_thousand_tenants_ending_at_once_give_exactly_one_tally(
        self, tenant_runs_subject: JobTenantRunsSubject
    ) -> None:
        tenants = [f"tenant-{number:04d}" for number in range(1_000)]
        tenant_runs_subject.runs.start(JOB, T0, tenants, ttl_ms=TTL_MS)
        tallies: list[TenantTally] = []
        barrier = threading.Barrier(4)

        def end(share: list[str], runs: JobTenantRuns) -> None:
            barrier.wait()
            for tenant in share:
                failure = _fail(tenant) if tenant in ("tenant-0500", "tenant-0007") else None
                tally = runs.complete(JOB, T0, tenant, failure=failure)
                if tally is not None:
                    tallies.append(tally)

        subject = tenant_runs_subject
        threads = [
            threading.Thread(target=end, args=(tenants[i::4], (subject.runs, subject.peer)[i % 2]))
            for i in range(4)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        assert tallies == [TenantTally(1_000, _fail("tenant-0007"))]

    @pytest.mark.parametrize(
        ("tenants", "ttl_ms", "says"),
        [
            ([], TTL_MS, "at least one tenant"),
            (["acme", "acme"], TTL_MS, "listed twice"),
            (["acme"], 0, "positive"),
            (["acme"], -1, "positive"),
        ],
        ids=["no tenant", "a tenant twice", "zero ttl", "negative ttl"],
    )
    def test_a_start_that_cannot_be_a_join_is_refused_and_opens_nothing(
        self,
        tenant_runs_subject: JobTenantRunsSubject,
        tenants: list[str],
        ttl_ms: int,
        says: str,
    ) -> None:
        with pytest.raises(ValueError, match=says):
            tenant_runs_subject.runs.start(JOB, T0, tenants, ttl_ms=ttl_ms)

        assert tenant_runs_subject.runs.pending(JOB, T0) is None

    def test_a_naive_instant_is_refused(self, tenant_runs_subject: JobTenantRunsSubject) -> None:
        naive = T0.replace(tzinfo=None)

        with pytest.raises(ValueError, match="scheduled_at"):
            tenant_runs_subject.runs.start(JOB, naive, TENANTS, ttl_ms=TTL_MS)
        with pytest.raises(ValueError, match="scheduled_at"):
            tenant_runs_subject.runs.complete(JOB, naive, "acme", failure=None)
