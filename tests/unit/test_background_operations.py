"""The operator's queries and commands (``ddd_celery.background.operations``) on the memory store.

What the CLI prints and a page will show: the story of a job and each attempt, the payload's
shape without its values, counts with the library's jobs apart, bulk selections that leave a
process manager's armed timeouts alone, purges in bounded batches, ages and instants as typed.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ddd_celery.background import InMemoryJobStore, StoredJobQueue
from ddd_celery.background.operations import (
    SELECTION_PAGE,
    Answer,
    JobOrigin,
    JobOrigins,
    ProcessTimeout,
    cancel_job,
    cancel_selected,
    jobs_matching,
    json_text,
    parse_age,
    parse_since,
    payload_shape,
    printable,
    purge,
    queued_again,
    retry_dead_job,
    retry_selected,
    select_dead,
    select_to_cancel,
    stats_view,
    story,
)
from ddd_celery.background.store import JobFilter, JobState, JobStatus
from ddd_celery.declarations.background import BackgroundJobExecution, background
from ddd_celery.kernel import (
    Actor,
    ExecutionContext,
    FixedClock,
    FixedExecutionScope,
    SequentialIdGenerator,
)
from ddd_celery.processes import PROCESS_COMMANDS_JOB
from ddd_celery.processes.jobs import ProcessTimeoutJob

START = datetime(2026, 10, 1, 8, 0, tzinfo=UTC)
SEND = "opsspec.send-receipt"
TIMEOUT = "opsspec.order-timeout"
ORIGINS = JobOrigins({TIMEOUT: JobOrigin.PROCESS_TIMEOUT})


@background(SEND, max_attempts=3)
class SendReceiptJob:
    def run(self, payload: Any, execution: BackgroundJobExecution) -> None:
        return None


@background(TIMEOUT)
class OrderTimeoutJob(ProcessTimeoutJob):
    pass


class Deployment:
    """A memory store, the queue that fills it and the clock both read."""

    def __init__(self) -> None:
        self.clock = FixedClock(START)
        self.store = InMemoryJobStore()
        self.scope = FixedExecutionScope()
        self.queue = StoredJobQueue(
            store=self.store,
            clock=self.clock,
            ids=SequentialIdGenerator("job-"),
            scope=self.scope,
            declarations=[SendReceiptJob, OrderTimeoutJob],
        )

    @property
    def now(self) -> datetime:
        return self.clock.now()

    def send(self, payload: Any = None, **options: Any) -> str:
        return self.queue.enqueue(SendReceiptJob, payload or {"to": "ada@x.test"}, **options)

    def timeout(self, instance: str, delay_ms: int = 3_600_000) -> str:
        payload = {"process": "opsspec.ordering", "id": instance, "timeout": "payment"}
        return self.queue.enqueue(OrderTimeoutJob, payload, delay_ms=delay_ms)

    def attempt(self, job_id: str, worker: str, *, then: str, error: str = "KeyError") -> None:
        """One attempt of ``job_id`` on ``worker``, ended ``then`` (fail, dead, succeed) 1 s on."""
        claimed = self.store.claim_job(job_id, now=self.now, lease_ms=60_000, worker=worker)
        assert claimed is not None
        self.clock.advance(1_000)
        if then == "succeed":
            self.store.complete(claimed.lease, now=self.now)
            return
        retry_at = self.now if then == "fail" else None
        self.store.fail(
            claimed.lease,
            now=self.now,
            error_code="UNEXPECTED_ERROR",
            error_type=error,
            retry_at=retry_at,
        )

    def status(self, job_id: str) -> JobStatus:
        job = self.store.find(job_id, tenant_id=None)
        assert job is not None
        return job.status


@pytest.fixture
def d() -> Deployment:
    return Deployment()


@pytest.mark.parametrize(
    ("text", "age"),
    [
        ("30m", timedelta(minutes=30)),
        ("2h", timedelta(hours=2)),
        ("7d", timedelta(days=7)),
        ("1w", timedelta(weeks=1)),
        ("1h30m", timedelta(minutes=90)),
        ("45s", timedelta(seconds=45)),
        ("250ms", timedelta(milliseconds=250)),
    ],
)
def test_an_age_is_read_as_an_operator_types_it(text: str, age: timedelta) -> None:
    assert parse_age(text) == age


@pytest.mark.parametrize("text", ["", "2", "h", "2x", "2 h", "-2h", "0s", "2h ", "1.5h"])
def test_what_is_no_age_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="age"):
        parse_age(text)


@pytest.mark.parametrize("text", ["36526d", "3000000d", "99999999999d", "9" * 30 + "s"])
def test_an_age_longer_than_a_hundred_years_is_refused_rather_than_overflowing(text: str) -> None:
    with pytest.raises(ValueError, match="longer than 100 years"):
        parse_age(text)
    with pytest.raises(ValueError, match="longer than 100 years"):
        parse_since(text, START)


def test_a_hundred_years_is_still_an_age() -> None:
    assert parse_since("36525d", START) == START - timedelta(days=36_525)


def test_since_is_an_age_before_now_or_an_instant_with_its_offset() -> None:
    assert parse_since("2h", START) == START - timedelta(hours=2)
    assert parse_since("2026-09-30T06:00:00Z", START) == datetime(2026, 9, 30, 6, tzinfo=UTC)
    assert parse_since("2026-09-30T08:00:00+02:00", START) == datetime(2026, 9, 30, 6, tzinfo=UTC)
    with pytest.raises(ValueError, match="no offset"):
        parse_since("2026-09-30T06:00:00", START)
    with pytest.raises(ValueError, match="neither an ISO 8601 instant"):
        parse_since("yesterday", START)


def test_a_payload_shows_its_keys_and_types_and_none_of_its_values() -> None:
    payload = {
        "to": "ada@secret.test",
        "amount": 4500,
        "rate": 0.2,
        "paid": True,
        "note": None,
        "lines": [{"sku": "SECRET-SKU", "qty": 2}, {"sku": "S-2", "qty": 1}],
        "tags": [],
        "mixed": [1, "two", 3.0, False, None],
    }

    shape = payload_shape(payload)

    assert shape == (
        '{"amount": int, "lines": list[2] of {"qty": int, "sku": str}, '
        '"mixed": list[5] of int | str | float | 2 more kinds, "note": null, "paid": bool, '
        '"rate": float, "tags": list[0], "to": str}'
    )
    assert "secret" not in shape.lower()
    assert "4500" not in shape


def test_a_payload_shape_is_bounded_in_depth_and_keys() -> None:
    deep: Any = {"a": {"b": {"c": {"d": {"e": 1}}}}}
    wide = {f"k{number:02d}": number for number in range(25)}

    assert payload_shape(deep) == '{"a": {"b": {"c": {"d": {...}}}}}'
    assert payload_shape(wide).endswith('"k19": int, ... 5 more keys}')
    assert payload_shape("a scalar value") == "str"


def test_the_story_of_a_dead_job_tells_each_attempt_its_worker_outcome_and_error(
    d: Deployment,
) -> None:
    job_id = d.send()
    d.attempt(job_id, "w1@host-a", then="fail", error="KeyError")
    d.clock.advance(5_000)
    d.attempt(job_id, "w2@host-b", then="fail", error="TimeoutError")
    d.clock.advance(5_000)
    d.attempt(job_id, "w1@host-a", then="dead", error="KeyError")

    told = story(d.store, job_id, tenant_id=None, now=d.now, origins=ORIGINS)

    assert told is not None
    assert (told.state, told.origin, told.timeout) == (JobState.DEAD, JobOrigin.APPLICATION, None)
    assert [
        (a.number, a.worker, a.outcome.value, a.error_code, a.error_type) for a in told.history
    ] == [
        (1, "w1@host-a", "failed", "UNEXPECTED_ERROR", "KeyError"),
        (2, "w2@host-b", "failed", "UNEXPECTED_ERROR", "TimeoutError"),
        (3, "w1@host-a", "failed", "UNEXPECTED_ERROR", "KeyError"),
    ]
    assert [(a.started_at, a.ended_at) for a in told.history] == [
        (START, START + timedelta(seconds=1)),
        (START + timedelta(seconds=6), START + timedelta(seconds=7)),
        (START + timedelta(seconds=12), START + timedelta(seconds=13)),
    ]
    data = told.as_data()
    assert data["history"][1] == {
        "number": 2,
        "queued_again": False,
        "started_at": "2026-10-01T08:00:06.000Z",
        "ended_at": "2026-10-01T08:00:07.000Z",
        "worker": "w2@host-b",
        "outcome": "failed",
        "error_code": "UNEXPECTED_ERROR",
        "error_type": "TimeoutError",
    }
    assert data["payload_shape"] == '{"to": str}'
    assert "ada@x.test" not in json_text(data)


def test_the_story_marks_the_attempt_after_a_retry_dead_and_not_the_one_after_a_release(
    d: Deployment,
) -> None:
    """A released attempt is not counted: the next claim makes the same number again."""
    job_id = d.send()
    claimed = d.store.claim_job(job_id, now=d.now, lease_ms=60_000, worker="w1")
    assert claimed is not None
    d.store.release(claimed.lease, now=d.now)
    d.attempt(job_id, "w2", then="dead")
    d.store.retry_dead(job_id, tenant_id=None, now=d.now)
    d.attempt(job_id, "w1", then="succeed")

    told = story(d.store, job_id, tenant_id=None, now=d.now, origins=ORIGINS)

    assert told is not None
    assert [(a.number, a.outcome.value) for a in told.history] == [
        (1, "released"),
        (1, "failed"),
        (1, "succeeded"),
    ]
    assert queued_again(told.history) == [False, False, True]
    assert [a["queued_again"] for a in told.as_data()["history"]] == [False, False, True]


def test_a_job_enqueued_outside_any_work_tells_the_correlation_id_its_attempts_log(
    d: Deployment,
) -> None:
    """The worker logs the job's id as the correlation id of a job enqueued outside any work:
    the store holds the same, and the actor it runs as is its system actor."""
    job_id = d.send()

    told = story(d.store, job_id, tenant_id=None, now=d.now, origins=ORIGINS)

    assert told is not None
    by = told.job.enqueued_by
    assert (by.correlation_id, by.actor, told.runs_as) == (job_id, None, f"system:{SEND}")


def test_the_story_tells_the_actor_correlation_id_and_tenant_of_the_work_that_enqueued(
    d: Deployment,
) -> None:
    context = ExecutionContext("http", Actor("user", "ada"), "corr-7", tenant_id="clinic-a")
    with d.scope.open(context):
        job_id = d.send(delay_ms=60_000)

    told = story(d.store, job_id, tenant_id="clinic-a", now=d.now, origins=ORIGINS)
    other = story(d.store, job_id, tenant_id="clinic-b", now=d.now, origins=ORIGINS)

    assert told is not None
    assert other is None
    data = told.as_data()
    assert (data["actor"], data["runs_as"], data["correlation_id"], data["tenant_id"]) == (
        "user:ada",
        "user:ada",
        "corr-7",
        "clinic-a",
    )
    assert (data["state"], data["status"], data["run_at"]) == (
        "scheduled",
        "queued",
        "2026-10-01T08:01:00.000Z",
    )
    assert data["history"] == []


def test_the_story_of_a_process_timeout_names_the_process_instance_and_timeout(
    d: Deployment,
) -> None:
    job_id = d.timeout("o-2")

    told = story(d.store, job_id, tenant_id=None, now=d.now, origins=ORIGINS)

    assert told is not None
    assert told.origin is JobOrigin.PROCESS_TIMEOUT
    assert told.timeout == ProcessTimeout("opsspec.ordering", "o-2", "payment")
    assert told.as_data()["process_timeout"] == {
        "process": "opsspec.ordering",
        "instance": "o-2",
        "timeout": "payment",
    }


def test_stats_count_the_librarys_jobs_apart_from_the_applications(d: Deployment) -> None:
    origins = JobOrigins(
        {TIMEOUT: JobOrigin.PROCESS_TIMEOUT, PROCESS_COMMANDS_JOB: JobOrigin.PROCESS_COMMANDS}
    )
    d.send()
    d.attempt(d.send(), "w1", then="succeed")
    cancelled = d.timeout("o-1")
    d.store.cancel(cancelled, tenant_id=None, now=d.now)
    d.timeout("o-2")

    view = stats_view(d.store, origins)

    assert {name: dict(counts) for name, counts in view.application.items()} == {
        SEND: {JobStatus.QUEUED: 1, JobStatus.SUCCEEDED: 1}
    }
    assert {name: dict(counts) for name, counts in view.library.items()} == {
        TIMEOUT: {JobStatus.QUEUED: 1, JobStatus.CANCELLED: 1}
    }
    data = view.as_data()
    assert data["totals"]["application"]["cancelled"] == 0
    assert data["totals"]["library"]["cancelled"] == 1
    assert data["totals"]["all"]["queued"] == 2
    assert data["jobs"][TIMEOUT]["origin"] == "process-timeout"
    assert data["jobs"][SEND]["counts"] == {
        "queued": 1,
        "running": 0,
        "succeeded": 1,
        "failed": 0,
        "dead": 0,
        "cancelled": 0,
    }


def test_an_armed_timeout_is_not_cancelled_unless_forced_and_the_answer_names_it(
    d: Deployment,
) -> None:
    job_id = d.timeout("o-2")

    refused = cancel_job(d.store, job_id, tenant_id=None, now=d.now, origins=ORIGINS)
    status_after_refusal = d.status(job_id)
    forced = cancel_job(d.store, job_id, tenant_id=None, now=d.now, origins=ORIGINS, force=True)

    assert refused.answer is Answer.ARMED_TIMEOUT
    assert refused.timeout == ProcessTimeout("opsspec.ordering", "o-2", "payment")
    assert status_after_refusal is JobStatus.QUEUED
    assert forced.answer is Answer.DONE
    assert d.status(job_id) is JobStatus.CANCELLED


def test_cancel_of_one_job_answers_done_not_found_or_refused(d: Deployment) -> None:
    queued, dead, fired = d.send(), d.send(), d.timeout("o-3", delay_ms=0)
    d.attempt(dead, "w1", then="dead")
    d.attempt(fired, "w1", then="succeed")

    answers = [
        cancel_job(d.store, job_id, tenant_id=None, now=d.now, origins=ORIGINS).answer
        for job_id in (queued, dead, "no-such-job", fired)
    ]

    assert answers == [Answer.DONE, Answer.REFUSED, Answer.NOT_FOUND, Answer.REFUSED]


def test_retry_dead_of_one_job_answers_done_not_found_or_refused(d: Deployment) -> None:
    dead, queued = d.send(), d.send()
    d.attempt(dead, "w1", then="dead")

    answers = [
        retry_dead_job(d.store, job_id, tenant_id=None, now=d.now).answer
        for job_id in (dead, queued, "no-such-job")
    ]

    assert answers == [Answer.DONE, Answer.REFUSED, Answer.NOT_FOUND]
    assert d.status(dead) is JobStatus.QUEUED


def test_a_bulk_cancel_reaches_every_cancellable_state_and_skips_armed_timeouts(
    d: Deployment,
) -> None:
    scheduled, ready, retrying, running, dead = (
        d.send(delay_ms=60_000),
        d.send(),
        d.send(),
        d.send(),
        d.send(),
    )
    d.attempt(retrying, "w1", then="fail")
    d.store.claim_job(running, now=d.now, lease_ms=60_000, worker="w1")
    d.attempt(dead, "w1", then="dead")
    timeout = d.timeout("o-4")

    selection = select_to_cancel(d.store, JobFilter(), now=d.now, origins=ORIGINS)
    forced = select_to_cancel(d.store, JobFilter(), now=d.now, origins=ORIGINS, force=True)
    done = cancel_selected(d.store, selection, tenant_id=None, now=d.now)

    assert sorted(selection.job_ids) == sorted([scheduled, ready, retrying, running])
    assert selection.skipped_timeouts == 1
    assert sorted(forced.job_ids) == sorted([scheduled, ready, retrying, running, timeout])
    assert done == 4
    assert [d.status(job_id) for job_id in (scheduled, ready, retrying, running)] == [
        JobStatus.CANCELLED
    ] * 4
    assert (d.status(dead), d.status(timeout)) == (JobStatus.DEAD, JobStatus.QUEUED)


def test_a_bulk_cancel_narrows_by_state_name_and_tenant_and_refuses_a_finished_state(
    d: Deployment,
) -> None:
    with d.scope.open(ExecutionContext("http", Actor("user", "ada"), "c", tenant_id="t-1")):
        mine_later, mine_now = d.send(delay_ms=60_000), d.send()
    d.send(delay_ms=60_000)

    scheduled_of_t1 = JobFilter(state=JobState.SCHEDULED, name=SEND, tenant_id="t-1")
    selection = select_to_cancel(d.store, scheduled_of_t1, now=d.now, origins=ORIGINS)

    assert selection.job_ids == (mine_later,)
    assert mine_now not in selection.job_ids
    with pytest.raises(ValueError, match="a dead job is not cancelled"):
        select_to_cancel(d.store, JobFilter(state=JobState.DEAD), now=d.now, origins=ORIGINS)


def test_a_bulk_retry_queues_the_dead_jobs_of_a_name_again(d: Deployment) -> None:
    dead = [d.send() for _ in range(3)]
    for job_id in dead:
        d.attempt(job_id, "w1", then="dead")
    dead_timeout = d.timeout("o-5", delay_ms=0)
    d.attempt(dead_timeout, "w1", then="dead")

    selection = select_dead(d.store, JobFilter(name=SEND), now=d.now)
    done = retry_selected(d.store, selection, tenant_id=None, now=d.now)
    again = retry_selected(d.store, selection, tenant_id=None, now=d.now)

    assert sorted(selection.job_ids) == sorted(dead)
    assert (done, again) == (3, 0)
    assert {d.status(job_id) for job_id in dead} == {JobStatus.QUEUED}
    assert d.status(dead_timeout) is JobStatus.DEAD


def test_a_selection_reads_every_page(d: Deployment) -> None:
    enqueued = [d.send(delay_ms=60_000) for _ in range(SELECTION_PAGE + 7)]

    found = [job.id for job in jobs_matching(d.store, JobFilter(name=SEND), now=d.now)]

    assert sorted(found) == sorted(enqueued)
    assert len(found) == len(set(found))


def test_purge_deletes_succeeded_and_cancelled_jobs_finished_before_in_batches(
    d: Deployment,
) -> None:
    old_done = [d.send() for _ in range(5)]
    for job_id in old_done:
        d.attempt(job_id, "w1", then="succeed")
    old_cancelled = d.send()
    d.store.cancel(old_cancelled, tenant_id=None, now=d.now)
    old_dead = d.send()
    d.attempt(old_dead, "w1", then="dead")
    cutoff = d.now + timedelta(seconds=1)
    d.clock.advance(10_000)
    recent = d.send()
    d.attempt(recent, "w1", then="succeed")
    progress: list[int] = []

    purged = purge(d.store, before=cutoff, batch=2, progress=progress.append)

    assert purged == 6
    assert progress == [2, 4, 6]
    assert [d.store.find(job_id, tenant_id=None) for job_id in [*old_done, old_cancelled]] == [
        None
    ] * 6
    assert (d.status(old_dead), d.status(recent)) == (JobStatus.DEAD, JobStatus.SUCCEEDED)
    assert purge(d.store, before=cutoff, dead=True) == 1
    assert d.store.find(old_dead, tenant_id=None) is None


def test_text_read_from_a_store_is_printable_and_json_text_is_ascii() -> None:
    forged = "ada\nstatus  succeeded\x1b[2K\u202e\x7f"

    assert printable(forged) == "ada\\nstatus  succeeded\\x1b[2K\\u202e\\x7f"
    text = json_text({"actor": forged})
    assert json.loads(text) == {"actor": forged}
    assert all(char.isprintable() for line in text.splitlines() for char in line)
    assert text.isascii()
