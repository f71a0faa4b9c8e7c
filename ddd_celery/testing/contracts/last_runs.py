"""The contract of ``JobLastRuns``: every adapter passes the same tests.

Subclass ``JobLastRunsContract`` in a test module and provide the fixture ``last_runs_subject``,
returning a ``JobLastRunsSubject`` (parametrise it to run the suite over several adapters).
Occurrences are whole milliseconds, as schedules make them and every store compares them.
"""

from __future__ import annotations

import random
import threading
import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddd_celery.scheduling.last_runs import HISTORY_LIMIT, JobLastRuns
from ddd_celery.scheduling.outcomes import JobRun, Outcome

JOB = "billing.send-payment-reminders"
T0 = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=15)


@dataclass(frozen=True, slots=True)
class JobLastRunsSubject:
    """An adapter under test, and another instance on the same store."""

    last_runs: JobLastRuns
    """The last runs under test."""
    peer: JobLastRuns
    """Another instance on the same store, as a worker holds it while beat holds the first
    (``last_runs`` itself for a store that lives in one process)."""


def succeeded(at: datetime, job: str = JOB) -> JobRun:
    """The record of a run that succeeded, as the worker writes it."""
    return JobRun(
        job=job,
        scheduled_at=at,
        outcome=Outcome.SUCCEEDED,
        context=job.split(".", 1)[0],
        started_at=at + timedelta(milliseconds=12, microseconds=345),
        duration_ms=1_250.5,
        correlation_id="9b2e4c1d",
    )


