"""``celery -A app jobs background list | dead | stats | find | cancel | retry-dead | purge``.

Run as an operator runs them, ``celery -A ops_bg_app jobs background ...`` in a process of its
own, on the job store of a real Redis and of a real PostgreSQL: the test puts the jobs in the
store as the workers would have left them (claims naming their workers, failures, conclusions),
the command reads and changes them there. The app is wired as a project wires it, with a process
manager (the clinic's booking), so its timeout job and the commands' outbox are the library's
own jobs. The arguments a command refuses before any store is asked are checked in this process
with click's runner.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from background_jobs import EchoJob, Seen
from celery import Celery
from celery.bin.base import CLIContext
from cli_support import app_env, run_jobs, write_app
from click.testing import CliRunner, Result
from redis import Redis
from services import DATABASE_URL, REDIS_URL
from sqlalchemy import Engine

from ddd_celery.background import InMemoryJobStore
from ddd_celery.background.store import EnqueuedBy, JobStatus, JobStore, NewJob
from ddd_celery.celery import install_jobs
from ddd_celery.celery.background import install_background_jobs
from ddd_celery.celery.cli import jobs
from ddd_celery.kernel import FixedClock, InMemoryLock
from ddd_celery.kernel.instants import iso_ms
from ddd_celery.processes import PROCESS_COMMANDS_JOB
from ddd_celery.redis.job_store import RedisJobStore
from ddd_celery.sql import SqlJobStore, create_tables, drop_tables

pytestmark = pytest.mark.processes

ROOT = Path(__file__).parents[3]
SEND = "ops.send-mail"
CLOSE = "ops.close-day"
TIMEOUT = "booking.appointment-booking-timeout"
BOOKING = "booking.appointment-booking"
CODE = "UNEXPECTED_ERROR"


def timeout_of(instance: str) -> dict[str, str]:
    """The payload of the booking's payment timeout of ``instance``."""
    return {"process": BOOKING, "id": instance, "timeout": "payment"}


APP = '''
"""An app module as a project writes it, for `celery -A ops_bg_app`."""

import os

from celery import Celery
from sqlalchemy import create_engine

from ddd_celery.celery import install_jobs, install_process_managers
from ddd_celery.declarations.background import BackgroundJobExecution, background
from ddd_celery.kernel import InMemoryCommandBus, InMemoryUnitOfWork
from ddd_celery.processes import InMemoryProcessStore
from ddd_celery.redis import connect
from ddd_celery.redis.job_store import RedisJobStore
from ddd_celery.sql import SqlJobStore
from examples.clinic.booking.process import AppointmentBooking


@background("ops.send-mail", queue="mail")
class SendMailJob:
    def run(self, payload: object, execution: BackgroundJobExecution) -> None:
        print("sent")


@background("ops.close-day")
class CloseDayJob:
    def run(self, payload: object, execution: BackgroundJobExecution) -> None:
        print("closed")


app = Celery("ops_bg_app", broker=os.environ["REDIS_FOR_TEST"])
app.conf.ddd_celery_key_prefix = os.environ["PREFIX_FOR_TEST"]
install_jobs(app, jobs=[])
if os.environ["STORE_FOR_TEST"] == "postgresql":
    engine = create_engine(os.environ["SQL_FOR_TEST"])
    store = SqlJobStore(engine, prefix=os.environ["TABLES_FOR_TEST"])
else:
    redis = connect(os.environ["REDIS_FOR_TEST"])
    store = RedisJobStore(redis, prefix=os.environ["STORE_PREFIX_FOR_TEST"])
install_process_managers(
    app,
    managers=[AppointmentBooking],
    store=InMemoryProcessStore(),
    commands=InMemoryCommandBus(),
    unit_of_work=InMemoryUnitOfWork(),
    job_store=store,
    jobs=[SendMailJob, CloseDayJob],
)
'''


