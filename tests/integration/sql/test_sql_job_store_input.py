"""Input the SQL job store cannot keep, on the real PostgreSQL and on SQLite: it is refused as
what it is (``InvalidEnqueueError`` naming the job and the field, never an outage), and no
error, no cause chained to it and no log record quotes a value, whatever the engine.

The payload carries a fake card number: it must appear nowhere.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fault_proxy import FaultProxy
from services import DATABASE_URL
from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import sessionmaker

from ddd_celery.background.errors import InvalidEnqueueError
from ddd_celery.background.store import EnqueuedBy, JobLease, LostLeaseError, NewJob
from ddd_celery.sql import (
    SqlAlchemyUnitOfWork,
    SqlJobStore,
    StoreUnavailableError,
    create_tables,
    drop_tables,
    sqlite_engine,
)

NOW = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)
CARD = "4111111111111111"
"""A fake card number in every payload and key: what no error or log may show."""
MEGABYTE_KEY = f"{CARD}-" + "k" * 1_000_000
NUL = f"inv\x00{CARD}"
SURROGATE = f"inv\ud800{CARD}"


@pytest.fixture(scope="module")
def prefix(engine: Engine) -> Iterator[str]:
    prefix = f"test_{uuid.uuid4().hex[:12]}_"
    create_tables(engine, prefix)
    yield prefix
    drop_tables(engine, prefix)


@pytest.fixture
def pg_store(engine: Engine, prefix: str) -> Iterator[SqlJobStore]:
    """On an engine that does not hide parameters: the store hides them itself."""
    yield SqlJobStore(engine, prefix=prefix)
    with engine.begin() as connection:
        connection.execute(create_tables(engine, prefix).jobs.delete())


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SqlJobStore]:
    engine = sqlite_engine(tmp_path / "jobs.sqlite3")
    yield SqlJobStore(engine)
    engine.dispose()


def new_job(**changes: object) -> NewJob:
    job = NewJob(
        id=f"job-{uuid.uuid4().hex[:8]}",
        name="sqlinput.charge",
        queue="sqlinput",
        payload={"card": CARD, "amount": 12},
        enqueued_at=NOW,
        run_at=NOW,
        max_attempts=3,
        enqueued_by=EnqueuedBy(tenant_id="acme", actor="user:7"),
        idempotency_key=f"charge-{CARD}",
    )
    by = {name: changes.pop(name) for name in ("tenant_id", "actor") if name in changes}
    return replace(job, enqueued_by=replace(job.enqueued_by, **by), **changes)  # type: ignore[arg-type]


def told(error: BaseException) -> str:
    """Everything an error says, with what is chained to it as a traceback or a reporter
    shows it (``__cause__``, else ``__context__`` unless suppressed)."""
    parts: list[str] = []
    seen: BaseException | None = error
    while seen is not None:
        parts += [str(seen), repr(seen), repr(seen.args)]
        seen = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)
    return "\n".join(parts)


FIELDS = {
    "id": "job-\x00-7",  # generated, not data: a message names a job by its id and name
    "name": "sqlinput.\x00charge",
    "queue": NUL,
    "tenant_id": NUL,
    "idempotency_key": NUL,
    "actor": NUL,
}


@pytest.mark.postgres
@pytest.mark.parametrize("field", sorted(FIELDS))
def test_a_nul_character_on_postgresql_is_an_invalid_enqueue_naming_the_field_never_the_value(
    pg_store: SqlJobStore, field: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    job = new_job(**{field: FIELDS[field]})

    with pytest.raises(InvalidEnqueueError) as refused:
        pg_store.add(job, dispatched=True)

    assert refused.value.field == field
    assert repr(job.name) in str(refused.value)
    assert not isinstance(refused.value, StoreUnavailableError)
    assert CARD not in told(refused.value)
    assert CARD not in caplog.text


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("field", "value"), [("idempotency_key", MEGABYTE_KEY), ("id", "k" * 1_000_000)]
)
def test_a_key_past_the_index_on_postgresql_is_an_invalid_enqueue_not_an_outage(
    pg_store: SqlJobStore, field: str, value: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)

    with pytest.raises(InvalidEnqueueError) as refused:
        pg_store.add(new_job(**{field: value}), dispatched=True)

    assert refused.value.field == field
    assert CARD not in told(refused.value)
    assert len(told(refused.value)) < 10_000, "a message quotes the start of an id at most"
    assert CARD not in caplog.text


@pytest.mark.parametrize(
    "database", [pytest.param("postgresql", marks=pytest.mark.postgres), "sqlite"]
)
def test_a_lone_surrogate_is_an_invalid_enqueue_quoting_nothing(
    database: str, request: pytest.FixtureRequest
) -> None:
    fixture = "pg_store" if database == "postgresql" else "sqlite_store"
    store: SqlJobStore = request.getfixturevalue(fixture)

    with pytest.raises(InvalidEnqueueError) as refused:
        store.add(new_job(idempotency_key=SURROGATE), dispatched=True)

    assert refused.value.field == "idempotency_key"
    assert CARD not in told(refused.value)


@pytest.mark.postgres
@pytest.mark.parametrize("text", [NUL, SURROGATE])
def test_a_lookup_by_a_text_the_database_cannot_hold_finds_no_job(
    pg_store: SqlJobStore, text: str
) -> None:
    pg_store.add(new_job(id="job-known"), dispatched=True)

    assert pg_store.find(text, tenant_id=None) is None
    assert pg_store.find("job-known", tenant_id=text) is None
    assert pg_store.cancel(text, tenant_id=None, now=NOW) is False
    assert pg_store.retry_dead("job-known", tenant_id=text, now=NOW) is False
    assert pg_store.claim_job(text, now=NOW, lease_ms=1_000) is None
    assert pg_store.list_jobs(tenant_id=text) == []
    with pytest.raises(LostLeaseError):
        pg_store.complete(JobLease("job-known", 1, text, NOW), now=NOW)


def test_sqlite_keeps_a_nul_character_as_any_other() -> None:
    """SQLite's text holds NUL: nothing to refuse there (the queue refuses it on every store)."""
    engine = sqlite_engine(":memory:")
    store = SqlJobStore(engine)
    job = new_job(idempotency_key=NUL, tenant_id=f"acme\x00{CARD}")

    store.add(job, dispatched=True)

    found = store.find(job.id, tenant_id=f"acme\x00{CARD}")
    assert found is not None
    assert found.idempotency_key == NUL
    engine.dispose()


