"""RedisJobStore on the real Redis: its key layout, round trips, races and outages.

The JobStore contract runs on it with every other adapter's (tests/contracts).
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from ddd_celery.background.store import (
    EnqueuedBy,
    JobFilter,
    JobLease,
    JobStatus,
    LostLeaseError,
    NewJob,
    dropped_of,
)
from ddd_celery.redis import RedisJobStore, StoreUnavailableError, connect
from ddd_celery.redis.job_store import PURGE_BATCH

pytestmark = pytest.mark.redis

T0 = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
T0_MS = 1_772_431_200_000
LEASE_MS = 30_000


def at(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def new_job(
    job_id: str,
    *,
    queue: str = "billing",
    run_at: datetime = T0,
    tenant_id: str | None = None,
    key: str | None = None,
    max_attempts: int = 3,
) -> NewJob:
    return NewJob(
        id=job_id,
        name=f"{queue}.compile-statements",
        queue=queue,
        payload={"month": "2026-10"},
        enqueued_at=T0,
        run_at=run_at,
        max_attempts=max_attempts,
        enqueued_by=EnqueuedBy("corr-1", "user:42", tenant_id, None),
        idempotency_key=key,
    )


def keys_of(client: Redis, prefix: str) -> set[str]:
    return {key.decode()[len(prefix) :] for key in client.scan_iter(match=f"{prefix}*")}


def members(client: Redis, key: str) -> list[tuple[str, int]]:
    return [(m.decode(), int(s)) for m, s in client.zrange(key, 0, -1, withscores=True)]


def history_of(client: Redis, key: str) -> list[dict[str, object]]:
    """The ``history`` field of a job's hash, as JSON (``begin_attempt`` in ``job_lib.lua``)."""
    history: list[dict[str, object]] = json.loads(client.hget(key, "history") or b"[]")
    return history


def test_a_job_is_a_hash_with_instants_in_epoch_ms_and_json_values(
    redis_client: Redis, prefix: str
) -> None:
    store = RedisJobStore(redis_client, prefix=prefix)
    store.add(new_job("j1", tenant_id="clinic-7", key="2026-10"), dispatched=False)

    assert redis_client.hgetall(f"{prefix}job:j1") == {
        b"id": b"j1",
        b"name": b"billing.compile-statements",
        b"queue": b"billing",
        b"status": b"queued",
        b"payload": b'{"month":"2026-10"}',
        b"enqueued_at": str(T0_MS).encode(),
        b"run_at": str(T0_MS).encode(),
        b"attempts": b"0",
        b"max_attempts": b"3",
        b"enqueued_by": json.dumps(
            {
                "correlation_id": "corr-1",
                "actor": "user:42",
                "tenant_id": "clinic-7",
                "traceparent": None,
            },
            separators=(",", ":"),
        ).encode(),
        b"tenant": b"clinic-7",
        b"idempotency_key": b"2026-10",
    }
    assert redis_client.get(f"{prefix}key:8:clinic-7:2026-10") == b"j1"
    assert redis_client.ttl(f"{prefix}job:j1") == -1