@dataclass
class Ops:
    """One test's app module and job store; ``run`` is ``celery -A ops_bg_app jobs ...``."""

    store: JobStore
    env: dict[str, str]
    directory: Path
    now: datetime = field(default_factory=lambda: datetime.now(UTC).replace(microsecond=0))
    enqueued: dict[str, datetime] = field(default_factory=dict)

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return run_jobs("ops_bg_app", self.directory, self.env, "background", *args, stdin=stdin)

    def add(
        self,
        job_id: str,
        name: str = SEND,
        *,
        queue: str = "mail",
        payload: Any = None,
        ago: timedelta = timedelta(),
        delay: timedelta = timedelta(),
        by: EnqueuedBy | None = None,
    ) -> str:
        """A job enqueued ``ago`` and 10 s before the test's start (a ms later for each job
        added: newest first is the order of adding, reversed), due ``delay`` after that."""
        enqueued_at = self.now - ago - timedelta(seconds=10, milliseconds=-len(self.enqueued))
        self.enqueued[job_id] = enqueued_at
        self.store.add(
            NewJob(
                id=job_id,
                name=name,
                queue=queue,
                payload={"to": "ada@example.test"} if payload is None else payload,
                enqueued_at=enqueued_at,
                run_at=enqueued_at + delay,
                max_attempts=3,
                enqueued_by=by or EnqueuedBy(correlation_id=f"corr-{job_id}", actor="user:ada"),
            ),
            dispatched=False,
        )
        return job_id

    def attempt(
        self,
        job_id: str,
        worker: str,
        *,
        then: str,
        at: datetime | None = None,
        error: str = "KeyError",
    ) -> datetime:
        """An attempt on ``worker`` started at ``at`` (the test's start) and ended 1 s later:
        ``then`` is ``fail`` (retried at once), ``dead``, ``succeed`` or ``run`` (running)."""
        started = at or self.now
        claimed = self.store.claim_job(job_id, now=started, lease_ms=600_000, worker=worker)
        assert claimed is not None
        ended = started + timedelta(seconds=1)
        if then == "succeed":
            self.store.complete(claimed.lease, now=ended)
        elif then in ("fail", "dead"):
            self.store.fail(
                claimed.lease,
                now=ended,
                error_code="UNEXPECTED_ERROR",
                error_type=error,
                retry_at=ended if then == "fail" else None,
            )
        return ended

    def status(self, job_id: str) -> JobStatus | None:
        job = self.store.find(job_id, tenant_id=None)
        return None if job is None else job.status


@pytest.fixture(params=["redis", "postgresql"])
def ops(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    redis_prefix: str,
    redis_client: Redis,
    engine: Engine,
) -> Iterator[Ops]:
    write_app(tmp_path, "ops_bg_app", APP)
    tables = f"test_opscli_{uuid.uuid4().hex[:10]}_"
    store: JobStore
    if request.param == "postgresql":
        create_tables(engine, tables)
        store = SqlJobStore(engine, prefix=tables)
    else:
        store = RedisJobStore(redis_client, prefix=f"{redis_prefix}store:")
    env = app_env(
        tmp_path,
        {
            "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
            "REDIS_FOR_TEST": REDIS_URL,
            "PREFIX_FOR_TEST": redis_prefix,
            "STORE_FOR_TEST": request.param,
            "STORE_PREFIX_FOR_TEST": f"{redis_prefix}store:",
            "SQL_FOR_TEST": DATABASE_URL,
            "TABLES_FOR_TEST": tables,
        },
    )
    try:
        yield Ops(store, env, tmp_path)
    finally:
        if request.param == "postgresql":
            drop_tables(engine, tables)


def table(output: str) -> list[list[str]]:
    """The lines of a table, split into its cells (two spaces or more apart)."""
    return [re.split(r"\s{2,}", line.strip()) for line in output.splitlines() if line.strip()]


def fields(output: str) -> dict[str, str]:
    """``find``'s fields, up to the blank line before its attempts."""
    head = output.split("\n\n", 1)[0]
    return dict(re.split(r"\s{2,}", line, maxsplit=1) for line in head.splitlines())


def ids(output: str) -> list[str]:
    return [row[0] for row in table(output)[1:] if not row[0].startswith("next page")]


