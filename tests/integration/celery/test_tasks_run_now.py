"""``run_now``: one deliberate run in this process, as a worker would run it, with no lock, at
the instant asked or replaying an occurrence; ``send_to_workers``: an occurrence sent as beat
sends it, under its lock and its claim."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from celery.result import AsyncResult
from celery_support import AppFactory, Runs
from probe_jobs import ASYNC, SYNC, AsyncProbeJob, Probe, SyncProbeJob

from ddd_celery.celery import CeleryJobs, install_jobs, run_now
from ddd_celery.celery.run_now import NotAnOccurrenceError, OccurrenceNotSentError, send_to_workers
from ddd_celery.declarations import JobExecution
from ddd_celery.kernel import (
    DomainError,
    FixedClock,
    InMemoryLock,
    InMemoryTenantDirectory,
    Lease,
    Lock,
    SequentialIdGenerator,
    system_actor,
)
from ddd_celery.scheduling.errors import JobTimeoutError, UnknownJobError
from ddd_celery.scheduling.run_state import InMemoryJobRunState

NOW = datetime(2026, 3, 2, 9, 58, 30, tzinfo=UTC)
CLAIMED = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


class UntouchableLock(Lock):
    """run_now takes no lock: asking this one fails the test."""

    def acquire(self, key: str, ttl_ms: int) -> Lease | None:
        raise AssertionError(f"run_now asked the lock for {key}")

    def release(self, lease: Lease) -> bool:
        raise AssertionError("run_now released a lock")


def wire(
    make_app: AppFactory, probe: Probe, runs: Runs, **overrides: Any
) -> tuple[Any, CeleryJobs]:
    app = make_app()
    clock = FixedClock(NOW)
    options: dict[str, Any] = {
        "jobs": [SyncProbeJob, AsyncProbeJob],
        "providers": {Probe: lambda: probe},
        "lock": UntouchableLock(),
        "clock": clock,
        "run_state": InMemoryJobRunState(clock),
        "ids": SequentialIdGenerator("now-"),
        "on_run": runs,
        "environ": {},
    }
    return app, install_jobs(app, **(options | overrides))


@pytest.mark.parametrize("name", [SYNC, ASYNC])
def test_run_now_runs_the_job_in_the_scope_of_a_scheduled_run_at_the_instant_asked(
    make_app: AppFactory, runs: Runs, name: str
) -> None:
    probe = Probe()
    app, _ = wire(make_app, probe, runs)

    record = run_now(app, name)

    [seen] = probe.seen
    assert seen.context is not None
    assert (seen.context.origin, seen.context.actor) == ("schedule", system_actor(name))
    assert seen.context.correlation_id == "now-1"
    assert seen.execution.scheduled_at == NOW
    assert (record.outcome, record.scheduled_at, record.correlation_id) == (
        "succeeded",
        NOW,
        "now-1",
    )
    assert runs.records == [record]


def test_each_run_now_gets_a_fresh_correlation_id(make_app: AppFactory, runs: Runs) -> None:
    app, registry = wire(make_app, Probe(), runs)

    run_now(app, SYNC)
    run_now(registry, SYNC)

    assert [r.correlation_id for r in runs.records] == ["now-1", "now-2"]


def test_run_now_takes_no_lock_and_leaves_the_run_state_alone(
    make_app: AppFactory, runs: Runs
) -> None:
    app, registry = wire(make_app, Probe(), runs)
    registry.run_state.claim(SYNC, CLAIMED, queue=False, ttl_ms=3_600_000)

    run_now(app, SYNC)

    assert registry.run_state.running(SYNC) == CLAIMED
    assert [r.outcome for r in runs.records] == ["succeeded"]


def test_run_now_runs_a_disabled_job_in_a_process_that_runs_no_job_by_time(
    make_app: AppFactory, runs: Runs
) -> None:
    probe = Probe()
    app, registry = wire(
        make_app,
        probe,
        runs,
        environ={"RUN_JOBS": "false", "JOB_PROBE_SYNC_ENABLED": "false"},
    )
    assert registry.start is False
    assert registry.jobs[SYNC].schedule.options.enabled is False

    run_now(app, SYNC)

    assert len(probe.seen) == 1


def test_run_now_raises_what_the_job_raised_after_recording_it(
    make_app: AppFactory, runs: Runs
) -> None:
    refused = DomainError("NOTHING_DUE", "nothing is due")

    def refuse(execution: JobExecution) -> None:
        raise refused

    app, _ = wire(make_app, Probe(behaviour=refuse), runs)

    with pytest.raises(DomainError) as raised:
        run_now(app, SYNC)

    assert raised.value is refused
    assert [(r.outcome, r.error_code) for r in runs.records] == [("failed", "NOTHING_DUE")]


def test_run_now_of_a_run_past_its_timeout_raises_the_timeout(
    make_app: AppFactory, runs: Runs
) -> None:
    def outlive(execution: JobExecution) -> None:
        execution.signal.wait(5)

    app, _ = wire(make_app, Probe(behaviour=outlive), runs, settings={SYNC: {"timeout_ms": 20}})

    with pytest.raises(JobTimeoutError):
        run_now(app, SYNC)

    assert [r.error_code for r in runs.records] == ["JOB_TIMEOUT"]


def test_run_now_runs_a_per_tenant_job_for_every_tenant(make_app: AppFactory, runs: Runs) -> None:
    probe = Probe()
    app, _ = wire(
        make_app,
        probe,
        runs,
        tenants=InMemoryTenantDirectory(["acme", "globex"]),
        settings={SYNC: {"tenancy": "per-tenant"}},
    )

    run_now(app, SYNC)

    assert [s.execution.tenant_id for s in probe.seen] == ["acme", "globex"]


def test_run_now_of_a_name_no_job_has_is_refused(make_app: AppFactory, runs: Runs) -> None:
    app, _ = wire(make_app, Probe(), runs)

    with pytest.raises(UnknownJobError, match=r"probe\.renamed"):
        run_now(app, "probe.renamed")

    assert runs.records == []


def test_run_now_of_a_beat_schedule_entry_points_to_its_own_task(
    make_app: AppFactory, runs: Runs
) -> None:
    app = make_app(beat_schedule={"flush": {"task": "cache.flush", "schedule": 900}})
    install_jobs(app, jobs=[], lock=UntouchableLock(), environ={})

    with pytest.raises(TypeError, match=r"beat_schedule entry.*cache\.flush"):
        run_now(app, "beat.flush")


def test_run_now_on_an_app_without_jobs_says_to_install_them(make_app: AppFactory) -> None:
    with pytest.raises(LookupError, match="install_jobs"):
        run_now(make_app(), SYNC)


def test_run_now_at_an_instant_of_the_schedule_replays_that_occurrence(
    make_app: AppFactory, runs: Runs
) -> None:
    probe = Probe()
    app, _ = wire(make_app, probe, runs)

    record = run_now(app, SYNC, at=CLAIMED.astimezone(ZoneInfo("Europe/Paris")))

    [seen] = probe.seen
    assert seen.execution.scheduled_at == CLAIMED
    assert record.scheduled_at == CLAIMED
    assert record.scheduled_at.utcoffset() == timedelta(0)
    assert runs.records == [record]


@pytest.mark.parametrize(
    ("at", "refusal"),
    [
        (
            CLAIMED + timedelta(minutes=30),
            "probe.sync: 2026-03-02T09:30:00.000Z is not an instant of its schedule "
            "(every 1h); the nearest are 2026-03-02T09:00:00.000Z and 2026-03-02T10:00:00.000Z",
        ),
        (
            CLAIMED + timedelta(hours=1),
            "probe.sync: 2026-03-02T10:00:00.000Z is still to come "
            "(now is 2026-03-02T09:58:30.000Z); only an occurrence that came is replayed",
        ),
    ],
    ids=["off the schedule", "still to come"],
)
def test_run_now_at_an_instant_that_is_no_occurrence_that_came_runs_nothing(
    make_app: AppFactory, runs: Runs, at: datetime, refusal: str
) -> None:
    probe = Probe()
    app, _ = wire(make_app, probe, runs)

    with pytest.raises(NotAnOccurrenceError) as refused:
        run_now(app, SYNC, at=at)

    assert str(refused.value) == refusal
    assert probe.seen == []
    assert runs.records == []


def test_run_now_at_a_naive_instant_is_refused(make_app: AppFactory, runs: Runs) -> None:
    app, _ = wire(make_app, Probe(), runs)

    with pytest.raises(ValueError, match="naive"):
        run_now(app, SYNC, at=CLAIMED.replace(tzinfo=None))


def wire_sending(
    make_app: AppFactory, runs: Runs, **overrides: Any
) -> tuple[Any, CeleryJobs, InMemoryLock]:
    lock = InMemoryLock(FixedClock(NOW))
    app, registry = wire(make_app, Probe(), runs, lock=lock, **overrides)
    return app, registry, lock


def record_sends(app: Any) -> list[dict[str, Any]]:
    """What the app's ``send_task`` is asked to send from now on, each answered ``task-1``."""
    sent: list[dict[str, Any]] = []

    def send_task(name: str, **options: Any) -> AsyncResult:
        sent.append({"name": name, **options})
        return AsyncResult("task-1", app=app)

    app.send_task = send_task
    return sent