def test_each_status_lives_in_the_indexes_the_layout_documents(
    redis_client: Redis, prefix: str
) -> None:
    store = RedisJobStore(redis_client, prefix=prefix)
    store.add(new_job("later", run_at=at(60_000)), dispatched=False)
    store.add(new_job("now", tenant_id="clinic-7"), dispatched=True)
    assert keys_of(redis_client, prefix) == {
        "job:later",
        "job:now",
        "pending",
        "dispatched",
        "queue:billing",
        "list:all",
        "list:status:queued",
        "list:name:billing.compile-statements",
        "list:tenant:clinic-7",
        "stats",
        "stats:name",
    }
    # ms since 0001-01-01, in 15 digits: lexical order is (enqueued_at, id) order
    since_year_1 = f"{T0_MS + 62_135_596_800_000:015d}"
    assert members(redis_client, f"{prefix}list:all") == [
        (f"{since_year_1}:later", 0),
        (f"{since_year_1}:now", 0),
    ]
    assert members(redis_client, f"{prefix}list:tenant:clinic-7") == [(f"{since_year_1}:now", 0)]
    assert members(redis_client, f"{prefix}pending") == [("later", T0_MS + 60_000)]
    assert members(redis_client, f"{prefix}dispatched") == [("now", T0_MS)]
    assert members(redis_client, f"{prefix}queue:billing") == [
        ("now", T0_MS),
        ("later", T0_MS + 60_000),
    ]

    claimed = store.claim_job("now", now=at(1_000), lease_ms=LEASE_MS, worker="celery@w1")
    assert claimed is not None
    assert members(redis_client, f"{prefix}leases") == [("now", T0_MS + 31_000)]
    assert members(redis_client, f"{prefix}dispatched") == []
    assert redis_client.hget(f"{prefix}job:now", "lease_token") == claimed.lease.token.encode()
    attempt = {"number": 1, "started_at": str(T0_MS + 1_000), "worker": "celery@w1"}
    assert history_of(redis_client, f"{prefix}job:now") == [{**attempt, "outcome": "running"}]

    store.complete(claimed.lease, now=at(2_000))
    assert history_of(redis_client, f"{prefix}job:now") == [
        {**attempt, "outcome": "succeeded", "ended_at": str(T0_MS + 2_000)}
    ]
    assert members(redis_client, f"{prefix}finished:succeeded") == [("now", T0_MS + 2_000)]
    assert redis_client.exists(f"{prefix}leases") == 0
    assert members(redis_client, f"{prefix}list:status:succeeded") == [(f"{since_year_1}:now", 0)]
    assert members(redis_client, f"{prefix}list:status:queued") == [(f"{since_year_1}:later", 0)]
    assert redis_client.hgetall(f"{prefix}stats") == {
        b"billing|queued": b"1",
        b"billing|succeeded": b"1",
    }
    assert redis_client.hgetall(f"{prefix}stats:name") == {
        b"billing.compile-statements|queued": b"1",
        b"billing.compile-statements|succeeded": b"1",
    }

    assert store.purge_finished(before=at(3_000)) == 1
    left = {key for key in keys_of(redis_client, prefix) if not key.startswith("purged:")}
    assert left == {
        "job:later",
        "pending",
        "queue:billing",
        "list:all",
        "list:status:queued",
        "list:name:billing.compile-statements",
        "stats",
        "stats:name",
    }
    assert members(redis_client, f"{prefix}list:all") == [(f"{since_year_1}:later", 0)]


def test_every_operation_is_one_round_trip(
    recorded: tuple[Redis, list[tuple[str, ...]]], prefix: str
) -> None:
    client, commands = recorded
    store = RedisJobStore(client, prefix=prefix)
    trips: dict[str, list[str]] = {}

    @contextmanager
    def trip(name: str) -> Iterator[None]:
        commands.clear()
        yield
        trips[name] = [command[0] for command in commands]

    for n in range(2):  # the first pass lets Redis learn the scripts
        with trip("add"):
            store.add(new_job(f"j{n}", key=f"k{n}"), dispatched=False)
        with trip("claim_job"):
            claimed = store.claim_job(f"j{n}", now=T0, lease_ms=LEASE_MS)
        assert claimed is not None
        with trip("heartbeat"):
            lease = store.heartbeat(claimed.lease, now=T0, lease_ms=LEASE_MS)
        with trip("update"):
            store.update(lease, progress=1, set_progress=True)
        with trip("release"):
            store.release(lease, now=T0)
        with trip("claim_due"):
            [again] = store.claim_due(["billing"], now=T0, lease_ms=LEASE_MS, limit=1)
        with trip("complete"):
            store.complete(again.lease, now=T0)
        store.add(new_job(f"d{n}"), dispatched=True)
        [dead] = store.claim_due(["billing"], now=T0, lease_ms=LEASE_MS, limit=1)
        with trip("fail"):
            store.fail(dead.lease, now=T0, error_code="E", error_type="E", retry_at=None)
        with trip("retry_dead"):
            store.retry_dead(f"d{n}", tenant_id=None, now=T0)
        with trip("cancel"):
            store.cancel(f"d{n}", tenant_id=None, now=T0)
        with trip("find"):
            store.find(f"j{n}", tenant_id=None)
        with trip("list_jobs"):
            store.list_jobs(status=JobStatus.SUCCEEDED)
        with trip("list_page"):
            store.list_page(JobFilter(name="billing.compile-statements"), now=T0, limit=1)
        with trip("stats"):
            store.stats()
        with trip("take_due"):
            store.take_due(now=T0, limit=100, redispatch_after_ms=1)
        with trip("expire_leases"):
            store.expire_leases(now=T0, limit=100)
        with trip("purge_finished"):
            store.purge_finished(before=at(1))
        with trip("reindex"):
            store.reindex()

    assert len(trips) == 18
    assert trips == {name: ["HGETALL"] if name == "find" else ["EVALSHA"] for name in trips}