def test_list_shows_every_state_newest_first_and_each_filter_narrows_it(ops: Ops) -> None:
    ops.add("j-old", ago=timedelta(hours=3))
    ops.attempt("j-old", "w1@host", then="succeed", at=ops.now - timedelta(hours=3))
    ops.add("j-scheduled", CLOSE, queue="ops", delay=timedelta(hours=1))
    ops.add("j-ready")
    ops.add("j-retrying")
    ops.attempt("j-retrying", "w1@host", then="fail")
    ops.add("j-running", by=EnqueuedBy(correlation_id="c", actor="user:bo", tenant_id="clinic-a"))
    ops.attempt("j-running", "w2@host", then="run")
    ops.add("j-dead")
    ops.attempt("j-dead", "w1@host", then="dead")
    ops.add("j-cancelled")
    ops.store.cancel("j-cancelled", tenant_id=None, now=ops.now)

    listed = ops.run("list")
    scheduled = ops.run("list", "--state", "scheduled")
    ready = ops.run("list", "--state", "ready")
    retrying = ops.run("list", "--state", "retrying", "--name", SEND, "--queue", "mail")
    of_tenant = ops.run("list", "--tenant", "clinic-a")
    of_queue = ops.run("list", "--queue", "ops")
    recent = ops.run("list", "--enqueued-since", "1h")
    finished = ops.run("list", "--finished-since", iso_ms(ops.now - timedelta(hours=1)))

    assert listed.returncode == 0, listed.stderr
    rows = table(listed.stdout)
    assert rows[0] == [
        "ID",
        "NAME",
        "QUEUE",
        "STATE",
        "ATTEMPTS",
        "ENQUEUED AT",
        "RUN AT",
        "FINISHED AT",
        "LAST ERROR",
        "TENANT",
    ]
    by_id = {row[0]: row for row in rows[1:]}
    assert list(by_id) == [
        "j-cancelled",
        "j-dead",
        "j-running",
        "j-retrying",
        "j-ready",
        "j-scheduled",
        "j-old",
    ]
    assert by_id["j-dead"][1:5] == [SEND, "mail", "dead", "1/3"]
    assert by_id["j-dead"][8:] == ["UNEXPECTED_ERROR (KeyError)", "-"]
    assert by_id["j-scheduled"][1:4] == [CLOSE, "ops", "scheduled"]
    assert by_id["j-scheduled"][6] == iso_ms(ops.enqueued["j-scheduled"] + timedelta(hours=1))
    assert by_id["j-running"][3::6] == ["running", "clinic-a"]
    assert [by_id[job][3] for job in ("j-retrying", "j-ready", "j-old")] == [
        "retrying",
        "ready",
        "succeeded",
    ]
    assert ids(scheduled.stdout) == ["j-scheduled"]
    assert ids(ready.stdout) == ["j-ready"]
    assert ids(retrying.stdout) == ["j-retrying"]
    assert ids(of_tenant.stdout) == ["j-running"]
    assert ids(of_queue.stdout) == ["j-scheduled"]
    assert "j-old" not in ids(recent.stdout)
    assert len(ids(recent.stdout)) == 6
    assert ids(finished.stdout) == ["j-cancelled", "j-dead"]


def test_list_pages_with_the_cursor_it_prints_and_the_last_page_prints_none(ops: Ops) -> None:
    added = [ops.add(f"j-{number}") for number in range(5)]

    first = ops.run("list", "--limit", "2")
    cursor = first.stdout.splitlines()[-1].removeprefix("next page: --cursor ")
    second = ops.run("list", "--limit", "2", "--cursor", cursor)
    last = ops.run("list", "--limit", "2", "--cursor", second.stdout.split()[-1])
    forged = ops.run("list", "--cursor", "not-a-cursor-of-this-store")

    assert first.stdout.splitlines()[-1].startswith("next page: --cursor ")
    pages = [ids(first.stdout), ids(second.stdout), ids(last.stdout)]
    assert pages == [["j-4", "j-3"], ["j-2", "j-1"], ["j-0"]]
    assert sorted(job for page in pages for job in page) == sorted(added)
    assert "next page" not in last.stdout
    assert forged.returncode == 2
    assert "--cursor" in forged.stderr