def write_at_once(subject: JobLastRunsSubject, runs: list[JobRun]) -> None:
    """Write ``runs`` at once, each from a thread of its own, by the two instances in turn: as
    beats and workers record their runs."""
    writers = [(subject.last_runs, subject.peer)[index % 2] for index in range(len(runs))]
    start = threading.Barrier(len(runs))

    def write(writer: JobLastRuns, run: JobRun) -> None:
        start.wait()
        writer.write(run)

    threads = [
        threading.Thread(target=write, args=pair) for pair in zip(writers, runs, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def failed(at: datetime, code: str = "JOB_TIMEOUT", job: str = JOB) -> JobRun:
    """The record of a run that failed, with the fields of a per-tenant failure."""
    return replace(
        succeeded(at, job),
        outcome=Outcome.FAILED,
        error_code=code,
        error_type="JobTimeoutError",
        tenant_id="acme",
    )


def not_run(at: datetime, outcome: Outcome, job: str = JOB) -> JobRun:
    """The record of an occurrence that did not run (missed, skipped): no run fields."""
    return JobRun(job=job, scheduled_at=at, outcome=outcome, context=job.split(".", 1)[0])


_instants = st.datetimes(
    min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
).map(lambda at: at.replace(microsecond=at.microsecond // 1000 * 1000))
_outcomes = st.sampled_from([Outcome.SUCCEEDED, Outcome.FAILED, Outcome.MISSED])


class JobLastRunsContract:
    """The record of each job's latest occurrence: shared, never replaced by an earlier one; and
    its history: every record in the order written, bounded."""

    def test_a_job_never_written_has_no_last_run(
        self, last_runs_subject: JobLastRunsSubject
    ) -> None:
        assert last_runs_subject.last_runs.read(JOB) is None

    @pytest.mark.parametrize(
        "run",
        [
            succeeded(T0),
            failed(T0),
            not_run(T0, Outcome.MISSED),
            not_run(T0, Outcome.SKIPPED_OVERLAP),
        ],
        ids=["succeeded", "failed", "missed", "skipped-overlap"],
    )
    def test_a_written_record_is_read_back_whole(
        self, last_runs_subject: JobLastRunsSubject, run: JobRun
    ) -> None:
        last_runs_subject.last_runs.write(run)

        assert last_runs_subject.last_runs.read(JOB) == run

    def test_a_record_is_read_in_utc_whatever_zone_it_was_written_in(
        self, last_runs_subject: JobLastRunsSubject
    ) -> None:
        paris = ZoneInfo("Europe/Paris")
        run = succeeded(T0)
        last_runs_subject.last_runs.write(
            replace(
                run,
                scheduled_at=run.scheduled_at.astimezone(paris),
                started_at=run.started_at and run.started_at.astimezone(paris),
            )
        )

        read = last_runs_subject.last_runs.read(JOB)
        assert read == run
        assert read is not None
        assert read.scheduled_at.utcoffset() == timedelta(0)
        assert read.started_at is not None
        assert read.started_at.utcoffset() == timedelta(0)

    def test_a_later_occurrence_replaces_the_record(
        self, last_runs_subject: JobLastRunsSubject
    ) -> None:
        last_runs_subject.last_runs.write(succeeded(T0))
        last_runs_subject.last_runs.write(failed(T1))

        assert last_runs_subject.last_runs.read(JOB) == failed(T1)

    def test_an_earlier_occurrence_never_replaces_a_later_one(
        self, last_runs_subject: JobLastRunsSubject
    ) -> None:
        later = not_run(T1, Outcome.MISSED)
        last_runs_subject.last_runs.write(later)
        last_runs_subject.last_runs.write(succeeded(T0))

        assert last_runs_subject.last_runs.read(JOB) == later

    def test_a_new_record_of_the_same_occurrence_replaces_the_first(
        self, last_runs_subject: JobLastRunsSubject
    ) -> None:
        ran = succeeded(T1)
        last_runs_subject.peer.write(failed(T1, code="JOB_LOCK_UNAVAILABLE"))
        last_runs_subject.last_runs.write(ran)

        assert last_runs_subject.peer.read(JOB) == ran

    def test_a_record_written_by_one_instance_is_read_by_another(
        self, last_runs_subject: JobLastRunsSubject
    ) -> None:
        later = failed(T1)
        last_runs_subject.last_runs.write(later)
        last_runs_subject.peer.write(succeeded(T0))

        assert last_runs_subject.peer.read(JOB) == later

    def test_jobs_have_their_own_last_runs(self, last_runs_subject: JobLastRunsSubject) -> None:
        last_runs_subject.last_runs.write(failed(T1))
        last_runs_subject.last_runs.write(succeeded(T0, job=f"{JOB}:eu"))

        assert last_runs_subject.last_runs.read(JOB) == failed(T1)
        assert last_runs_subject.last_runs.read(f"{JOB}:eu") == succeeded(T0, job=f"{JOB}:eu")
        assert last_runs_subject.last_runs.read("billing") is None

    @pytest.mark.parametrize("field", ["scheduled_at", "started_at"])
    def test_a_record_with_a_naive_instant_is_refused_and_nothing_is_written(
        self, last_runs_subject: JobLastRunsSubject, field: str
    ) -> None:
        at = T0.replace(tzinfo=None)
        run = succeeded(T0)
        naive = (
            replace(run, scheduled_at=at)
            if field == "scheduled_at"
            else replace(run, started_at=at)
        )

        with pytest.raises(ValueError, match="naive"):
            last_runs_subject.last_runs.write(naive)

        assert last_runs_subject.last_runs.read(JOB) is None

    @settings(
        max_examples=50,
        deadline=None,
        # each example writes under a job name of its own, so the shared fixture is harmless
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(writes=st.lists(st.tuples(_instants, _outcomes), min_size=1, max_size=8))
    def test_the_record_kept_is_the_last_written_of_the_latest_occurrence(
        self, last_runs_subject: JobLastRunsSubject, writes: list[tuple[datetime, Outcome]]
    ) -> None:
        job = f"{JOB}:{uuid.uuid4().hex}"
        runs = [not_run(at, outcome, job) for at, outcome in writes]
        for run in runs:
            last_runs_subject.last_runs.write(run)

        latest = max(run.scheduled_at for run in runs)
        expected = [run for run in runs if run.scheduled_at == latest][-1]
        assert last_runs_subject.peer.read(job) == expected

    def test_instances_writing_at_once_keep_the_latest_occurrence(
        self, last_runs_subject: JobLastRunsSubject
    ) -> None:
        runs = [succeeded(T0 + timedelta(minutes=minutes)) for minutes in range(16)]
        random.Random(4).shuffle(runs)
        write_at_once(last_runs_subject, runs)

        assert last_runs_subject.last_runs.read(JOB) == max(runs, key=lambda r: r.scheduled_at)

    def test_read_many_answers_each_job_as_read_does_past_a_batch(
        self, last_runs_subject: JobLastRunsSubject
    ) -> None:
        jobs = [f"{JOB}:{index}" for index in range(2_100)]
        for index, job in enumerate(jobs[::3]):
            last_runs_subject.peer.write(succeeded(T0 + timedelta(minutes=index), job=job))

        read = last_runs_subject.last_runs.read_many([*jobs, "billing.never-written"])

        assert read == {job: last_runs_subject.last_runs.read(job) for job in read}
        assert set(read) == {*jobs, "billing.never-written"}
        kept = read[jobs[3]]
        assert kept is not None
        assert kept.scheduled_at == T0 + timedelta(minutes=1)
        assert read[jobs[1]] is None

    def test_read_many_names_each_job_once_whatever_its_name(
        self, last_runs_subject: JobLastRunsSubject
    ) -> None:
        names = [
            'beat.a "quoted" \\ name',
            "beat.été ⏰ 日本",
            "beat.50%_off",
            "beat.",
            "beat.x\ny",
        ]
        for minutes, name in enumerate(names[::2]):
            last_runs_subject.peer.write(failed(T0 + timedelta(minutes=minutes), job=name))

        read = last_runs_subject.last_runs.read_many(name for name in [*names, *names])

        assert read == {name: last_runs_subject.last_runs.read(name) for name in names}
        assert read[names[2]] == failed(T0 + timedelta(minutes=1), job=names[2])
        assert read[names[1]] is None
        assert last_runs_subject.last_runs.read_many([]) == {}

    def test_a_job_never_written_has_an_empty_history(
        self, last_runs_subject: JobLastRunsSubject
    ) -> None:
        assert last_runs_subject.last_runs.history(JOB) == []

    def test_the_history_holds_every_record_newest_written_first_an_earlier_one_included(
        self, last_runs_subject: JobLastRunsSubject
    ) -> None:
        """A replay of an earlier occurrence leaves the last run alone, not the history."""
        runs = [failed(T0), succeeded(T1), not_run(T1, Outcome.MISSED), succeeded(T0)]
        for run in runs:
            last_runs_subject.last_runs.write(run)

        assert last_runs_subject.peer.history(JOB) == runs[::-1]
        assert last_runs_subject.peer.read(JOB) == not_run(T1, Outcome.MISSED)

    def test_the_history_keeps_the_newest_records_up_to_its_bound(
        self, last_runs_subject: JobLastRunsSubject
    ) -> None:
        runs = [succeeded(T0 + timedelta(minutes=m)) for m in range(HISTORY_LIMIT + 7)]
        for run in runs:
            last_runs_subject.last_runs.write(run)

        kept = last_runs_subject.peer.history(JOB, limit=HISTORY_LIMIT + 7)

        assert kept == runs[::-1][:HISTORY_LIMIT]

    def test_a_history_read_gives_at_most_its_limit_newest_first(
        self, last_runs_subject: JobLastRunsSubject
    ) -> None:
        runs = [failed(T0 + timedelta(minutes=minutes)) for minutes in range(5)]
        for run in runs:
            last_runs_subject.last_runs.write(run)

        assert last_runs_subject.last_runs.history(JOB, limit=2) == [runs[4], runs[3]]
        assert last_runs_subject.last_runs.history(JOB, limit=1) == [runs[4]]

    @pytest.mark.parametrize("limit", [0, -1])
    def test_a_history_read_of_no_record_is_refused(
        self, last_runs_subject: JobLastRunsSubject, limit: int
    ) -> None:
        with pytest.raises(ValueError, match="positive number of records"):
            last_runs_subject.last_runs.history(JOB, limit=limit)

    def test_a_record_written_twice_in_a_row_is_one_entry_of_the_history(
        self, last_runs_subject: JobLastRunsSubject
    ) -> None:
        """A write sent again (its reply lost), or two beats recording the same gap missed."""
        last_runs_subject.last_runs.write(succeeded(T0))
        last_runs_subject.last_runs.write(not_run(T1, Outcome.MISSED))
        last_runs_subject.peer.write(not_run(T1, Outcome.MISSED))

        assert last_runs_subject.last_runs.history(JOB) == [
            not_run(T1, Outcome.MISSED),
            succeeded(T0),
        ]

    def test_jobs_have_their_own_histories(self, last_runs_subject: JobLastRunsSubject) -> None:
        last_runs_subject.last_runs.write(failed(T1))
        last_runs_subject.peer.write(succeeded(T0, job=f"{JOB}:eu"))

        assert last_runs_subject.last_runs.history(JOB) == [failed(T1)]
        assert last_runs_subject.last_runs.history(f"{JOB}:eu") == [succeeded(T0, job=f"{JOB}:eu")]
        assert last_runs_subject.last_runs.history("billing") == []

    def test_a_record_refused_for_a_naive_instant_is_not_in_the_history(
        self, last_runs_subject: JobLastRunsSubject
    ) -> None:
        with pytest.raises(ValueError, match="naive"):
            last_runs_subject.last_runs.write(succeeded(T0.replace(tzinfo=None)))

        assert last_runs_subject.last_runs.history(JOB) == []

    def test_instances_writing_at_once_each_add_their_record_to_the_history(
        self, last_runs_subject: JobLastRunsSubject
    ) -> None:
        runs = [succeeded(T0 + timedelta(minutes=minutes)) for minutes in range(16)]
        write_at_once(last_runs_subject, runs)

        history = last_runs_subject.last_runs.history(JOB)
        assert sorted(history, key=lambda run: run.scheduled_at) == runs

    @settings(
        max_examples=30,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(
        writes=st.lists(
            st.tuples(st.sampled_from(["a", "b"]), _instants, _outcomes), min_size=1, max_size=10
        )
    )
    def test_write_many_keeps_what_writing_each_in_turn_keeps(
        self,
        last_runs_subject: JobLastRunsSubject,
        writes: list[tuple[str, datetime, Outcome]],
    ) -> None:
        """A batch of beat's records: the latest occurrence kept, every record in the history."""
        stem = f"{JOB}:{uuid.uuid4().hex}"
        runs = [not_run(at, outcome, f"{stem}.{job}") for job, at, outcome in writes]

        last_runs_subject.last_runs.write_many(runs)

        for job in {run.job for run in runs}:
            written = [run for run in runs if run.job == job]
            latest = max(run.scheduled_at for run in written)
            assert (
                last_runs_subject.peer.read(job)
                == [run for run in written if run.scheduled_at == latest][-1]
            )
            history: list[JobRun] = []
            for run in written:
                if not history or history[0] != run:
                    history.insert(0, run)
            assert last_runs_subject.peer.history(job) == history[:HISTORY_LIMIT]

    def test_write_many_keeps_every_job_of_a_batch_past_a_store_batch(
        self, last_runs_subject: JobLastRunsSubject
    ) -> None:
        jobs = [f"{JOB}:{index}" for index in range(2_100)]
        runs = [not_run(T1, Outcome.SKIPPED_OVERLAP, job) for job in jobs]

        last_runs_subject.last_runs.write_many(runs)

        assert last_runs_subject.peer.read_many(jobs) == {run.job: run for run in runs}
        assert last_runs_subject.peer.history(jobs[-1]) == [runs[-1]]

    def test_write_many_never_replaces_a_later_occurrence_already_kept(
        self, last_runs_subject: JobLastRunsSubject
    ) -> None:
        last_runs_subject.peer.write(failed(T1))

        last_runs_subject.last_runs.write_many([not_run(T0, Outcome.MISSED)])

        assert last_runs_subject.last_runs.read(JOB) == failed(T1)
        assert last_runs_subject.last_runs.history(JOB) == [not_run(T0, Outcome.MISSED), failed(T1)]

    def test_a_record_written_again_by_write_many_is_one_entry_of_the_history(
        self, last_runs_subject: JobLastRunsSubject
    ) -> None:
        """Beat's batch and a write of the same record are the same text in every store."""
        last_runs_subject.peer.write(not_run(T1, Outcome.SKIPPED_OVERLAP))

        last_runs_subject.last_runs.write_many([not_run(T1, Outcome.SKIPPED_OVERLAP)])

        assert last_runs_subject.last_runs.history(JOB) == [not_run(T1, Outcome.SKIPPED_OVERLAP)]

    def test_a_batch_with_a_naive_instant_is_refused_and_nothing_is_written(
        self, last_runs_subject: JobLastRunsSubject
    ) -> None:
        other = f"{JOB}:eu"
        runs = [succeeded(T0, job=other), succeeded(T0.replace(tzinfo=None))]

        with pytest.raises(ValueError, match="naive"):
            last_runs_subject.last_runs.write_many(runs)

        assert last_runs_subject.last_runs.read(other) is None
        assert last_runs_subject.last_runs.history(other) == []

    def test_an_empty_batch_writes_nothing(self, last_runs_subject: JobLastRunsSubject) -> None:
        last_runs_subject.last_runs.write_many([])

        assert last_runs_subject.last_runs.read(JOB) is None
