"""Every statement SqlJobStore sends for a worker, the relay or an operator runs on an index.

A table of 50,000 jobs (one ``INSERT ... SELECT generate_series``, then what autovacuum does:
``VACUUM ANALYZE``) in every status, of 7 names, 3 queues and 53 tenants, mostly succeeded as
a week in production leaves it: enough rows that PostgreSQL reads the table whole where no
index serves a statement. Each call's statements are caught as they are sent (first, and as
sent again after a lost reply), then run under ``EXPLAIN ANALYZE`` and rolled back: no plan
reads the jobs table whole (a ``Seq Scan``), and each reads the rows its answer needs, about
its limit or a page, never a range that grows with the table (a backlog of due jobs sorted
whole, the finished jobs of a status). A failure names the call and quotes the statement.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, event, text
from sqlalchemy.orm import sessionmaker

from ddd_celery.background.store import (
    EnqueuedBy,
    JobFilter,
    JobLease,
    JobState,
    JobStatus,
    NewJob,
)
from ddd_celery.sql import SqlAlchemyUnitOfWork, SqlJobStore, create_tables, drop_tables
from ddd_celery.sql.connection import Connector

pytestmark = pytest.mark.postgres

JOBS = 50_000
BASE = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)
NOW = BASE + timedelta(milliseconds=JOBS + 1)
"""After every job was enqueued (one a millisecond from BASE)."""
PAGE = 50
LEASE_MS = 60_000

# i % 20: 0-13 succeeded, 14 cancelled, 15 dead, 16 failed (due again in an hour), 17 queued
# for later (scheduled), 18 queued and due (dispatched, waiting for a worker), 19 running
FILL = """
INSERT INTO {jobs} (
    id, name, queue, status, payload, enqueued_at, run_at, attempts, max_attempts,
    correlation_id, actor, tenant_id, traceparent, tenant, last_error_code, last_error_type,
    lease_token, lease_ended, lease_expires_at, finished_at, dispatched_at, relay_at,
    redispatches, history
)
SELECT
    'job-' || lpad(i::text, 6, '0'),
    'plans.job-' || (i % 7),
    'q' || (i % 3),
    CASE
        WHEN i % 20 < 14 THEN 'succeeded' WHEN i % 20 = 14 THEN 'cancelled'
        WHEN i % 20 = 15 THEN 'dead' WHEN i % 20 = 16 THEN 'failed'
        WHEN i % 20 IN (17, 18) THEN 'queued' ELSE 'running'
    END,
    '{{"order":"o-' || i || '","customer":"c-' || (i % 997) || '","lines":['
        || repeat('{{"sku":"sku-0042","quantity": 2,"price":"19.90","tax":"0.20"}},', 6)
        || '{{"sku":"sku-0007","quantity": 1,"price":"5.00","tax":"0.20"}}],"currency":"EUR"}}',
    :base + i * 1000,
    CASE WHEN i % 20 = 17 THEN :base + 86400000000 WHEN i % 20 = 16 THEN :now + 3600000000
        ELSE :base + i * 1000 END,
    CASE WHEN i % 20 IN (17, 18) THEN 0 ELSE 1 END,
    3,
    'corr-' || i, 'user:u-' || (i % 11), 't-' || (i % 53),
    '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', 't-' || (i % 53),
    CASE WHEN i % 20 IN (15, 16) THEN 'BOOM' END,
    CASE WHEN i % 20 IN (15, 16) THEN 'BoomError' END,
    CASE WHEN i % 20 NOT IN (17, 18) THEN 'token-' || i END,
    CASE WHEN i % 20 < 14 THEN 'complete' WHEN i % 20 IN (15, 16) THEN 'fail' END,
    CASE WHEN i % 20 = 19 THEN :now + 3600000000 END,
    CASE WHEN i % 20 < 16 THEN :base + i * 1000 + 500 END,
    CASE WHEN i % 20 = 18 THEN :base + i * 1000 END,
    CASE WHEN i % 20 = 17 THEN :base + 86400000000 WHEN i % 20 = 16 THEN :now + 3600000000 END,
    0,
    CASE WHEN i % 20 IN (17, 18) THEN '[]' ELSE
        '[{{"number": 1,"started_at":' || (:base + i * 1000 + 100) || ',"worker":"celery@w-'
        || (i % 4) || '.example","outcome":"' || CASE
            WHEN i % 20 < 14 THEN 'succeeded","ended_at":' || (:base + i * 1000 + 500)
            WHEN i % 20 = 14 THEN 'cancelled","ended_at":' || (:base + i * 1000 + 500)
            WHEN i % 20 = 19 THEN 'running"'
            ELSE 'failed","ended_at":' || (:base + i * 1000 + 500)
                || ',"error_code":"BOOM","error_type":"BoomError"'
        END || '}}]' END