def test_list_json_gives_the_page_as_data_and_the_cursor(ops: Ops) -> None:
    ops.add("j-1")
    ops.add("j-2", by=EnqueuedBy(tenant_id="clinic-a"))
    ops.attempt("j-2", "w1@host", then="dead", error="ValueError")

    result = ops.run("list", "--json", "--state", "dead", "--limit", "1")

    assert result.returncode == 0, result.stderr
    listed = json.loads(result.stdout)
    assert listed["cursor"] is None
    assert listed["jobs"] == [
        {
            "id": "j-2",
            "name": SEND,
            "origin": "application",
            "queue": "mail",
            "state": "dead",
            "status": "dead",
            "attempts": 1,
            "max_attempts": 3,
            "enqueued_at": iso_ms(ops.enqueued["j-2"]),
            "run_at": iso_ms(ops.enqueued["j-2"]),
            "finished_at": iso_ms(ops.now + timedelta(seconds=1)),
            "last_error_code": "UNEXPECTED_ERROR",
            "last_error_type": "ValueError",
            "tenant_id": "clinic-a",
        }
    ]
    assert listed["now"].endswith("Z")


def test_dead_is_list_state_dead(ops: Ops) -> None:
    ops.add("j-1")
    ops.attempt("j-1", "w1@host", then="dead")
    ops.add("j-2")

    dead = ops.run("dead")
    listed = ops.run("list", "--state", "dead")

    assert dead.returncode == 0, dead.stderr
    assert dead.stdout == listed.stdout
    assert ids(dead.stdout) == ["j-1"]


def test_stats_count_per_queue_and_per_name_with_the_librarys_jobs_apart(ops: Ops) -> None:
    ops.add("j-1")
    ops.add("j-2")
    ops.attempt("j-2", "w1@host", then="succeed")
    ops.add("t-1", TIMEOUT, queue="booking", payload=timeout_of("a-1"), delay=timedelta(hours=1))
    ops.add("t-2", TIMEOUT, queue="booking", payload=timeout_of("a-2"))
    ops.store.cancel("t-2", tenant_id=None, now=ops.now)
    outbox = {"process": BOOKING, "id": "a-2", "version": 2, "commands": []}
    for number in range(3):
        ops.add(f"o-{number}", PROCESS_COMMANDS_JOB, queue="ddd_celery", payload=outbox)
        ops.store.cancel(f"o-{number}", tenant_id=None, now=ops.now)

    text = ops.run("stats")
    data = ops.run("stats", "--json")

    assert text.returncode == 0, text.stderr
    queues, names = text.stdout.split("\n\n")
    assert table(queues) == [
        ["QUEUE", "QUEUED", "RUNNING", "FAILED", "DEAD", "SUCCEEDED", "CANCELLED"],
        ["booking", "1", "0", "0", "0", "0", "1"],
        ["ddd_celery", "0", "0", "0", "0", "0", "3"],
        ["mail", "1", "0", "0", "0", "1", "0"],
        ["(all)", "2", "0", "0", "0", "1", "4"],
    ]
    assert table(names) == [
        ["JOB", "QUEUED", "RUNNING", "FAILED", "DEAD", "SUCCEEDED", "CANCELLED"],
        [SEND, "1", "0", "0", "0", "1", "0"],
        ["(application)", "1", "0", "0", "0", "1", "0"],
        [TIMEOUT, "1", "0", "0", "0", "0", "1"],
        [PROCESS_COMMANDS_JOB, "0", "0", "0", "0", "0", "3"],
        ["(library: process timeouts, commands' outbox)", "1", "0", "0", "0", "0", "4"],
    ]
    counted = json.loads(data.stdout)
    assert counted["totals"]["application"]["cancelled"] == 0
    assert counted["totals"]["library"]["cancelled"] == 4
    assert counted["jobs"][TIMEOUT]["origin"] == "process-timeout"
    assert counted["jobs"][PROCESS_COMMANDS_JOB]["origin"] == "process-commands"
    assert counted["queues"]["mail"]["succeeded"] == 1