def test_the_relay_takes_a_thousand_due_jobs_in_one_script_call_earliest_first(
    recorded: tuple[Redis, list[tuple[str, ...]]], prefix: str
) -> None:
    client, commands = recorded
    store = RedisJobStore(client, prefix=prefix)
    for n in range(1_000):
        store.add(new_job(f"job-{n:04d}", run_at=at(999 - n)), dispatched=False)
    store.add(new_job("not-due", run_at=at(5_000)), dispatched=False)
    commands.clear()

    taken = store.take_due(now=at(1_000), limit=1_000, redispatch_after_ms=60_000)

    assert [command[0] for command in commands] == ["EVALSHA"]
    assert [dispatch.job_id for dispatch in taken] == [f"job-{n:04d}" for n in range(999, -1, -1)]
    assert store.take_due(now=at(1_000), limit=1_000, redispatch_after_ms=60_000) == []
    assert client.zcard(f"{prefix}dispatched") == 1_000


def test_a_purge_deletes_in_batches_so_redis_is_never_held_long(
    recorded: tuple[Redis, list[tuple[str, ...]]], prefix: str
) -> None:
    client, commands = recorded
    store = RedisJobStore(client, prefix=prefix)
    count = PURGE_BATCH * 2 + 1
    for n in range(count):
        store.add(new_job(f"job-{n}", key=f"key-{n}"), dispatched=False)
        store.cancel(f"job-{n}", tenant_id=None, now=T0)
    commands.clear()

    assert store.purge_finished(before=at(1)) == count

    assert [command[0] for command in commands] == ["EVALSHA"] * 3
    # each batch's reply, kept a minute by its token for that batch sent again
    assert {key.partition(":")[0] for key in keys_of(client, prefix)} == {"purged"}