FROM generate_series(1, {count}) AS i
"""


@dataclass(frozen=True, slots=True)
class Table:
    engine: Engine
    store: SqlJobStore
    name: str
    unit_of_work: SqlAlchemyUnitOfWork
    outbox: SqlJobStore
    """The store as a use case holds it: ``add`` writes in its unit of work."""


@pytest.fixture(scope="module")
def table(engine: Engine) -> Iterator[Table]:
    prefix = f"test_{uuid.uuid4().hex[:12]}_"
    create_tables(engine, prefix)
    name = f"{prefix}jobs"
    base, now = _micros(BASE), _micros(NOW)
    with engine.begin() as connection:
        statement = text(FILL.format(jobs=name, count=JOBS))
        connection.execute(statement, {"base": base, "now": now})
    _vacuum(engine, name)
    unit_of_work = SqlAlchemyUnitOfWork(sessionmaker(engine))
    outbox = SqlJobStore(engine, unit_of_work=unit_of_work, prefix=prefix)
    yield Table(engine, SqlJobStore(engine, prefix=prefix), name, unit_of_work, outbox)
    drop_tables(engine, prefix)


def _micros(instant: datetime) -> int:
    return (instant - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def _vacuum(engine: Engine, name: str) -> None:
    with engine.execution_options(isolation_level="AUTOCOMMIT").connect() as connection:
        connection.execute(text(f"VACUUM ANALYZE {name}"))


def job_id(i: int) -> str:
    return f"job-{i:06}"


def lease_of(i: int) -> JobLease:
    """The lease the fill gave running job ``i`` (``i % 20 == 19``)."""
    return JobLease(job_id(i), 1, f"token-{i}", NOW + timedelta(hours=1))


def ready(i: int) -> int:
    """The ``i``-th of the queued jobs that are due."""
    return i * 20 + 18


def running(i: int) -> int:
    return i * 20 + 19


Call = Callable[[Table], object]


def listing(where: JobFilter, *, second_page: bool = False) -> Call:
    def call(table: Table) -> object:
        store = table.store
        page = store.list_page(where, now=NOW, limit=PAGE)
        if second_page:
            assert page.cursor is not None
            page = store.list_page(where, now=NOW, limit=PAGE, cursor=page.cursor)
        return page

    return call


SINCE = BASE + timedelta(milliseconds=JOBS - 5_000)
READS: dict[str, Call] = {
    "a page of every job": listing(JobFilter()),
    "the next page of every job": listing(JobFilter(), second_page=True),
    **{f"a page of the {state} jobs": listing(JobFilter(state=state)) for state in JobState},
    "a page of one job name": listing(JobFilter(name="plans.job-3")),
    "the next page of one job name": listing(JobFilter(name="plans.job-3"), second_page=True),
    "a page of one job name, dead": listing(JobFilter(name="plans.job-3", state=JobState.DEAD)),
    "a page of one tenant": listing(JobFilter(tenant_id="t-7")),
    "a page of one tenant, retrying": listing(JobFilter(tenant_id="t-6", state=JobState.RETRYING)),
    "a page of one queue": listing(JobFilter(queue="q1")),
    "a page enqueued since": listing(JobFilter(enqueued_since=SINCE)),
    "a page finished since": listing(JobFilter(finished_since=SINCE)),
    "find": lambda t: [t.store.find(job_id(i), tenant_id=None) for i in range(12_340, 12_360)],
}


def new_job(i: int, *, key: str | None = None) -> NewJob:
    return NewJob(
        id=f"new-{i}",
        name="plans.job-1",
        queue="q1",
        payload={"order": f"o-{i}"},
        enqueued_at=NOW,
        run_at=NOW,
        max_attempts=3,
        enqueued_by=EnqueuedBy(correlation_id=f"corr-{i}", tenant_id="t-1"),
        idempotency_key=key,
    )


def add_in_a_unit_of_work(t: Table) -> object:
    with t.unit_of_work.begin():
        return t.outbox.add(new_job(3), dispatched=True)


WRITES: dict[str, Call] = {
    "add": lambda t: t.store.add(new_job(1), dispatched=True),
    "add with an idempotency key taken": lambda t: [
        t.store.add(new_job(i, key="order-o-2"), dispatched=False) for i in (2, 22)
    ],
    "add in a unit of work (the outbox)": add_in_a_unit_of_work,
    "claim_job": lambda t: t.store.claim_job(
        job_id(ready(1)), now=NOW, lease_ms=LEASE_MS, token="claim-1", worker="celery@w-1"
    ),
    "claim_job sent again": lambda t: t.store.claim_job(
        job_id(ready(1)), now=NOW, lease_ms=LEASE_MS, token="claim-1", worker="celery@w-1"
    ),
    "claim_due": lambda t: t.store.claim_due(  # as a polling worker: no token
        ["q1"], now=NOW, lease_ms=LEASE_MS, limit=10, worker="celery@w-1"
    ),
    "claim_due of two queues": lambda t: t.store.claim_due(
        ["q1", "q2"], now=NOW, lease_ms=LEASE_MS, limit=10, worker="celery@w-2"
    ),
    "claim_due with a token": lambda t: t.store.claim_due(
        ["q1"], now=NOW, lease_ms=LEASE_MS, limit=10, token="poll-1", worker="celery@w-1"
    ),
    "claim_due sent again": lambda t: t.store.claim_due(
        ["q1"], now=NOW, lease_ms=LEASE_MS, limit=10, token="poll-1", worker="celery@w-1"
    ),
    "heartbeat": lambda t: t.store.heartbeat(lease_of(running(1)), now=NOW, lease_ms=LEASE_MS),
    "update": lambda t: t.store.update(lease_of(running(1)), progress=5, set_progress=True),
    "complete": lambda t: t.store.complete(lease_of(running(2)), now=NOW),
    "complete sent again": lambda t: t.store.complete(lease_of(running(2)), now=NOW),
    "fail with a retry": lambda t: t.store.fail(
        lease_of(running(3)), now=NOW, error_code="BOOM", error_type="BoomError", retry_at=NOW
    ),
    "fail for the last time": lambda t: t.store.fail(
        lease_of(running(4)), now=NOW, error_code="BOOM", error_type="BoomError", retry_at=None
    ),
    "release": lambda t: t.store.release(lease_of(running(5)), now=NOW),
    "cancel": lambda t: t.store.cancel(job_id(running(6)), tenant_id=None, now=NOW),
    "cancel sent again": lambda t: t.store.cancel(job_id(running(6)), tenant_id=None, now=NOW),
    "retry_dead": lambda t: t.store.retry_dead(job_id(15), tenant_id="t-15", now=NOW),
    "take_due": lambda t: t.store.take_due(
        now=NOW, limit=100, redispatch_after_ms=1_000, token="relay-1"
    ),
    "take_due sent again": lambda t: t.store.take_due(
        now=NOW, limit=100, redispatch_after_ms=1_000, token="relay-1"
    ),
    "expire_leases": lambda t: t.store.expire_leases(now=NOW, limit=100),
    "a purge batch": lambda t: t.store.purge_finished(before=SINCE, limit=1_000),
    "a purge batch of succeeded jobs": lambda t: t.store.purge_finished(
        before=SINCE, statuses={JobStatus.SUCCEEDED}, limit=1_000
    ),
}
RUNNING_OF_A_QUEUE = JOBS // 20 // 3 + 1
ROWS_AT_MOST = {
    # a range per claimable status (and queue), each read to about its limit, merged
    "claim_due": 10 * 10,
    "claim_due of two queues": 2 * 10 * 10,
    "take_due": 4 * 100,
    "take_due sent again": 4 * 100,
    "expire_leases": 4 * 100,
    # the oldest of each finished status, a batch each at most, deleted by primary key
    "a purge batch": 4 * 1_000,
    "a purge batch of succeeded jobs": 3 * 1_000,
    # a token the caller chose may have claimed at any instant: the running jobs of its
    # queue are read (as many as its workers run: never the finished ones), index and rows
    "claim_due with a token": 2 * (RUNNING_OF_A_QUEUE + 100),
    "claim_due sent again": 2 * (RUNNING_OF_A_QUEUE + 100),
}
"""Rows a call's statements read in all, by call; any other reads one job (or two) by primary
key, its row and its index entry: ``ROW_READS``."""
ROW_READS = 4
SENDS = ("sent once", "sent again after a lost reply")


def sent_by(engine: Engine, call: Call, table: Table) -> list[tuple[str, Any]]:
    """The statements ``call`` sent, with their parameters, in order."""
    statements: list[tuple[str, Any]] = []

    def sent(_c: object, _cursor: object, statement: str, parameters: Any, *_: object) -> None:
        statements.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", sent)
    try:
        call(table)
    finally:
        event.remove(engine, "before_cursor_execute", sent)
    return [(s, p) for s, p in statements if not s.lstrip().upper().startswith("BEGIN")]


def plan_of(
    engine: Engine, statement: str, parameters: Any, *, analyze: bool, no_seq_scan: bool = False
) -> Any:
    """PostgreSQL's plan of ``statement``, run and measured when ``analyze`` (a read);
    ``no_seq_scan``: the plan it makes when told a table read whole costs too much."""
    options = "ANALYZE, FORMAT JSON" if analyze else "FORMAT JSON"
    with engine.connect() as connection:
        if no_seq_scan:
            connection.exec_driver_sql("SET LOCAL enable_seqscan = off")
        explained = connection.exec_driver_sql(
            f"EXPLAIN ({options}) {statement}", parameters
        ).scalar_one()
        connection.rollback()
    return (json.loads(explained) if isinstance(explained, str) else explained)[0]["Plan"]


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def whole_reads(plan: dict[str, Any], table: str) -> list[str]:
    return [
        node["Node Type"]
        for node in nodes(plan)
        if node["Node Type"] == "Seq Scan" and node.get("Relation Name") == table
    ]


def rows_read(plan: dict[str, Any], table: str) -> int:
    """Rows fetched from ``table`` or its indexes, those the filters dropped included."""
    return sum(
        node.get("Actual Rows", 0) * node.get("Actual Loops", 1)
        + node.get("Rows Removed by Filter", 0)
        for node in nodes(plan)
        if node.get("Relation Name") == table or str(node.get("Index Name", "")).startswith(table)
    )


@pytest.fixture(params=SENDS)
def sends(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each call as sent once, and as sent again after its reply was lost: the store then looks
    for what the first send did (``Connector.run`` gives ``again``) before doing it."""
    if request.param != SENDS[0]:
        run = Connector.run

        def again(connector: Connector, doing: str, work: Callable[[Any, bool], Any]) -> Any:
            return run(connector, doing, lambda connection, _again: work(connection, True))

        monkeypatch.setattr(Connector, "run", again)
    return str(request.param)