def test_find_tells_what_the_store_holds_and_each_attempt_without_a_value_of_the_payload(
    ops: Ops,
) -> None:
    payload = {"to": "ada@secret.test", "lines": [{"sku": "SKU-SECRET", "qty": 2}]}
    by = EnqueuedBy("corr-42", "user:ada", "clinic-a", "00-4bf92f35-00f067aa-01")
    ops.add("j-1", payload=payload, by=by)
    first_ended = ops.attempt("j-1", "w1@host-a", then="fail", error="KeyError")
    second_start = first_ended + timedelta(seconds=30)
    second_ended = ops.attempt("j-1", "w2@host-b", then="dead", at=second_start, error="OSError")

    result = ops.run("find", "j-1")
    data = ops.run("find", "j-1", "--json")

    assert result.returncode == 0, result.stderr
    shown = fields(result.stdout)
    assert shown == {
        "id": "j-1",
        "name": SEND,
        "origin": "application",
        "queue": "mail",
        "state": "dead (status dead)",
        "attempts": "2/3",
        "run at": iso_ms(first_ended),
        "enqueued at": iso_ms(ops.enqueued["j-1"]),
        "finished at": iso_ms(second_ended),
        "progress": "-",
        "last error": "UNEXPECTED_ERROR (OSError)",
        "tenant": "clinic-a",
        "actor": "user:ada",
        "correlation id": "corr-42",
        "traceparent": "00-4bf92f35-00f067aa-01",
        "payload": '{"lines": list[1] of {"qty": int, "sku": str}, "to": str}',
    }
    attempts = table(result.stdout.split("\n\n", 1)[1])
    assert attempts == [
        ["ATTEMPT", "STARTED AT", "ENDED AT", "WORKER", "OUTCOME", "ERROR"],
        ["1", iso_ms(ops.now), iso_ms(first_ended), "w1@host-a", "failed", f"{CODE} (KeyError)"],
        [
            "2",
            iso_ms(second_start),
            iso_ms(second_ended),
            "w2@host-b",
            "failed",
            f"{CODE} (OSError)",
        ],
    ]
    assert "secret" not in (result.stdout + data.stdout).lower()
    story = json.loads(data.stdout)
    assert [attempt["worker"] for attempt in story["history"]] == ["w1@host-a", "w2@host-b"]
    assert (story["correlation_id"], story["runs_as"]) == ("corr-42", "user:ada")


def test_find_says_what_a_job_enqueued_outside_any_work_runs_as_and_refuses_an_unknown_id(
    ops: Ops,
) -> None:
    ops.add("j-1", CLOSE, queue="ops", by=EnqueuedBy(correlation_id="j-1"))
    ops.add("j-2", by=EnqueuedBy(tenant_id="clinic-a"))

    shown = fields(ops.run("find", "j-1").stdout)
    unknown = ops.run("find", "no-such-id")
    other = ops.run("find", "j-2", "--tenant", "clinic-b")

    assert shown["actor"] == f"- (its attempts run as system:{CLOSE})"
    assert shown["correlation id"] == "j-1"
    assert (unknown.returncode, unknown.stderr) == (
        1,
        "no background job has the id 'no-such-id'\n",
    )
    assert (other.returncode, other.stderr) == (
        1,
        "no background job of tenant 'clinic-b' has the id 'j-2'\n",
    )


def test_cancel_of_an_armed_process_timeout_is_refused_naming_its_instance_unless_forced(
    ops: Ops,
) -> None:
    ops.add("t-1", TIMEOUT, queue="booking", payload=timeout_of("a-7"), delay=timedelta(hours=1))

    shown = fields(ops.run("find", "t-1").stdout)
    refused = ops.run("cancel", "t-1")
    status_after = ops.status("t-1")
    forced = ops.run("cancel", "t-1", "--force")

    assert shown["origin"] == "library (a process manager's timeout)"
    assert shown["fires"] == (
        f"the timeout 'payment' of process '{BOOKING}', instance 'a-7', armed"
    )
    assert refused.returncode == 1
    assert refused.stderr == (
        f"t-1 is the timeout 'payment' of process '{BOOKING}', instance 'a-7', still to fire: "
        "cancelled, the instance would wait for it for good. Step the instance instead, or "
        "give --force to cancel it anyway\n"
    )
    assert status_after is JobStatus.QUEUED
    assert (forced.returncode, forced.stdout) == (0, "t-1 cancelled\n")
    assert ops.status("t-1") is JobStatus.CANCELLED


def test_cancel_of_one_job_cancels_it_answers_so_again_and_refuses_a_dead_one(ops: Ops) -> None:
    ops.add("j-1")
    ops.add("j-2")
    ops.attempt("j-2", "w1@host", then="dead")

    first = ops.run("cancel", "j-1")
    second = ops.run("cancel", "j-1")
    dead = ops.run("cancel", "j-2")

    assert (first.returncode, first.stdout) == (0, "j-1 cancelled\n")
    assert (second.returncode, second.stdout) == (0, "j-1 cancelled\n")
    assert (dead.returncode, dead.stderr) == (
        1,
        "j-2 is dead: only a scheduled, ready, retrying or running job is cancelled\n",
    )


