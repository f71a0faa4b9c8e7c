"""RedisJobStore's operator queries on the real Redis: what a page reads, how a purge and a
filter are bounded, and how a store written by the earlier layout is adopted.

The contract (tests/contracts) says what they answer; these say what they cost. Redis's MONITOR
shows every command a script runs: a page reads its index and the jobs it lists, the same
commands among 10,000 jobs as among 100.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
from redis import Redis

from ddd_celery.background.store import (
    EnqueuedBy,
    JobFilter,
    JobState,
    JobStats,
    JobStatus,
    NewJob,
    StoredJob,
)
from ddd_celery.redis import RedisJobStore
from ddd_celery.redis import job_store as redis_job_store

pytestmark = pytest.mark.redis

T0 = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
LEASE_MS = 30_000
PAGE = 8
"""A page smaller than the 10 jobs each filter reaches in the small store: full in both."""


def at(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def job_of(n: int) -> NewJob:
    """Job ``n``, enqueued at ``T0 + n`` ms: one in ten of each name, tenant and queue kind."""
    return NewJob(
        id=f"job-{n:05d}",
        name="billing.rare" if n % 10 == 1 else "billing.common",
        queue="audit" if n % 10 == 3 else "billing",
        payload={"n": n},
        enqueued_at=at(n),
        run_at=at(n),
        max_attempts=1,
        enqueued_by=EnqueuedBy(tenant_id="clinic-rare" if n % 10 == 2 else "clinic-common"),
    )


def fill(store: RedisJobStore, count: int) -> None:
    """``count`` jobs; one in ten (``n % 10 == 4``) cancelled."""
    for n in range(count):
        store.add(job_of(n), dispatched=False)
        if n % 10 == 4:
            store.cancel(job_of(n).id, tenant_id=None, now=at(count))


FILTERS = {
    "none": JobFilter(),
    "state": JobFilter(state=JobState.CANCELLED),
    "name": JobFilter(name="billing.rare"),
    "tenant": JobFilter(tenant_id="clinic-rare"),
}


@contextmanager
def monitored(redis_url: str, prefix: str) -> Iterator[list[dict[str, str]]]:
    """The commands Redis runs on keys under ``prefix`` meanwhile, scripts' commands included
    (MONITOR; client_type ``lua`` for those a script runs)."""
    seen: list[dict[str, str]] = []
    client = Redis.from_url(redis_url)
    end = f"{prefix}monitor-end"
    # answered OK when entered: Redis streams every command from then on
    with client.monitor() as monitor:  # type: ignore[no-untyped-call]

        def listen() -> None:
            for event in monitor.listen():
                if end in event["command"]:
                    return
                if prefix in event["command"]:
                    seen.append(event)

        listener = threading.Thread(target=listen, daemon=True)
        listener.start()
        yield seen
        client.get(end)
        listener.join(timeout=10)
    client.close()
    assert not listener.is_alive()


def commands_of(events: list[dict[str, str]]) -> Counter[str]:
    return Counter(event["command"].split(" ", 1)[0].upper() for event in events)


def page_commands(
    redis_url: str, store: RedisJobStore, prefix: str, where: JobFilter
) -> tuple[list[StoredJob], Counter[str]]:
    with monitored(redis_url, prefix) as events:
        page = store.list_page(where, now=at(20_000), limit=PAGE)
    return page.jobs, commands_of(events)


def fill_view(n: int) -> StoredJob:
    """Job ``n`` as ``fill`` leaves it, for ``JobFilter.matches``."""
    job = job_of(n)
    cancelled = n % 10 == 4
    return StoredJob(
        id=job.id,
        name=job.name,
        queue=job.queue,
        status=JobStatus.CANCELLED if cancelled else JobStatus.QUEUED,
        payload=job.payload,
        enqueued_at=job.enqueued_at,
        run_at=job.run_at,
        attempts=0,
        max_attempts=1,
        enqueued_by=job.enqueued_by,
        finished_at=at(10_000) if cancelled else None,
    )


def test_a_page_reads_its_index_and_its_jobs_the_same_among_10_000_jobs_as_among_100(
    redis_url: str, redis_client: Redis, prefix: str
) -> None:
    small, large = (
        RedisJobStore(redis_client, prefix=prefix + "100:"),
        RedisJobStore(redis_client, prefix=prefix + "10000:"),
    )
    fill(small, 100)
    fill(large, 10_000)
    now = at(20_000)

    for name, where in FILTERS.items():
        small_jobs, small_commands = page_commands(redis_url, small, prefix + "100:", where)
        large_jobs, large_commands = page_commands(redis_url, large, prefix + "10000:", where)

        expected = [n for n in range(9_999, -1, -1) if where.matches(fill_view(n), now)]
        assert [job.id for job in large_jobs] == [job_of(n).id for n in expected[:PAGE]], name
        assert len(small_jobs) == PAGE, name
        assert large_commands == small_commands, name
        # one script; the index read once; each job read once to check it, once to list it,
        # the one after the page too (whether there is a next page)
        assert large_commands["EVALSHA"] == 1, name
        assert large_commands["ZREVRANGEBYLEX"] == 1, name
        assert large_commands["HMGET"] == large_commands["HGETALL"] == PAGE + 1, name


def test_a_page_reads_the_smallest_index_its_filter_names(
    redis_url: str, redis_client: Redis, prefix: str
) -> None:
    store = RedisJobStore(redis_client, prefix=prefix)
    fill(store, 1_000)
    # the rare name is in one job in ten, the common tenant in nine: the name's index is read
    where = JobFilter(name="billing.rare", tenant_id="clinic-common")

    with monitored(redis_url, prefix) as events:
        page = store.list_page(where, now=at(20_000), limit=PAGE)

    assert [job.id for job in page.jobs] == [job_of(n).id for n in range(991, 911, -10)]
    reads = [e["command"].split(" ")[1] for e in events if e["command"].startswith("ZREVRANGE")]
    assert reads == [f"{prefix}list:name:billing.rare"]
    assert commands_of(events)["HMGET"] == PAGE + 1


def test_a_filter_its_index_does_not_answer_reads_in_bounded_script_calls(
    redis_url: str, redis_client: Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = RedisJobStore(redis_client, prefix=prefix)
    fill(store, 100)
    monkeypatch.setattr(redis_job_store, "LIST_READ", 10)
    where = JobFilter(queue="audit")  # no index of queues: read on list:all, 10 entries a call

    with monitored(redis_url, prefix) as events:
        page = store.list_page(where, now=at(20_000), limit=3)

    assert [job.id for job in page.jobs] == ["job-00093", "job-00083", "job-00073"]
    commands = commands_of(events)
    # up to job-00063 (whether a next page exists): 37 entries read, 10 a call
    assert commands["EVALSHA"] == 4
    assert commands["HMGET"] == 37
    rest = store.list_page(where, now=at(20_000), limit=10, cursor=page.cursor)
    assert [job.id for job in rest.jobs] == [f"job-000{n}3" for n in range(6, -1, -1)]
    assert rest.cursor is None


def test_a_purge_batch_reads_the_oldest_finished_entries_only(
    redis_url: str, redis_client: Redis, prefix: str
) -> None:
    store = RedisJobStore(redis_client, prefix=prefix)
    fill(store, 1_000)  # 100 cancelled

    with monitored(redis_url, prefix) as events:
        assert store.purge_finished(before=at(5_000), statuses={JobStatus.CANCELLED}, limit=5) == 5

    commands = commands_of(events)
    assert commands["EVALSHA"] == 1
    assert commands["ZRANGEBYSCORE"] == 1
    assert commands["DEL"] == 5
    assert store.stats().counts["billing"][JobStatus.CANCELLED] == 95


def test_stats_read_two_counters_never_a_job(
    redis_url: str, redis_client: Redis, prefix: str
) -> None:
    store = RedisJobStore(redis_client, prefix=prefix)
    fill(store, 100)

    with monitored(redis_url, prefix) as events:
        stats = store.stats()

    assert commands_of(events) == Counter({"EVALSHA": 1, "HGETALL": 2})
    assert stats.by_name["billing.rare"] == {JobStatus.QUEUED: 10}
    assert stats.by_name["billing.common"] == {JobStatus.QUEUED: 80, JobStatus.CANCELLED: 10}


# -- a store written by the earlier layout ----------------------------------------------------


def as_earlier_layout(client: Redis, prefix: str) -> None:
    """Rewrite the store's keys as the version before the listing kept them: the ids of every
    job (P enqueued) and of each status (P status:<status>) by enqueued_at, the finished ones
    by finished_at (P finished), counts by queue only (P stats), no history."""
    for key in client.scan_iter(match=f"{prefix}*"):
        name = key.decode()[len(prefix) :]
        if name.startswith(("list:", "finished:")) or name == "stats:name":
            client.delete(key)
    for key in client.scan_iter(match=f"{prefix}job:*"):
        fields = {text(k): text(v) for k, v in client.hgetall(key).items()}
        job_id, enqueued_at = fields["id"], int(fields["enqueued_at"])
        client.zadd(f"{prefix}enqueued", {job_id: enqueued_at})
        client.zadd(f"{prefix}status:{fields['status']}", {job_id: enqueued_at})
        if "finished_at" in fields:
            client.zadd(f"{prefix}finished", {job_id: int(fields["finished_at"])})
        client.hdel(key, "history")


def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def varied(store: RedisJobStore) -> None:
    """Jobs in every status, of two names, two tenants and none."""
    for n in range(12):
        store.add(job_of(n), dispatched=False)
    claimed = store.claim_due(["billing", "audit"], now=at(100), lease_ms=LEASE_MS, limit=5)
    store.complete(claimed[0].lease, now=at(200))
    fail = claimed[1].lease
    store.fail(fail, now=at(200), error_code="E", error_type="E", retry_at=None)  # dead
    store.fail(claimed[2].lease, now=at(200), error_code="E", error_type="E", retry_at=at(900))
    store.cancel(job_of(11).id, tenant_id=None, now=at(300))
    store.cancel(job_of(10).id, tenant_id=None, now=at(300))


def listing(store: RedisJobStore) -> list[tuple[str, JobStatus]]:
    page = store.list_page(JobFilter(), now=at(500), limit=100)
    return [(job.id, job.status) for job in page.jobs]


def plain(stats: JobStats) -> tuple[dict[str, dict[JobStatus, int]], ...]:
    return (
        {queue: dict(counts) for queue, counts in stats.counts.items()},
        {name: dict(counts) for name, counts in stats.by_name.items()},
    )


def test_reindex_adopts_every_job_of_the_earlier_layout_once(
    redis_client: Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = RedisJobStore(redis_client, prefix=prefix)
    varied(store)
    listed, stats = listing(store), plain(store.stats())
    as_earlier_layout(redis_client, prefix)
    assert listing(store) == []  # the earlier layout has no listing index
    assert plain(store.stats()) == (stats[0], {})
    monkeypatch.setattr(redis_job_store, "REINDEX_BATCH", 5)

    assert store.reindex() == 12

    assert listing(store) == listed
    assert plain(store.stats()) == stats
    names = {key.decode()[len(prefix) :] for key in redis_client.scan_iter(match=f"{prefix}*")}
    assert names.isdisjoint({"enqueued", "finished", *(f"status:{s}" for s in JobStatus)})
    assert store.reindex() == 0
    assert plain(store.stats()) == stats
    tenant = store.list_page(JobFilter(tenant_id="clinic-rare"), now=at(500))
    assert [job.id for job in tenant.jobs] == [job_of(2).id]
    assert store.purge_finished(before=at(1_000)) == 4  # succeeded, dead, two cancelled
    assert [job_id for job_id, _ in listing(store)] == [
        job_of(n).id for n in range(9, -1, -1) if n not in (0, 1)
    ]


def test_a_job_of_the_earlier_layout_is_adopted_by_the_script_that_moves_it(
    redis_client: Redis, prefix: str
) -> None:
    store = RedisJobStore(redis_client, prefix=prefix)
    varied(store)
    as_earlier_layout(redis_client, prefix)
    queued = job_of(8).id

    claimed = store.claim_job(queued, now=at(400), lease_ms=LEASE_MS, worker="celery@w1")

    assert claimed is not None
    assert [(a.number, a.worker) for a in claimed.job.history] == [(1, "celery@w1")]
    assert listing(store) == [(queued, JobStatus.RUNNING)]
    assert store.stats().by_name == {"billing.common": {JobStatus.RUNNING: 1}}
    store.complete(claimed.lease, now=at(450))
    assert store.reindex() == 11
    by_name = store.stats().by_name
    assert sum(sum(counts.values()) for counts in by_name.values()) == 12
    assert by_name["billing.common"][JobStatus.SUCCEEDED] == 2
    assert len(listing(store)) == 12
