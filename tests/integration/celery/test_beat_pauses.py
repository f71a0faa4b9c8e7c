"""Beat honours the pauses of ``celery jobs pause``: read once per tick that sends, recorded.

The real ``JobBeatScheduler`` ticked in-process (``test_beat``'s ``Instance``) on a fixed clock,
its pauses in memory, on the real Redis, or behind the suite's fault proxy; the pauses are
written as the command writes them, through another instance of the store.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from celery import Celery
from fault_proxy import FaultProxy
from services import REDIS_URL
from test_beat import START, Instance, declared, run_until, scheduled

from ddd_celery.celery import install_jobs
from ddd_celery.celery.beat_entries import translate_beat_schedule
from ddd_celery.celery.pauses import shared_pauses
from ddd_celery.celery.registry import jobs_of
from ddd_celery.kernel.clock import FixedClock
from ddd_celery.kernel.lock import InMemoryLock
from ddd_celery.kernel.metrics import InMemoryMetrics
from ddd_celery.redis import RedisLock, connect
from ddd_celery.redis.pauses import RedisJobPauses
from ddd_celery.scheduling.checkpoints import InMemoryJobCheckpoints
from ddd_celery.scheduling.last_runs import InMemoryJobLastRuns
from ddd_celery.scheduling.observability import RUNS_COUNTER, RunRecorder
from ddd_celery.scheduling.outcomes import Outcome
from ddd_celery.scheduling.pauses import InMemoryJobPauses, JobPauses, Pause
from ddd_celery.sql import SqlLock, sqlite_engine
from ddd_celery.sql.pauses import SqlJobPauses

REMIND, EXPORT = "billing.remind", "billing.export"
TEN = datetime(2026, 3, 2, 10, tzinfo=UTC)
BEAT = "ddd_celery.celery.beat"


class CountedPauses(InMemoryJobPauses):
    """Pauses in memory that count how often beat reads them."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def paused(self) -> Mapping[str, Pause]:
        self.reads += 1
        return super().paused()


def paused_by_ada(pauses: JobPauses, job: str = REMIND) -> None:
    pauses.pause(job, by="ada@ops-1", at=START, reason="invoices wrong")


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(START)


def test_a_paused_job_is_recorded_skipped_paused_and_not_sent_while_the_others_are(
    clock: FixedClock,
) -> None:
    instance = Instance(
        clock, [declared(REMIND, every="15m"), declared(EXPORT, every="15m")], InMemoryLock(clock)
    )
    paused_by_ada(instance.registry.pauses)

    run_until(clock, START + timedelta(minutes=20), instance.beat())

    assert [(item.task, item.scheduled_at) for item in instance.sent] == [
        (EXPORT, "2026-03-02T10:00:00.000Z"),
        (EXPORT, "2026-03-02T10:15:00.000Z"),
    ]
    assert instance.outcomes() == [
        ("skipped-paused", "2026-03-02T10:00:00Z"),
        ("skipped-paused", "2026-03-02T10:15:00Z"),
    ]


def test_a_resume_makes_the_next_occurrence_run(clock: FixedClock) -> None:
    instance = Instance(clock, [declared(REMIND, every="15m")], InMemoryLock(clock))
    paused_by_ada(instance.registry.pauses)
    beat = instance.beat()
    run_until(clock, TEN + timedelta(minutes=1), beat)

    instance.registry.pauses.resume(REMIND)
    run_until(clock, TEN + timedelta(minutes=31), beat)

    assert instance.outcomes() == [("skipped-paused", "2026-03-02T10:00:00Z")]
    assert scheduled(instance.sent) == ["2026-03-02T10:15:00.000Z", "2026-03-02T10:30:00.000Z"]


def test_a_pause_is_honoured_from_the_next_occurrence_of_a_beat_already_running(
    clock: FixedClock,
) -> None:
    instance = Instance(clock, [declared(REMIND, every="15m")], InMemoryLock(clock))
    beat = instance.beat()
    run_until(clock, TEN + timedelta(minutes=1), beat)

    paused_by_ada(instance.registry.pauses)
    run_until(clock, TEN + timedelta(minutes=16), beat)

    assert scheduled(instance.sent) == ["2026-03-02T10:00:00.000Z"]
    assert instance.outcomes() == [("skipped-paused", "2026-03-02T10:15:00Z")]


def test_the_pauses_are_read_once_per_tick_that_sends_whatever_the_number_of_jobs(
    clock: FixedClock,
) -> None:
    jobs = [declared(f"billing.job-{index}", every="1s") for index in range(200)]
    instance = Instance(clock, jobs, InMemoryLock(clock))
    pauses = instance.registry.pauses = CountedPauses()
    paused_by_ada(pauses, "billing.job-7")

    run_until(clock, START + timedelta(seconds=10), instance.beat())

    assert len(instance.sent) == 199 * 10
    assert [run.job for run in instance.runs] == ["billing.job-7"] * 10
    assert pauses.reads == 10