def test_cancel_all_counts_asks_and_skips_the_armed_timeouts_unless_forced(ops: Ops) -> None:
    for number in range(3):
        ops.add(f"j-{number}")
    ops.add("j-other", CLOSE, queue="ops")
    ops.add("t-1", TIMEOUT, queue="booking", payload=timeout_of("a-1"))

    declined = ops.run("cancel", "--all", "--name", SEND, stdin="n\n")
    after_decline = [ops.status(f"j-{number}") for number in range(3)]
    accepted = ops.run("cancel", "--all", "--name", SEND, stdin="y\n")
    everything = ops.run("cancel", "--all", "--yes")
    forced = ops.run("cancel", "--all", "--yes", "--force")

    assert declined.returncode == 1
    assert declined.stdout.startswith("3 job(s) match\ncancel them? [y/N]: ")
    assert after_decline == [JobStatus.QUEUED] * 3
    assert accepted.returncode == 0, accepted.stderr
    assert accepted.stdout.splitlines()[-1].endswith("cancelled 3 of 3")
    assert everything.stdout.splitlines() == [
        "1 job(s) match (1 armed process timeout(s) skipped: --force cancels them too)",
        "cancelled 1 of 1",
    ]
    assert ops.status("j-other") is JobStatus.CANCELLED
    assert forced.stdout.splitlines() == ["1 job(s) match", "cancelled 1 of 1"]
    assert ops.status("t-1") is JobStatus.CANCELLED


def test_retry_dead_by_filter_counts_and_queues_them_again_and_by_id_still_works(
    ops: Ops,
) -> None:
    for job_id in ("j-1", "j-2", "j-3"):
        ops.add(job_id)
        ops.attempt(job_id, "w1@host", then="dead")
    ops.add("j-other", CLOSE, queue="ops")
    ops.attempt("j-other", "w1@host", then="dead")

    by_name = ops.run("retry-dead", "--name", SEND, "--all", "--yes")
    by_id = ops.run("retry-dead", "j-other")
    again = ops.run("retry-dead", "j-other")

    assert by_name.returncode == 0, by_name.stderr
    assert by_name.stdout.splitlines() == [
        "3 dead job(s) match",
        "queued 3 of 3 again; beat's relay publishes them at its next tick",
    ]
    assert {ops.status(job_id) for job_id in ("j-1", "j-2", "j-3")} == {JobStatus.QUEUED}
    assert (by_id.returncode, by_id.stdout) == (
        0,
        "j-other queued again; beat's relay publishes it at its next tick\n",
    )
    assert (again.returncode, again.stderr) == (
        1,
        "j-other is ready: only a dead job is retried\n",
    )


def test_a_job_refused_by_retry_dead_is_named_in_the_state_list_shows(ops: Ops) -> None:
    ops.add("j-retrying")
    ops.attempt("j-retrying", "w1@host", then="fail")
    ops.add("j-scheduled", delay=timedelta(hours=1))

    retrying = ops.run("retry-dead", "j-retrying")
    scheduled = ops.run("retry-dead", "j-scheduled")

    assert (retrying.returncode, retrying.stderr) == (
        1,
        "j-retrying is retrying: only a dead job is retried\n",
    )
    assert (scheduled.returncode, scheduled.stderr) == (
        1,
        "j-scheduled is scheduled: only a dead job is retried\n",
    )