def test_concurrent_claims_from_two_connections_take_each_job_once(
    redis_url: str, redis_client: Redis, prefix: str
) -> None:
    store = RedisJobStore(redis_client, prefix=prefix)
    for n in range(300):
        store.add(new_job(f"job-{n}"), dispatched=True)
    claimed: Counter[str] = Counter()
    mutex = threading.Lock()

    def worker(by_id: bool) -> None:
        client = connect(redis_url)
        own = RedisJobStore(client, prefix=prefix)
        for n in range(300):
            if by_id:
                one = own.claim_job(f"job-{n}", now=T0, lease_ms=LEASE_MS)
                got = [] if one is None else [one]
            else:
                got = own.claim_due(["billing"], now=T0, lease_ms=LEASE_MS, limit=1)
            with mutex:
                claimed.update(c.job.id for c in got)
        client.close()

    threads = [threading.Thread(target=worker, args=(n % 2 == 0,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(claimed) == 300
    assert set(claimed.values()) == {1}
    assert store.stats().counts == {"billing": {JobStatus.RUNNING: 300}}


def test_a_tenant_named_like_the_wildcard_reaches_only_its_own_jobs(
    redis_client: Redis, prefix: str
) -> None:
    store = RedisJobStore(redis_client, prefix=prefix)
    store.add(new_job("theirs", tenant_id="clinic-7"), dispatched=False)
    store.add(new_job("mine", tenant_id="*"), dispatched=False)

    assert store.find("theirs", tenant_id="*") is None
    assert store.cancel("theirs", tenant_id="*", now=T0) is False
    assert [job.id for job in store.list_jobs(tenant_id="*")] == ["mine"]


def test_an_add_keeps_any_text_as_given_through_its_json_argument(
    redis_client: Redis, prefix: str
) -> None:
    """The add's fields travel as one JSON array, decoded by the script: names, tenants and
    keys with quotes, non-ASCII and control characters come back byte for byte, and an empty
    idempotency key is a key like any other, not the absence of one."""
    store = RedisJobStore(redis_client, prefix=prefix)
    odd = 'cl\u00efnic "7"\\\x1f\u65e5'
    job = NewJob(
        id=f"j-{odd}",
        name=f"billing.{odd}",
        queue=f"q-{odd}",
        payload={odd: [odd, 1.5, None]},
        enqueued_at=T0,
        run_at=T0,
        max_attempts=2,
        enqueued_by=EnqueuedBy(odd, odd, odd, None),
        idempotency_key="",
    )

    assert store.add(job, dispatched=False) == job.id
    assert store.add(replace(job, id="j2"), dispatched=False) == job.id

    found = store.find(job.id, tenant_id=odd)
    assert found is not None
    assert (found.name, found.queue, found.payload) == (job.name, job.queue, job.payload)
    assert (found.enqueued_by, found.idempotency_key) == (job.enqueued_by, "")
    scoped = f"{len(odd.encode())}:{odd}:"
    assert redis_client.get(f"{prefix}key:{scoped}".encode()) == job.id.encode()
    assert members(redis_client, f"{prefix}queue:{job.queue}") == [(job.id, T0_MS)]
    assert store.find("j2", tenant_id=None) is None


def test_a_client_that_decodes_responses_reads_the_same_jobs(redis_url: str, prefix: str) -> None:
    client = Redis.from_url(redis_url, decode_responses=True)
    store = RedisJobStore(client, prefix=prefix)

    assert store.add(new_job("j1", key="k"), dispatched=False) == "j1"
    assert store.add(new_job("j2", key="k"), dispatched=False) == "j1"
    [claimed] = store.claim_due(["billing"], now=T0, lease_ms=LEASE_MS, limit=5)
    store.fail(claimed.lease, now=T0, error_code="E", error_type="Boom", retry_at=None)
    found = store.find("j1", tenant_id=None)
    assert found is not None
    assert (found.status, found.payload, found.last_error_type) == (
        JobStatus.DEAD,
        {"month": "2026-10"},
        "Boom",
    )
    assert store.stats().counts == {"billing": {JobStatus.DEAD: 1}}
    client.close()


def test_the_scripts_are_loaded_again_after_redis_forgets_them(
    redis_client: Redis, prefix: str
) -> None:
    store = RedisJobStore(redis_client, prefix=prefix)
    store.add(new_job("j1"), dispatched=False)
    redis_client.script_flush()

    claimed = store.claim_job("j1", now=T0, lease_ms=LEASE_MS)

    assert claimed is not None
    assert claimed.lease.attempt == 1
    redis_client.script_flush()
    store.complete(claimed.lease, now=T0)
    with pytest.raises(LostLeaseError, match="'j1'"):
        store.fail(claimed.lease, now=T0, error_code="E", error_type="Boom", retry_at=None)


def test_a_lease_is_a_random_token_per_claim(redis_client: Redis, prefix: str) -> None:
    store = RedisJobStore(redis_client, prefix=prefix)
    store.add(new_job("j1"), dispatched=False)
    first = store.claim_job("j1", now=T0, lease_ms=LEASE_MS)
    assert first is not None
    store.release(first.lease, now=T0)
    second = store.claim_job("j1", now=T0, lease_ms=LEASE_MS)
    assert second is not None

    assert (first.lease.attempt, second.lease.attempt) == (1, 1)
    assert first.lease.token != second.lease.token
    assert len(first.lease.token) == 32
    with pytest.raises(LostLeaseError):
        store.heartbeat(first.lease, now=T0, lease_ms=LEASE_MS)


OPERATIONS = {
    "add the job",
    "claim the job",
    "claim the due jobs",
    "extend the lease",
    "update the job",
    "complete the job",
    "fail the job",
    "release the job",
    "cancel the job",
    "find the job",
    "retry the dead job",
    "list the jobs",
    "purge the finished jobs",
    "count the jobs",
    "take the due jobs",
    "expire the leases",
    "read the time of Redis",
}


def operations_of(store: RedisJobStore) -> dict[str, Callable[[], object]]:
    lease = JobLease("j1", 1, "token", T0)
    return {
        "add the job": lambda: store.add(new_job("j1"), dispatched=False),
        "claim the job": lambda: store.claim_job("j1", now=T0, lease_ms=LEASE_MS),
        "claim the due jobs": lambda: store.claim_due(
            ["billing"], now=T0, lease_ms=LEASE_MS, limit=1
        ),
        "extend the lease": lambda: store.heartbeat(lease, now=T0, lease_ms=LEASE_MS),
        "update the job": lambda: store.update(lease, progress=1, set_progress=True),
        "complete the job": lambda: store.complete(lease, now=T0),
        "fail the job": lambda: store.fail(
            lease, now=T0, error_code="E", error_type="E", retry_at=None
        ),
        "release the job": lambda: store.release(lease, now=T0),
        "cancel the job": lambda: store.cancel("j1", tenant_id=None, now=T0),
        "find the job": lambda: store.find("j1", tenant_id=None),
        "retry the dead job": lambda: store.retry_dead("j1", tenant_id=None, now=T0),
        "list the jobs": store.list_jobs,
        "purge the finished jobs": lambda: store.purge_finished(before=T0),
        "count the jobs": store.stats,
        "take the due jobs": lambda: store.take_due(now=T0, limit=1, redispatch_after_ms=1),
        "expire the leases": lambda: store.expire_leases(now=T0, limit=1),
        "read the time of Redis": store.store_time,
    }


@pytest.mark.parametrize("action", sorted(OPERATIONS))
def test_an_unreachable_redis_makes_every_operation_unavailable(
    closed_port_url: str, action: str
) -> None:
    store = RedisJobStore(connect(closed_port_url))
    operations = operations_of(store)
    assert set(operations) == OPERATIONS

    with pytest.raises(StoreUnavailableError, match=action) as raised:
        operations[action]()

    assert isinstance(raised.value.__cause__, RedisConnectionError)


def test_the_store_time_is_the_time_of_redis(redis_client: Redis, prefix: str) -> None:
    store = RedisJobStore(redis_client, prefix=prefix)

    def redis_time() -> datetime:
        seconds, microseconds = redis_client.time()
        return datetime.fromtimestamp(seconds, UTC) + timedelta(microseconds=microseconds)

    before = redis_time()
    now = store.store_time()
    after = redis_time()

    assert now.tzinfo is UTC
    assert before <= now <= after


def test_index_entries_of_a_vanished_job_hash_are_dropped_and_counted_not_a_failed_pass(
    redis_client: Redis, prefix: str
) -> None:
    """A job hash gone while its indexes still name it (evicted under ``maxmemory``, deleted by
    hand): the relay's queries skip it, drop the entries and count them; the rest goes on."""
    store = RedisJobStore(redis_client, prefix=prefix)
    store.add(new_job("gone-pending", run_at=at(1_000)), dispatched=False)
    store.add(new_job("gone-dispatched"), dispatched=True)
    store.add(new_job("gone-running"), dispatched=True)
    store.add(new_job("alive-pending", run_at=at(1_000)), dispatched=False)
    store.add(new_job("alive-running"), dispatched=True)
    for job_id in ("gone-running", "alive-running"):
        assert store.claim_job(job_id, now=T0, lease_ms=LEASE_MS) is not None
    for job_id in ("gone-pending", "gone-dispatched", "gone-running"):
        redis_client.delete(f"{prefix}job:{job_id}")
    later = at(LEASE_MS + 60_000)

    expired = store.expire_leases(now=later, limit=10)
    due = store.take_due(now=later, limit=10, redispatch_after_ms=1_000)

    assert [job.id for job in expired] == ["alive-running"]
    assert dropped_of(expired) == 1
    assert sorted(d.job_id for d in due) == ["alive-pending", "alive-running"]
    assert dropped_of(due) == 2
    for index in ("pending", "dispatched", "leases"):
        assert not [m for m, _ in members(redis_client, prefix + index) if m.startswith("gone")]
    again = store.take_due(now=later + timedelta(days=1), limit=10, redispatch_after_ms=1_000)
    assert dropped_of(again) == 0
    assert dropped_of(store.expire_leases(now=later, limit=10)) == 0


def test_a_poller_skips_a_queue_entry_whose_job_hash_vanished(
    redis_client: Redis, prefix: str
) -> None:
    store = RedisJobStore(redis_client, prefix=prefix)
    store.add(new_job("gone"), dispatched=True)
    store.add(new_job("alive", run_at=at(1)), dispatched=True)
    redis_client.delete(f"{prefix}job:gone")

    claimed = store.claim_due(["billing"], now=at(10), lease_ms=LEASE_MS, limit=1)

    assert [c.job.id for c in claimed] == ["alive"]
    assert dropped_of(claimed) == 1
    assert members(redis_client, f"{prefix}queue:billing") == []


def test_a_repeated_poll_is_remembered_for_its_lease_only(redis_client: Redis, prefix: str) -> None:
    store = RedisJobStore(redis_client, prefix=prefix)
    store.add(new_job("j1"), dispatched=True)

    store.claim_due(["billing"], now=T0, lease_ms=LEASE_MS, limit=1, token="poll-1")
    store.take_due(now=at(LEASE_MS), limit=1, redispatch_after_ms=1, token="pass-1")

    assert 0 < redis_client.pttl(f"{prefix}claimed:poll-1") <= LEASE_MS
    assert redis_client.exists(f"{prefix}taken:pass-1") == 0  # nothing taken, nothing kept