def test_a_tick_with_nothing_to_send_does_not_read_the_pauses(clock: FixedClock) -> None:
    instance = Instance(clock, [declared(REMIND, every="15m")], InMemoryLock(clock))
    pauses = instance.registry.pauses = CountedPauses()
    beat = instance.beat()

    for _ in range(3):
        beat.tick()
    run_until(clock, START + timedelta(minutes=32), beat)

    assert pauses.reads == 3, "one read per occurrence due: 10:00, 10:15, 10:30"


def test_one_beat_records_skipped_paused_the_others_skipped_locked_and_none_sends(
    clock: FixedClock,
) -> None:
    lock, pauses = InMemoryLock(clock), InMemoryJobPauses()
    first, second = (Instance(clock, [declared(REMIND, every="15m")], lock) for _ in range(2))
    first.registry.pauses = second.registry.pauses = pauses
    paused_by_ada(pauses)

    run_until(clock, START + timedelta(minutes=2), first.beat(), second.beat())

    assert first.sent + second.sent == []
    assert sorted(first.outcomes() + second.outcomes()) == [
        ("skipped-locked", "2026-03-02T10:00:00Z"),
        ("skipped-paused", "2026-03-02T10:00:00Z"),
    ]


def test_skipped_paused_is_logged_counted_kept_in_the_last_runs_and_passed_to_on_run(
    clock: FixedClock, caplog: pytest.LogCaptureFixture
) -> None:
    instance = Instance(clock, [declared(REMIND, every="15m")], InMemoryLock(clock))
    metrics, last_runs = InMemoryMetrics(), InMemoryJobLastRuns()
    instance.registry.recorder = RunRecorder(
        metrics=metrics, last_runs=last_runs, on_run=instance.registry.recorder._on_run
    )
    paused_by_ada(instance.registry.pauses)
    caplog.set_level(logging.INFO)

    run_until(clock, START + timedelta(minutes=2), instance.beat())

    (line,) = [r for r in caplog.records if getattr(r, "outcome", None) == "skipped-paused"]
    assert (line.levelname, line.getMessage()) == (
        "INFO",
        "Scheduled job skipped: paused by an operator",
    )
    assert metrics.counter(RUNS_COUNTER, job=REMIND, status="skipped-paused") == 1
    kept = last_runs.read(REMIND)
    assert kept is not None
    assert (kept.outcome, kept.scheduled_at, kept.started_at) == (Outcome.SKIPPED_PAUSED, TEN, None)
    assert instance.outcomes() == [("skipped-paused", "2026-03-02T10:00:00Z")]


def test_a_paused_occurrence_is_checkpointed_so_a_restart_does_not_catch_it_up(
    clock: FixedClock,
) -> None:
    checkpoints, lock = InMemoryJobCheckpoints(), InMemoryLock(clock)
    job = declared(REMIND, every="15m", missed="run-once")
    before = Instance(clock, [job], lock, checkpoints)
    paused_by_ada(before.registry.pauses)
    run_until(clock, TEN + timedelta(minutes=2), before.beat())

    after = Instance(clock, [job], lock, checkpoints)  # restarted, the job resumed meanwhile
    run_until(clock, TEN + timedelta(minutes=16), after.beat())

    assert checkpoints.read(REMIND) == TEN + timedelta(minutes=15)
    assert scheduled(after.sent) == ["2026-03-02T10:15:00.000Z"]
    assert after.runs == []


def test_a_disabled_job_stays_disabled_whether_paused_or_not(clock: FixedClock) -> None:
    instance = Instance(clock, [declared(REMIND, every="15m", enabled=False)], InMemoryLock(clock))
    paused_by_ada(instance.registry.pauses)
    beat = instance.beat()
    run_until(clock, START + timedelta(minutes=20), beat)
    instance.registry.pauses.resume(REMIND)
    run_until(clock, START + timedelta(minutes=40), beat)

    assert instance.sent == []
    assert instance.runs == []


def test_a_paused_beat_schedule_entry_is_not_sent(clock: FixedClock) -> None:
    entries = translate_beat_schedule(
        {"Flush cache": {"task": "cache.flush", "schedule": timedelta(minutes=15)}},
        timezone="UTC",
    )
    instance = Instance(clock, entries, InMemoryLock(clock))
    paused_by_ada(instance.registry.pauses, entries[0].name)

    run_until(clock, START + timedelta(minutes=2), instance.beat())

    assert instance.sent == []
    assert instance.outcomes() == [("skipped-paused", "2026-03-02T10:00:00Z")]


# --- a pauses store that cannot be asked -----------------------------------------------------


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    with FaultProxy.to_url(REDIS_URL) as running:
        yield running


def redis_pauses(url: str, prefix: str) -> RedisJobPauses:
    return RedisJobPauses(connect(url, timeout=0.2, retries=0), prefix=prefix)