def test_send_to_workers_locks_claims_and_sends_the_occurrence_as_beat_would(
    make_app: AppFactory, runs: Runs
) -> None:
    app, registry, lock = wire_sending(make_app, runs)
    sent_messages = record_sends(app)

    sent = send_to_workers(app, SYNC, at=CLAIMED)

    assert (sent.task_id, sent.scheduled_at, sent.queue) == ("task-1", CLAIMED, "probe")
    assert sent.lock_key == f"job:{SYNC}:2026-03-02T09:00:00.000Z"
    [message] = sent_messages
    assert message["name"] == SYNC
    assert message["kwargs"] == {
        "scheduled_at": "2026-03-02T09:00:00.000Z",
        "correlation_id": sent.correlation_id,
        "tenant_id": None,
    }
    assert message["expires"] == sent.expires_at > NOW
    assert lock.acquire(sent.lock_key, 1_000) is None  # held until the message expires
    assert registry.run_state.running(SYNC) == CLAIMED
    assert runs.records == []  # the worker records the run


def test_send_to_workers_without_an_instant_sends_the_latest_occurrence(
    make_app: AppFactory, runs: Runs
) -> None:
    app, _, _ = wire_sending(make_app, runs)
    record_sends(app)

    assert send_to_workers(app, SYNC).scheduled_at == CLAIMED


