"""A worker ends a run through ``OccurrenceStore.end``: the record it keeps goes into the job's
history as a write of the last runs would (one script on Redis, one transaction on SQL).

Over every occurrence store of the matrix (conftest), read through the last runs' own port.
"""

from __future__ import annotations

from ddd_celery.scheduling.outcomes import Outcome
from ddd_celery.testing.contracts.last_runs import failed, not_run
from ddd_celery.testing.contracts.occurrence_store import (
    JOB,
    RUN_TTL_MS,
    T0,
    T1,
    OccurrenceStoreSubject,
    succeeded,
)


def test_a_run_ended_adds_its_record_to_the_history_an_earlier_occurrence_included(
    occurrence_store_subject: OccurrenceStoreSubject,
) -> None:
    """The later occurrence stays the last run; the history holds both, newest written first."""
    subject = occurrence_store_subject
    subject.last_runs.write(not_run(T1, Outcome.MISSED, job=JOB))
    subject.run_state.claim(JOB, T0, queue=False, ttl_ms=RUN_TTL_MS)

    ended = subject.store.end(JOB, T0, ttl_ms=RUN_TTL_MS, last_run=succeeded(T0))

    assert ended.last_run_error is None
    assert subject.last_runs.read(JOB) == not_run(T1, Outcome.MISSED, job=JOB)
    assert subject.last_runs.history(JOB) == [succeeded(T0), not_run(T1, Outcome.MISSED, job=JOB)]


def test_an_end_sent_again_adds_its_record_once(
    occurrence_store_subject: OccurrenceStoreSubject,
) -> None:
    subject = occurrence_store_subject
    subject.run_state.claim(JOB, T0, queue=False, ttl_ms=RUN_TTL_MS)

    subject.store.end(JOB, T0, ttl_ms=RUN_TTL_MS, last_run=succeeded(T0))
    subject.store.end(JOB, T0, ttl_ms=RUN_TTL_MS, last_run=succeeded(T0))

    assert subject.last_runs.history(JOB) == [succeeded(T0)]


def test_an_end_without_a_record_leaves_the_history_alone(
    occurrence_store_subject: OccurrenceStoreSubject,
) -> None:
    subject = occurrence_store_subject
    subject.last_runs.write(failed(T0, job=JOB))
    subject.run_state.claim(JOB, T1, queue=False, ttl_ms=RUN_TTL_MS)

    subject.store.end(JOB, T1, ttl_ms=RUN_TTL_MS, last_run=None)

    assert subject.last_runs.history(JOB) == [failed(T0, job=JOB)]
