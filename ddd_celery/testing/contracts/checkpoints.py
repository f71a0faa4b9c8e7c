"""The contract of ``JobCheckpoints``: every adapter passes the same tests.

Subclass ``JobCheckpointsContract`` in a test module and provide the fixture
``checkpoints_subject``, returning a ``JobCheckpointsSubject`` (parametrise it to run the suite
over several adapters). Instants are whole milliseconds: what every store keeps.
"""

from __future__ import annotations

import random
import threading
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddd_celery.scheduling.checkpoints import JobCheckpoints

JOB = "billing.send-payment-reminders"
T0 = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=15)


@dataclass(frozen=True, slots=True)
class JobCheckpointsSubject:
    """An adapter under test, and another instance on the same store."""

    checkpoints: JobCheckpoints
    """The checkpoints under test."""
    peer: JobCheckpoints
    """Another instance on the same store, as another beat holds it (``checkpoints`` itself
    for a store that lives in one process)."""


_instants = st.datetimes(
    min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
).map(lambda at: at.replace(microsecond=at.microsecond // 1000 * 1000))


class JobCheckpointsContract:
    """The last occurrence handled per job: shared, and only ever moving forward."""

    def test_a_job_never_written_has_no_checkpoint(
        self, checkpoints_subject: JobCheckpointsSubject
    ) -> None:
        assert checkpoints_subject.checkpoints.read(JOB) is None

    def test_a_written_checkpoint_is_read_back(
        self, checkpoints_subject: JobCheckpointsSubject
    ) -> None:
        checkpoints_subject.checkpoints.write(JOB, T0)

        assert checkpoints_subject.checkpoints.read(JOB) == T0

    def test_a_checkpoint_is_read_in_utc_whatever_zone_it_was_written_in(
        self, checkpoints_subject: JobCheckpointsSubject
    ) -> None:
        paris = T0.astimezone(ZoneInfo("Europe/Paris"))
        checkpoints_subject.checkpoints.write(JOB, paris)

        read = checkpoints_subject.checkpoints.read(JOB)
        assert read == T0
        assert read is not None
        assert read.utcoffset() == timedelta(0)

    def test_a_later_instant_moves_the_checkpoint_forward(
        self, checkpoints_subject: JobCheckpointsSubject
    ) -> None:
        checkpoints_subject.checkpoints.write(JOB, T0)
        checkpoints_subject.checkpoints.write(JOB, T1)

        assert checkpoints_subject.checkpoints.read(JOB) == T1

    def test_an_earlier_instant_never_moves_the_checkpoint_back(
        self, checkpoints_subject: JobCheckpointsSubject
    ) -> None:
        checkpoints_subject.checkpoints.write(JOB, T1)
        checkpoints_subject.checkpoints.write(JOB, T0)

        assert checkpoints_subject.checkpoints.read(JOB) == T1

    def test_a_checkpoint_written_by_one_instance_is_read_by_another(
        self, checkpoints_subject: JobCheckpointsSubject
    ) -> None:
        checkpoints_subject.checkpoints.write(JOB, T1)
        checkpoints_subject.peer.write(JOB, T0)

        assert checkpoints_subject.peer.read(JOB) == T1

    def test_jobs_have_their_own_checkpoints(
        self, checkpoints_subject: JobCheckpointsSubject
    ) -> None:
        checkpoints_subject.checkpoints.write(JOB, T1)
        checkpoints_subject.checkpoints.write(f"{JOB}:eu", T0)

        assert checkpoints_subject.checkpoints.read(JOB) == T1
        assert checkpoints_subject.checkpoints.read(f"{JOB}:eu") == T0
        assert checkpoints_subject.checkpoints.read("billing") is None

    def test_a_naive_instant_is_refused_and_nothing_is_written(
        self, checkpoints_subject: JobCheckpointsSubject
    ) -> None:
        with pytest.raises(ValueError, match="naive"):
            checkpoints_subject.checkpoints.write(JOB, T0.replace(tzinfo=None))

        assert checkpoints_subject.checkpoints.read(JOB) is None

    @settings(
        max_examples=50,
        deadline=None,
        # each example writes under a job name of its own, so the shared fixture is harmless
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(writes=st.lists(_instants, min_size=1, max_size=8))
    def test_the_checkpoint_is_the_latest_instant_ever_written(
        self, checkpoints_subject: JobCheckpointsSubject, writes: list[datetime]
    ) -> None:
        job = f"{JOB}:{uuid.uuid4().hex}"
        for at in writes:
            checkpoints_subject.checkpoints.write(job, at)

        assert checkpoints_subject.peer.read(job) == max(writes)

    def test_instances_writing_at_once_keep_the_latest_instant(
        self, checkpoints_subject: JobCheckpointsSubject
    ) -> None:
        writes = [T0 + timedelta(minutes=minutes) for minutes in range(16)]
        random.Random(4).shuffle(writes)
        writers = [checkpoints_subject.checkpoints, checkpoints_subject.peer] * 8
        start = threading.Barrier(len(writes))

        def write(writer: JobCheckpoints, at: datetime) -> None:
            start.wait()
            writer.write(JOB, at)

        threads = [
            threading.Thread(target=write, args=pair) for pair in zip(writers, writes, strict=True)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        assert checkpoints_subject.checkpoints.read(JOB) == max(writes)

    def test_read_many_answers_each_job_as_read_does_past_a_batch(
        self, checkpoints_subject: JobCheckpointsSubject
    ) -> None:
        jobs = [f"{JOB}:{index}" for index in range(2_100)]
        for index, job in enumerate(jobs[::3]):
            checkpoints_subject.peer.write(job, T0 + timedelta(minutes=index))

        read = checkpoints_subject.checkpoints.read_many([*jobs, "billing.never-written"])

        assert read == {job: checkpoints_subject.checkpoints.read(job) for job in read}
        assert set(read) == {*jobs, "billing.never-written"}
        assert read[jobs[3]] == T0 + timedelta(minutes=1)
        assert read[jobs[1]] is None
        assert read["billing.never-written"] is None

    def test_read_many_names_each_job_once_whatever_its_name(
        self, checkpoints_subject: JobCheckpointsSubject
    ) -> None:
        names = [
            'beat.a "quoted" \\ name',
            "beat.été ⏰ 日本",
            "beat.50%_off",
            "beat.",
            "beat.x\ny",
        ]
        for minutes, name in enumerate(names[::2]):
            checkpoints_subject.peer.write(name, T0 + timedelta(minutes=minutes))

        read = checkpoints_subject.checkpoints.read_many(name for name in [*names, *names])

        assert read == {name: checkpoints_subject.checkpoints.read(name) for name in names}
        assert read[names[2]] == T0 + timedelta(minutes=1)
        assert read[names[1]] is None
        assert checkpoints_subject.checkpoints.read_many([]) == {}