def test_send_to_workers_behind_a_run_in_progress_is_refused_and_frees_its_lock(
    make_app: AppFactory, runs: Runs
) -> None:
    app, registry, lock = wire_sending(make_app, runs)
    earlier = CLAIMED - timedelta(hours=1)
    registry.run_state.claim(SYNC, earlier, queue=False, ttl_ms=3_600_000)

    with pytest.raises(OccurrenceNotSentError, match="a run is in progress") as refused:
        send_to_workers(app, SYNC, at=CLAIMED)

    assert "(the occurrence of 2026-03-02T08:00:00.000Z)" in str(refused.value)
    assert registry.run_state.running(SYNC) == earlier
    assert lock.acquire(f"job:{SYNC}:2026-03-02T09:00:00.000Z", 1_000) is not None


def test_send_to_workers_behind_a_run_in_progress_of_a_queueing_job_queues_it(
    make_app: AppFactory, runs: Runs
) -> None:
    app, registry, _ = wire_sending(make_app, runs, settings={SYNC: {"overlap": "queue"}})
    earlier = CLAIMED - timedelta(hours=1)
    registry.run_state.claim(SYNC, earlier, queue=True, ttl_ms=3_600_000)

    sent = send_to_workers(app, SYNC, at=CLAIMED)

    assert (sent.task_id, sent.queued_behind) == (None, earlier)


def test_send_to_workers_whose_lock_is_held_sends_nothing(make_app: AppFactory, runs: Runs) -> None:
    app, registry, lock = wire_sending(make_app, runs)
    lock.acquire(f"job:{SYNC}:2026-03-02T09:00:00.000Z", 60_000)  # a beat sent it

    with pytest.raises(
        OccurrenceNotSentError,
        match=re.escape("another beat or run-now holds the occurrence of 2026-03-02T09:00:00.000Z"),
    ):
        send_to_workers(app, SYNC, at=CLAIMED)

    assert registry.run_state.running(SYNC) is None


def test_send_to_workers_that_the_broker_refuses_frees_the_claim_and_the_lock(
    make_app: AppFactory, runs: Runs
) -> None:
    app, registry, lock = wire_sending(make_app, runs)

    def refuse(name: str, **options: Any) -> Any:
        raise OSError("connection refused")

    app.send_task = refuse

    with pytest.raises(OccurrenceNotSentError, match="the broker did not take") as refused:
        send_to_workers(app, SYNC, at=CLAIMED)

    assert isinstance(refused.value.__cause__, OSError)
    assert registry.run_state.running(SYNC) is None
    assert lock.acquire(f"job:{SYNC}:2026-03-02T09:00:00.000Z", 1_000) is not None