@pytest.mark.parametrize("call", list(WRITES))
def test_each_statement_of_a_worker_or_the_relay_runs_on_an_index_and_reads_its_rows(
    table: Table, call: str, sends: str
) -> None:
    statements = sent_by(table.engine, WRITES[call], table)

    assert statements, "the call sent nothing"
    most = ROWS_AT_MOST.get(call, ROW_READS)
    for statement, parameters in statements:
        plan = plan_of(table.engine, statement, parameters, analyze=True)
        assert whole_reads(plan, table.name) == [], f"{call} reads the table:\n{statement}"
        read = rows_read(plan, table.name)
        assert read <= most, f"{call}, {sends}: {read} rows read, at most {most}:\n{statement}"


@pytest.mark.parametrize("call", list(READS))
def test_each_read_of_an_operator_runs_on_an_index_and_reads_about_a_page(
    table: Table, call: str
) -> None:
    statements = sent_by(table.engine, READS[call], table)

    assert statements, "the call sent nothing"
    for statement, parameters in statements:
        plan = plan_of(table.engine, statement, parameters, analyze=True)
        assert whole_reads(plan, table.name) == [], f"{call} reads the table:\n{statement}"
        # each status's range merged newest first (about a page read in all, a page per
        # status at worst), the page's rows fetched by primary key; a filter off the index
        # reads what it drops (a queue: 3 rows for one). Of 50,000: about a page.
        assert rows_read(plan, table.name) <= 10 * PAGE, call