def test_purge_deletes_the_finished_jobs_older_than_the_age_in_batches_the_dead_when_asked(
    ops: Ops,
) -> None:
    two_days_ago = ops.now - timedelta(days=2)
    for number in range(3):
        ops.add(f"old-{number}", ago=timedelta(days=2))
        ops.attempt(f"old-{number}", "w1@host", then="succeed", at=two_days_ago)
    ops.add("old-cancelled", ago=timedelta(days=2))
    ops.store.cancel("old-cancelled", tenant_id=None, now=two_days_ago)
    ops.add("old-dead", ago=timedelta(days=2))
    ops.attempt("old-dead", "w1@host", then="dead", at=two_days_ago)
    ops.add("recent")
    ops.attempt("recent", "w1@host", then="succeed")
    ops.add("queued", ago=timedelta(days=2))

    declined = ops.run("purge", "--older-than", "1d", stdin="n\n")
    after_decline = ops.status("old-0")
    purged = ops.run("purge", "--older-than", "1d", "--batch", "2", "--yes")
    left = {job_id: ops.status(job_id) for job_id in ops.enqueued}
    with_dead = ops.run("purge", "--older-than", "1d", "--dead", "--yes")

    assert declined.returncode == 1
    assert after_decline is JobStatus.SUCCEEDED
    assert purged.returncode == 0, purged.stderr
    lines = purged.stdout.splitlines()
    assert re.fullmatch(
        r"purging the succeeded and cancelled jobs finished before \S+Z", lines[0]
    ), lines
    assert lines[1:] == ["purged 4 job(s)"]
    assert purged.stderr.splitlines() == ["purged 2 so far", "purged 4 so far"]
    assert left == {
        "old-0": None,
        "old-1": None,
        "old-2": None,
        "old-cancelled": None,
        "old-dead": JobStatus.DEAD,
        "recent": JobStatus.SUCCEEDED,
        "queued": JobStatus.QUEUED,
    }
    [heading, count] = with_dead.stdout.splitlines()
    assert heading.startswith("purging the succeeded, cancelled and dead jobs finished before ")
    assert count == "purged 1 job(s)"
    assert ops.status("old-dead") is None


FORGED = "ada\nstatus          succeeded\x1b[2K\x1b[1A\u202e"


def test_what_the_store_holds_is_printed_with_its_control_characters_escaped(ops: Ops) -> None:
    """A newline or a terminal escape in a stored value would otherwise forge lines."""
    by = EnqueuedBy("corr\r\n1", f"user:{FORGED}", "t\x1bA")
    ops.add("j-1", payload={"k\n\x1b[31m": "v"}, by=by)
    ops.attempt("j-1", "w\x1b]0;pwned\x07", then="dead", error="E\n\x1b[31m")

    found = ops.run("find", "j-1")
    listed = ops.run("list")
    data = ops.run("find", "j-1", "--json")

    assert found.returncode == 0, found.stderr
    shown = fields(found.stdout)
    assert shown["actor"] == "user:ada\\nstatus          succeeded\\x1b[2K\\x1b[1A\\u202e"
    assert shown["correlation id"] == "corr\\r\\n1"
    assert shown["tenant"] == "t\\x1bA"
    assert shown["last error"] == "UNEXPECTED_ERROR (E\\n\\x1b[31m)"
    assert shown["payload"] == '{"k\\n\\u001b[31m": str}'
    assert "w\\x1b]0;pwned\\x07" in found.stdout
    output = found.stdout + listed.stdout + data.stdout
    assert "\x1b" not in output
    assert "\x07" not in output
    assert ids(listed.stdout) == ["j-1"]
    assert json.loads(data.stdout)["actor"] == f"user:{FORGED}"


# --- what the commands refuse before a store is asked (click's runner, in this process) ----

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@pytest.fixture
def app() -> Celery:
    app = Celery(f"cli-{uuid.uuid4().hex[:8]}", broker="memory://", set_as_current=False)
    clock = FixedClock(NOW)
    install_jobs(app, jobs=[], lock=InMemoryLock(clock), clock=clock, environ={})
    install_background_jobs(app, jobs=[EchoJob], store=InMemoryJobStore(), providers={Seen: Seen})
    return app


def invoke(app: Celery, *args: str) -> Result:
    context = CLIContext(app=app, no_color=True, workdir=None, quiet=False)
    return CliRunner().invoke(jobs, ["background", *args], obj=context)


COMMANDS = [
    ["stats"],
    ["list"],
    ["dead"],
    ["find", "j-1"],
    ["cancel", "j-1"],
    ["retry-dead", "j-1"],
    ["purge", "--older-than", "1d", "--yes"],
]