@pytest.mark.redis
def test_a_pauses_store_that_cannot_be_asked_is_said_once_and_the_last_pauses_are_kept(
    clock: FixedClock, proxy: FaultProxy, caplog: pytest.LogCaptureFixture
) -> None:
    prefix = f"test:pauses:{uuid.uuid4().hex}:"
    operator = redis_pauses(REDIS_URL, prefix)
    clock.set(TEN - timedelta(milliseconds=500))
    instance = Instance(
        clock, [declared(REMIND, every="1s"), declared(EXPORT, every="1s")], InMemoryLock(clock)
    )
    instance.registry.pauses = redis_pauses(proxy.url(REDIS_URL), prefix)
    paused_by_ada(operator)
    caplog.set_level(logging.INFO)
    beat = instance.beat()
    try:
        run_until(clock, TEN + timedelta(seconds=1), beat)
        proxy.cut()
        run_until(clock, TEN + timedelta(seconds=4), beat)
        proxy.restore()
        operator.resume(REMIND)
        run_until(clock, TEN + timedelta(seconds=6), beat)
    finally:
        operator.resume(REMIND)

    def sent(task: str) -> list[str]:
        return [item.scheduled_at[11:19] for item in instance.sent if item.task == task]

    assert sent(EXPORT) == [f"10:00:0{second}" for second in range(7)], "the others ran on"
    assert sent(REMIND) == ["10:00:05", "10:00:06"], "paused through the outage, then resumed"
    lines = [
        (r.levelname, r.getMessage())
        for r in caplog.records
        if r.name == BEAT and r.levelno >= logging.WARNING
    ]
    assert [level for level, _ in lines] == ["ERROR", "WARNING"], lines
    assert lines[0][1].startswith("beat: the pauses store (Redis at 127.0.0.1:")
    assert "beat keeps the pauses it last read" in lines[0][1]
    assert lines[1][1].startswith("beat: the pauses store (Redis at 127.0.0.1:")
    assert "answers again" in lines[1][1]


@pytest.mark.redis
def test_a_beat_that_never_read_the_pauses_knows_of_none_and_sends(
    clock: FixedClock, proxy: FaultProxy
) -> None:
    prefix = f"test:pauses:{uuid.uuid4().hex}:"
    operator = redis_pauses(REDIS_URL, prefix)
    clock.set(TEN - timedelta(milliseconds=500))
    instance = Instance(clock, [declared(REMIND, every="1s")], InMemoryLock(clock))
    instance.registry.pauses = redis_pauses(proxy.url(REDIS_URL), prefix)
    paused_by_ada(operator)
    proxy.cut()
    try:
        run_until(clock, TEN + timedelta(seconds=2), instance.beat())
    finally:
        operator.resume(REMIND)

    assert scheduled(instance.sent) == [f"2026-03-02T10:00:0{s}.000Z" for s in range(3)]


# --- where the pauses live -------------------------------------------------------------------


@pytest.mark.redis
def test_the_pauses_live_beside_a_redis_lock_under_its_prefix(clock: FixedClock) -> None:
    client = connect(REDIS_URL)
    prefix = f"test:pauses:{uuid.uuid4().hex}:"

    pauses = shared_pauses(RedisLock(client, prefix=prefix, clock=clock))
    try:
        paused_by_ada(pauses)
        assert client.hkeys(f"{prefix}pauses") == [REMIND.encode()]
    finally:
        client.delete(f"{prefix}pauses")


def test_the_pauses_live_beside_a_sql_lock_in_its_tables(clock: FixedClock, tmp_path: Path) -> None:
    engine = sqlite_engine(tmp_path / "jobs.sqlite3", prefix="app_")

    pauses = shared_pauses(SqlLock(engine, clock, prefix="app_"))

    assert isinstance(pauses, SqlJobPauses)
    paused_by_ada(pauses)
    assert set(SqlJobPauses(engine, prefix="app_").paused()) == {REMIND}


def test_the_pauses_of_any_other_lock_live_in_process_memory(clock: FixedClock) -> None:
    assert isinstance(shared_pauses(InMemoryLock(clock)), InMemoryJobPauses)


@pytest.mark.redis
def test_an_app_on_redis_keeps_its_pauses_under_its_key_prefix_unless_install_jobs_is_given_some(
    clock: FixedClock,
) -> None:
    def app(**given: object) -> Celery:
        app = Celery(f"pauses-{uuid.uuid4().hex}", broker=REDIS_URL, set_as_current=False)
        app.conf.ddd_celery_key_prefix = "shop:"
        install_jobs(app, jobs=[], clock=clock, **given)  # type: ignore[arg-type]
        return app

    configured = jobs_of(app()).pauses
    given = InMemoryJobPauses()

    assert isinstance(configured, RedisJobPauses)
    assert configured._key == "shop:pauses"
    assert jobs_of(app(pauses=given)).pauses is given
