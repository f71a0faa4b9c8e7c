"""Issues 18.6 and 19.4: what some store cannot keep is refused at enqueue, alike on every store.

``StoredJobQueue`` checks before any store is asked, so each refusal is the same
``InvalidEnqueueError`` on the in-memory store, Redis (REDIS_URL), PostgreSQL (DATABASE_URL) and
a SQLite file, naming the job, the field and the size, never the content; and what is just within
each limit is kept and read back whole by every one of them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from services import REDIS_URL
from sqlalchemy import Engine, delete

from ddd_celery.background import InMemoryJobStore, InvalidEnqueueError, StoredJobQueue
from ddd_celery.background.payloads import DEFAULT_MAX_PAYLOAD_BYTES, MAX_NESTING
from ddd_celery.background.queue import MAX_IDEMPOTENCY_KEY_BYTES, MAX_TENANT_ID_BYTES
from ddd_celery.background.store import JobStore
from ddd_celery.kernel import FixedClock, FixedExecutionScope, SequentialIdGenerator
from ddd_celery.redis import RedisJobStore, connect
from ddd_celery.sql import SqlJobStore, create_tables, drop_tables, sqlite_engine
from tests.unit.background.conftest import START, work
from tests.unit.background.jobs import SendReceiptJob

RECEIPT = "ledger.send-receipt"
STORES = [
    "memory",
    pytest.param("redis", marks=pytest.mark.redis),
    pytest.param("postgresql", marks=pytest.mark.postgres),
    "sqlite",
]
SECRET = "4111-1111-1111-1111"


@pytest.fixture(scope="module")
def postgresql(engine: Engine) -> Iterator[tuple[Engine, str]]:
    """The suite's engine (tests/conftest.py) and the tables of this module's own prefix."""
    prefix = f"test_{uuid.uuid4().hex[:12]}_"
    create_tables(engine, prefix)
    yield engine, prefix
    drop_tables(engine, prefix)


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[JobStore]:
    if request.param == "memory":
        yield InMemoryJobStore()
    elif request.param == "redis":
        client = connect(REDIS_URL)
        prefix = f"test:limits:{uuid.uuid4().hex}:"
        yield RedisJobStore(client, prefix=prefix)
        for key in client.scan_iter(match=f"{prefix}*"):
            client.delete(key)
        client.close()
    elif request.param == "sqlite":
        engine = sqlite_engine(tmp_path / "jobs.sqlite3")
        yield SqlJobStore(engine)
        engine.dispose()
    else:
        engine, prefix = request.getfixturevalue("postgresql")
        yield SqlJobStore(engine, prefix=prefix)
        with engine.begin() as connection:
            connection.execute(delete(create_tables(engine, prefix).jobs))


def queue_on(
    store: JobStore, scope: FixedExecutionScope | None = None, **options: Any
) -> StoredJobQueue:
    return StoredJobQueue(
        store=store,
        clock=FixedClock(START),
        ids=SequentialIdGenerator("job-"),
        scope=scope or FixedExecutionScope(),
        **options,
    )


def nested(levels: int) -> Any:
    """``levels`` lists, each within the one before: ``[[...[]...]]``."""
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return value


def refused(
    store: JobStore,
    payload: Any = None,
    *,
    tenant: str | None = None,
    key: str | None = None,
    **options: Any,
) -> InvalidEnqueueError:
    scope = FixedExecutionScope()
    jobs = queue_on(store, scope, **options)
    kept = store.list_jobs()
    with scope.open(work(tenant=tenant)), pytest.raises(InvalidEnqueueError) as raised:
        jobs.enqueue(SendReceiptJob, {} if payload is None else payload, idempotency_key=key)
    assert store.list_jobs() == kept, "a store was asked"
    assert raised.value.job == RECEIPT
    assert RECEIPT in str(raised.value)
    return raised.value


def test_a_payload_larger_than_max_payload_bytes_is_refused_naming_its_size(
    store: JobStore,
) -> None:
    error = refused(store, {"card": SECRET, "text": "x" * 1_000}, max_payload_bytes=1_000)

    assert error.field == "payload"
    assert "the payload is 1040 bytes of JSON, more than max_payload_bytes (1000)" in str(error)
    assert SECRET not in str(error)
    assert "xxx" not in str(error)


def test_the_default_limit_is_one_mebibyte_of_json(store: JobStore) -> None:
    at_the_limit = {"blob": "s" * (DEFAULT_MAX_PAYLOAD_BYTES - len('{"blob":""}'))}

    job_id = queue_on(store).enqueue(SendReceiptJob, at_the_limit)
    error = refused(store, {"blob": at_the_limit["blob"] + "s"})

    found = store.find(job_id, tenant_id=None)
    assert found is not None
    assert found.payload == at_the_limit
    assert DEFAULT_MAX_PAYLOAD_BYTES == 1_048_576
    assert "1048577 bytes of JSON, more than max_payload_bytes (1048576)" in str(error)


@pytest.mark.parametrize(
    ("payload", "field", "problem"),
    [
        ({"card": f"{SECRET}\x00"}, "payload.<key>", "holds a NUL character"),
        ({"lines": [1, {"card": f"\x00{SECRET}"}]}, "payload.<key>[1].<key>", "NUL"),
        ({f"{SECRET}\x00": 1}, "payload (a key)", "holds a NUL character"),
        ({"deep": nested(MAX_NESTING)}, "payload.<key>" + "[0]" * 99, "nested deeper than 100"),
        (nested(1_500), "payload" + "[0]" * 100, "nested deeper than 100 levels"),
        ({SECRET: float("nan")}, "payload.<key>", "cannot be carried as JSON"),
        ({"n": 10**5_000}, "payload", "an int too long to be written as JSON"),
    ],
)
def test_a_payload_no_store_can_keep_is_refused_naming_the_part_not_its_keys(
    store: JobStore, payload: Any, field: str, problem: str
) -> None:
    error = refused(store, payload)

    assert error.field == field
    assert problem in str(error)
    assert SECRET not in str(error)


@pytest.mark.parametrize(
    ("tenant", "key", "field", "problem"),
    [
        (f"clinic\x00{SECRET}", None, "tenant_id", "holds a NUL character"),
        ("clinic-7", f"receipt\x00{SECRET}", "idempotency_key", "holds a NUL character"),
        ("clinic-7", f"{SECRET}\ud800", "idempotency_key", "lone surrogate"),
        ("é" * 129, None, "tenant_id", "258 bytes (UTF-8), more than 256"),
        ("clinic-7", "é" * 257, "idempotency_key", "514 bytes (UTF-8), more than 512"),
        ("", None, "tenant_id", "never the empty text"),
    ],
)
def test_a_tenant_id_or_an_idempotency_key_no_store_can_keep_is_refused(
    store: JobStore, tenant: str, key: str | None, field: str, problem: str
) -> None:
    error = refused(store, {"card": SECRET}, tenant=tenant, key=key)

    assert error.field == field
    assert problem in str(error)
    assert SECRET not in str(error)


def test_what_is_just_within_each_limit_is_kept_and_read_back_whole(store: JobStore) -> None:
    scope = FixedExecutionScope()
    jobs = queue_on(store, scope, max_payload_bytes=2_000)
    tenant = "t" * MAX_TENANT_ID_BYTES
    key = "é" * (MAX_IDEMPOTENCY_KEY_BYTES // 2)
    payload = {"deep": nested(MAX_NESTING - 1), "text": "é\u2028\x01 'quoted' \"too\""}

    with scope.open(work(tenant=tenant)):
        job_id = jobs.enqueue(SendReceiptJob, payload, idempotency_key=key)
        again = jobs.enqueue(SendReceiptJob, payload, idempotency_key=key)

    found = store.find(job_id, tenant_id=tenant)
    assert found is not None
    assert again == job_id
    assert (found.payload, found.idempotency_key, found.tenant_id) == (payload, key, tenant)