def test_an_empty_tenant_is_refused_in_one_line_rather_than_read_as_no_tenant(
    app: Celery,
) -> None:
    for command in (["find", "j-1"], ["cancel", "j-1"], ["retry-dead", "j-1"], ["dead"], ["list"]):
        result = invoke(app, *command, "--tenant", "")

        assert result.exit_code == 2, command
        assert result.output.splitlines() == [
            "--tenant '' names no tenant: give a tenant's id, or leave --tenant out to reach "
            "every job"
        ]


@pytest.mark.parametrize(
    ("command", "problem"),
    [
        (["retry-dead"], "give a job id, or --all to reach every job"),
        (
            ["cancel", "--name", "x"],
            "give a job id, or --all to reach every job (the filters need --all)",
        ),
        (["retry-dead", "j-1", "--all"], "give a job id, or --all with filters, not both"),
        (["cancel", "j-1", "--queue", "q"], "give a job id, or --all with filters, not both"),
        (["cancel", "--all", "--state", "dead"], "Invalid value for '--state'"),
        (["list", "--enqueued-since", "yesterday"], "'yesterday' is neither an ISO 8601 instant"),
        (["dead", "--finished-since", "2026-03-02T09:00:00"], "has no offset: add Z for UTC"),
        (["purge", "--older-than", "a while"], "'a while' is not an age such as 30m, 2h or 7d"),
        (["purge", "--older-than", "0d"], "'0d' is no age: give one longer than 0"),
        (["list", "--limit", "0"], "Invalid value for '--limit'"),
    ],
)
def test_what_a_command_cannot_read_is_refused_before_anything_is_done(
    app: Celery, command: list[str], problem: str
) -> None:
    result = invoke(app, *command)

    assert result.exit_code == 2, result.output
    assert problem in " ".join(result.output.split())


@pytest.mark.parametrize(
    "command",
    [
        ("purge", "--older-than", "3000000d", "--yes"),
        ("purge", "--older-than", "99999999999999999999s", "--yes"),
        ("list", "--enqueued-since", "99999999999d"),
        ("dead", "--finished-since", "3000000d"),
    ],
    ids=" ".join,
)
def test_an_age_longer_than_a_date_can_go_back_is_a_usage_error_not_a_traceback(
    ops: Ops, command: tuple[str, ...]
) -> None:
    ops.add("j-1")

    result = ops.run(*command)

    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    age = command[2]
    assert result.stderr.splitlines()[-1].endswith(
        f"{age!r} is longer than 100 years: no job is that old"
    ), result.stderr
    assert ops.status("j-1") is JobStatus.QUEUED


@pytest.mark.parametrize(
    "since", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "1969-12-31T23:00:00Z"]
)
def test_a_since_no_date_can_hold_is_a_usage_error_not_a_traceback(ops: Ops, since: str) -> None:
    result = ops.run("list", "--enqueued-since", since)

    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1].endswith(
        f"{since!r} is not between 1970-01-01 and 9999-12-31 in UTC"
    ), result.stderr


def test_the_commands_of_an_app_without_background_jobs_say_how_to_install_them() -> None:
    plain = Celery("plain", broker="memory://", set_as_current=False)
    install_jobs(plain, jobs=[], lock=InMemoryLock(FixedClock(NOW)), environ={})

    for command in COMMANDS:
        result = invoke(plain, *command)

        assert result.exit_code == 2, command
        assert "install_background_jobs" in result.output


@pytest.mark.parametrize(
    ("setting", "value", "problem"),
    [
        ("ddd_celery_redis_uri", "redis://x", "ddd_celery_redis_uri: not a setting of ddd_celery"),
        ("ddd_celery_grace_ms", "30s", "ddd_celery_grace_ms: Input should be a valid integer"),
        ("accept_content", ["json", "pickle"], "accept_content=['json', 'pickle'] allows pickle"),
    ],
)
def test_each_command_refuses_a_configuration_that_cannot_be_used_in_one_line(
    app: Celery, setting: str, value: object, problem: str
) -> None:
    """The store is given to ``install_background_jobs``, but a typo in a setting is no less
    a typo: every process of the app refuses it, the CLI too."""
    app.conf.update({setting: value})

    for command in COMMANDS:
        result = invoke(app, *command)

        assert result.exit_code == 1, command
        [line] = result.output.splitlines()
        assert line.startswith("ddd_celery refuses the configuration: "), line
        assert problem in line