def test_the_stats_are_counted_in_the_order_of_two_narrow_indexes(table: Table) -> None:
    """Counting reads every job's entry of an index (queue or name, then status), in its order:
    no sort, and no row read once the visibility map says its page is all-visible.

    Whether PostgreSQL reads the indexes or the table is its choice: an index entry whose page
    is not all-visible (recent writes, or autovacuum held back by an old transaction) costs a
    read of the row too, and the table read whole is then cheaper. Either way the stats cost a
    read of every job: what this test shows is that two narrow indexes serve them, once the
    planner may not read the table whole.
    """
    [(statement, parameters)] = sent_by(table.engine, lambda t: t.store.stats(), table)

    plan = plan_of(table.engine, statement, parameters, analyze=True, no_seq_scan=True)

    scans = {node["Index Name"]: node["Node Type"] for node in nodes(plan) if "Index Name" in node}
    assert scans == {
        f"{table.name.removesuffix('jobs')}jobs_queue_due": "Index Only Scan",
        f"{table.name.removesuffix('jobs')}jobs_name": "Index Only Scan",
    }
    assert "Sort" not in {node["Node Type"] for node in nodes(plan)}
    with table.engine.connect() as connection:
        counted = connection.execute(
            text(f"SELECT name, status, count(*) FROM {table.name} GROUP BY name, status")
        ).all()
    by_name: dict[str, dict[JobStatus, int]] = {}
    for name, status, count in counted:
        by_name.setdefault(name, {})[JobStatus(status)] = count
    assert table.store.stats().by_name == by_name
