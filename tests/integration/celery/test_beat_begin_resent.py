"""Beat's begin and a worker's end of run, sent twice by redis-py, lose no occurrence [issue 18,
item 1].

With ``connect()``'s defaults (1 s socket timeout, one retry), a script whose reply the suite's
fault proxy holds back 1.5 s is sent again by redis-py on a new connection. A begin's first run
took the locks and made the claims; the second must find them its own (the tokens are the
same), not another beat's: else the occurrence is recorded ``skipped-locked`` and never sent.
An end's first run promoted the occurrence queued behind; the second must answer it again, or
the worker never sends it and it holds the job busy unsent.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from fault_proxy import FaultProxy
from redis import Redis
from services import REDIS_URL
from test_beat import START, Instance, declared, run_until, scheduled

from ddd_celery.kernel.clock import FixedClock
from ddd_celery.redis import RedisJobCheckpoints, RedisJobRunState, RedisLock, connect
from ddd_celery.redis.occurrence_store import RedisOccurrenceStore
from ddd_celery.scheduling.occurrence import lock_key
from ddd_celery.scheduling.occurrence_store import Beginning
from ddd_celery.scheduling.run_state import Claim

pytestmark = pytest.mark.redis

LATE_S = 1.5
"""Longer than the client's 1 s socket timeout: redis-py gives up and sends it again."""


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    with FaultProxy.to_url(REDIS_URL) as running:
        yield running


@pytest.fixture
def late_client(proxy: FaultProxy) -> Iterator[Redis]:
    client = connect(proxy.url(REDIS_URL))  # the defaults: 1 s timeout, one retry
    yield client
    client.close()


def stores(client: Redis, prefix: str) -> tuple[RedisLock, RedisJobRunState, RedisJobCheckpoints]:
    clock = FixedClock(START)
    return (
        RedisLock(client, prefix=prefix, clock=clock),
        RedisJobRunState(client, prefix=f"{prefix}run:"),
        RedisJobCheckpoints(client, prefix=f"{prefix}checkpoint:"),
    )


def test_a_begin_whose_reply_is_late_is_sent_again_and_answers_as_the_first_did(
    proxy: FaultProxy, late_client: Redis, redis_prefix: str
) -> None:
    lock, run_state, checkpoints = stores(late_client, redis_prefix)
    store = run_state.occurrence_store(lock, checkpoints, None)
    assert isinstance(store, RedisOccurrenceStore)
    run_state.claim("billing.queued", START, queue=False, ttl_ms=60_000)
    store.begin([Beginning("billing.warm-up", START, None, 60_000, False, False, 60_000)])
    at = START + timedelta(minutes=1)  # Redis has the script: each send runs it

    def begun(job: str, *, locked: bool = True, queue: bool = False) -> Beginning:
        return Beginning(
            job, at, lock_key(job, at) if locked else None, 60_000, True, queue, 60_000
        )

    batch = [begun("billing.locked"), begun("billing.unlocked", locked=False)]
    batch.append(begun("billing.queued", queue=True))
    connections = proxy.connections
    proxy.delay_replies(LATE_S, matching=b"EVALSHA", count=1)

    store.begin(batch)

    assert (proxy.delayed, proxy.connections) == (1, connections + 1), "sent again, once"
    assert [(b.error, b.lock_held, b.claimed) for b in batch] == [
        (None, False, Claim.STARTED),
        (None, False, Claim.STARTED),
        (None, False, Claim.QUEUED),
    ]
    assert run_state.running("billing.locked") == at
    assert run_state.running("billing.unlocked") == at
    assert run_state.finish("billing.queued", START, ttl_ms=60_000) == at
    locked = batch[0].lease
    assert locked is not None
    assert lock.release(locked) is True, "the lock holds the first send's token"


def test_beat_sends_the_occurrence_whose_begin_was_sent_twice(
    proxy: FaultProxy, late_client: Redis, redis_prefix: str
) -> None:
    lock, run_state, checkpoints = stores(late_client, redis_prefix)
    clock = FixedClock(START)
    instance = Instance(
        clock,
        [declared("billing.every-minute", every="1m")],
        lock,
        checkpoints=checkpoints,
        run_state=run_state,
    )
    beat = instance.beat()
    run_until(clock, START + timedelta(seconds=40), beat)  # on time for 09:59: scripts loaded
    proxy.delay_replies(LATE_S, matching=b"EVALSHA", count=1)

    run_until(clock, START + timedelta(seconds=100), beat)

    assert proxy.delayed == 1
    assert scheduled(instance.sent) == ["2026-03-02T09:59:00.000Z", "2026-03-02T10:00:00.000Z"]
    assert instance.outcomes() == [], "none skipped-locked nor failed: the worker records runs"


def test_an_end_of_run_whose_reply_is_late_still_answers_the_occurrence_it_promoted(
    proxy: FaultProxy, late_client: Redis, redis_prefix: str
) -> None:
    lock, run_state, checkpoints = stores(late_client, redis_prefix)
    store = run_state.occurrence_store(lock, checkpoints, None)
    assert store is not None
    later = START + timedelta(minutes=1)
    assert run_state.claim("billing.queued", START, queue=True, ttl_ms=60_000) is Claim.STARTED
    assert run_state.claim("billing.queued", later, queue=True, ttl_ms=60_000) is Claim.QUEUED
    assert run_state.claim("billing.plain", START, queue=True, ttl_ms=60_000) is Claim.STARTED
    store.end("billing.warm-up", START, ttl_ms=60_000, last_run=None)  # Redis has the scripts
    run_state.finish("billing.warm-up", START, ttl_ms=60_000)
    connections = proxy.connections

    proxy.delay_replies(LATE_S, matching=b"EVALSHA", count=1)
    ended = store.end("billing.queued", START, ttl_ms=60_000, last_run=None)
    proxy.delay_replies(LATE_S, matching=b"EVALSHA", count=1)
    finished = run_state.finish("billing.plain", START, ttl_ms=60_000)

    assert proxy.delayed == 2
    assert proxy.connections >= connections + 2, "each sent again on a new connection"
    assert (ended.promoted, ended.finish_error) == (later, None)
    assert run_state.running("billing.queued") == later
    assert finished is None
    assert run_state.running("billing.plain") is None