@pytest.mark.postgres
@pytest.mark.parametrize("in_a_unit_of_work", [False, True])
def test_an_outage_during_an_add_quotes_no_parameter_whatever_the_engine(
    prefix: str, in_a_unit_of_work: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    with FaultProxy.to_url(DATABASE_URL) as proxy:
        engine = create_engine(proxy.url(DATABASE_URL), connect_args={"connect_timeout": 2})
        unit_of_work = SqlAlchemyUnitOfWork(sessionmaker(engine))
        store = SqlJobStore(
            engine, prefix=prefix, unit_of_work=unit_of_work if in_a_unit_of_work else None
        )
        store.stats()  # a connection in the pool, then the server goes as the add is sent
        proxy.delay_replies(2.0, matching=b"INSERT", count=1)

        def cut_while_late() -> None:
            while proxy.delayed == 0:
                time.sleep(0.005)
            proxy.cut()

        threading.Thread(target=cut_while_late, daemon=True).start()
        with pytest.raises(StoreUnavailableError) as unavailable:  # noqa: SIM117
            with unit_of_work.begin() if in_a_unit_of_work else nullcontext():
                store.add(new_job(), dispatched=True)
        engine.dispose()

    assert CARD not in told(unavailable.value)
    assert CARD not in caplog.text


def test_the_engine_sqlite_engine_builds_hides_parameters_from_its_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = sqlite_engine(tmp_path / "jobs.sqlite3")
    caplog.set_level(logging.INFO, logger="sqlalchemy.engine")

    SqlJobStore(engine).add(new_job(), dispatched=True)

    assert "INSERT" in caplog.text, "the statements were logged"
    assert CARD not in caplog.text
    engine.dispose()
