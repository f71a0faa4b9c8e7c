"""The contract of ``JobPauses``: every adapter passes the same tests.

Subclass ``JobPausesContract`` in a test module and provide the fixture ``pauses_subject``,
returning a ``JobPausesSubject`` (parametrise it to run the suite over several adapters).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from ddd_celery.scheduling.pauses import JobPauses, Pause

JOB = "billing.send-payment-reminders"
OTHER = "billing.close-month"
AT = datetime(2026, 3, 2, 6, 0, 0, 123_456, tzinfo=UTC)
"""To the microsecond: what every store keeps of a pause's instant."""


@dataclass(frozen=True, slots=True)
class JobPausesSubject:
    """An adapter under test, and another instance on the same store."""

    pauses: JobPauses
    """The pauses under test."""
    peer: JobPauses
    """Another instance on the same store, as a beat holds it while the CLI holds the first
    (``pauses`` itself for a store that lives in one process)."""


class JobPausesContract:
    """The pauses of the scheduled jobs: shared, and every command safe to send twice."""

    def test_no_job_is_paused_at_first(self, pauses_subject: JobPausesSubject) -> None:
        assert dict(pauses_subject.pauses.paused()) == {}

    def test_a_pause_is_answered_and_read_back_whole_by_another_instance(
        self, pauses_subject: JobPausesSubject
    ) -> None:
        kept = pauses_subject.pauses.pause(JOB, by="ada@ops-1", at=AT, reason="invoices wrong")

        expected = Pause(job=JOB, by="ada@ops-1", at=AT, reason="invoices wrong")
        assert kept == expected
        assert dict(pauses_subject.peer.paused()) == {JOB: expected}

    def test_a_pause_without_a_reason_keeps_none(self, pauses_subject: JobPausesSubject) -> None:
        pauses_subject.pauses.pause(JOB, by="ada", at=AT)

        assert pauses_subject.peer.paused()[JOB].reason is None

    def test_a_pause_is_read_in_utc_whatever_zone_it_was_given_in(
        self, pauses_subject: JobPausesSubject
    ) -> None:
        pauses_subject.pauses.pause(JOB, by="ada", at=AT.astimezone(ZoneInfo("Europe/Paris")))

        read = pauses_subject.peer.paused()[JOB].at
        assert read == AT
        assert read.utcoffset() == timedelta(0)

    def test_a_pause_sent_again_keeps_the_first_and_answers_it(
        self, pauses_subject: JobPausesSubject
    ) -> None:
        first = pauses_subject.pauses.pause(JOB, by="ada", at=AT, reason="first")
        again = pauses_subject.peer.pause(
            JOB, by="grace", at=AT + timedelta(minutes=5), reason="second"
        )

        assert again == first
        assert dict(pauses_subject.pauses.paused()) == {JOB: first}

    def test_a_resume_removes_the_pause_and_answers_it(
        self, pauses_subject: JobPausesSubject
    ) -> None:
        kept = pauses_subject.pauses.pause(JOB, by="ada", at=AT)
        pauses_subject.pauses.pause(OTHER, by="ada", at=AT)

        assert pauses_subject.peer.resume(JOB) == kept
        assert set(pauses_subject.pauses.paused()) == {OTHER}

    def test_a_resume_sent_again_finds_nothing_and_changes_nothing(
        self, pauses_subject: JobPausesSubject
    ) -> None:
        pauses_subject.pauses.pause(OTHER, by="ada", at=AT)
        pauses_subject.pauses.pause(JOB, by="ada", at=AT)
        pauses_subject.pauses.resume(JOB)

        assert pauses_subject.peer.resume(JOB) is None
        assert pauses_subject.pauses.resume("billing.never-paused") is None
        assert set(pauses_subject.pauses.paused()) == {OTHER}

    def test_a_job_resumed_can_be_paused_again_by_someone_else(
        self, pauses_subject: JobPausesSubject
    ) -> None:
        pauses_subject.pauses.pause(JOB, by="ada", at=AT)
        pauses_subject.pauses.resume(JOB)
        later = AT + timedelta(hours=1)

        kept = pauses_subject.peer.pause(JOB, by="grace", at=later)

        assert kept == Pause(job=JOB, by="grace", at=later)
        assert dict(pauses_subject.pauses.paused()) == {JOB: kept}

    def test_texts_come_back_as_given(self, pauses_subject: JobPausesSubject) -> None:
        job, by, reason = "billing.é\u202e-jobs", "ada\x1b[31m", "line one\nline two \u2603"

        pauses_subject.pauses.pause(job, by=by, at=AT, reason=reason)

        assert pauses_subject.peer.paused()[job] == Pause(job=job, by=by, at=AT, reason=reason)

    @pytest.mark.parametrize(
        ("job", "by", "at", "refused"),
        [
            (JOB, "ada", AT.replace(tzinfo=None), "naive"),
            ("", "ada", AT, "names the job"),
            (JOB, "", AT, "who paused it"),
        ],
        ids=["naive instant", "no job", "nobody"],
    )
    def test_a_pause_that_cannot_be_read_is_refused_and_nothing_is_kept(
        self, pauses_subject: JobPausesSubject, job: str, by: str, at: datetime, refused: str
    ) -> None:
        with pytest.raises(ValueError, match=refused):
            pauses_subject.pauses.pause(job, by=by, at=at)

        assert dict(pauses_subject.pauses.paused()) == {}

    def test_every_paused_job_is_read_at_once(self, pauses_subject: JobPausesSubject) -> None:
        jobs = [f"billing.job-{index}" for index in range(300)]
        for index, job in enumerate(jobs[::2]):
            pauses_subject.peer.pause(job, by="ada", at=AT + timedelta(seconds=index))

        paused = pauses_subject.pauses.paused()

        assert set(paused) == set(jobs[::2])
        assert paused[jobs[4]].at == AT + timedelta(seconds=2)

    def test_instances_pausing_at_once_keep_one_pause_that_each_was_answered(
        self, pauses_subject: JobPausesSubject
    ) -> None:
        writers = [pauses_subject.pauses, pauses_subject.peer] * 4
        start = threading.Barrier(len(writers))
        answers: list[Pause] = []

        def pause(writer: JobPauses, index: int) -> None:
            start.wait()
            answers.append(writer.pause(JOB, by=f"operator-{index}", at=AT))

        threads = [
            threading.Thread(target=pause, args=(writer, index))
            for index, writer in enumerate(writers)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        kept = pauses_subject.pauses.paused()[JOB]
        assert answers == [kept] * len(writers)
