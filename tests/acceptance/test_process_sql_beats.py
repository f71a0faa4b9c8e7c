"""Three real ``celery beat`` and a worker on RabbitMQ with ``SqlLock`` and ``SqlJobRunState`` on
PostgreSQL, and no Redis in the deployment: each instant of a job every second is sent (and
run) exactly once; while PostgreSQL is down,
nothing is sent and every beat records ``failed``, ``JOB_LOCK_UNAVAILABLE``; when it is back,
they send again, without help.

PostgreSQL is a private cluster of this module's own (initdb into a temporary folder, on a free
port, run as the ``postgres`` user since initdb refuses root), stopped and started by the test:
the shared server other tests use is never touched. Each test routes to a queue of its own,
deleted at the end; the records go to the shared Redis under a prefix of the test's own.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from glob import glob
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from process_support import HERE, CeleryProcess, parse, seconds_between, stop_all, wait_until
from redis import Redis
from services import REDIS_URL
from sqlalchemy import create_engine

from ddd_celery.redis import connect
from ddd_celery.sql import create_tables

pytestmark = [pytest.mark.processes, pytest.mark.postgres]

RABBITMQ_URL = os.environ.get("RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672//")
JOB = "sqlbeat.every-second"
WATCH_S = 60
OUTAGE_S = 10


class PrivatePostgres:
    """A PostgreSQL cluster of the test's own, in a temporary folder, that it stops at will."""

    def __init__(self) -> None:
        found = sorted(glob("/usr/lib/postgresql/*/bin/pg_ctl"))
        assert found, "no PostgreSQL binaries under /usr/lib/postgresql/*/bin"
        self._bin = Path(found[-1]).parent
        self.directory = Path(tempfile.mkdtemp(prefix="ddd_celery_pg_"))
        shutil.chown(self.directory, "postgres", "postgres")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        self._run("initdb", "-D", str(self.directory / "data"), "--auth=trust", "-U", "postgres")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1"
        data = str(self.directory / "data")
        log = str(self.directory / "server.log")
        self._run("pg_ctl", "-D", data, "-o", options, "-l", log, "-w", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.directory / "data"), "-m", "fast", "-w", "stop")

    def close(self) -> None:
        if (self.directory / "data" / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.directory / "data"), "-m", "immediate", "stop")
        shutil.rmtree(self.directory, ignore_errors=True)

    def _run(self, program: str, *args: str) -> None:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", str(self._bin / program), *args],
            check=True,
            capture_output=True,
            timeout=60,
        )


@pytest.fixture(scope="module")
def postgres() -> Iterator[PrivatePostgres]:
    server = PrivatePostgres()
    try:
        server.start()
        yield server
    finally:
        server.close()


class BeatProcess(CeleryProcess):
    """A ``celery -A sql_beat_app <command>`` subprocess."""

    app = "sql_beat_app"


@dataclass
class Beats:
    """Three beats of one test, the records they write, and how to read them."""

    directory: Path
    records: Redis
    postgres: PrivatePostgres
    prefix: str = field(default_factory=lambda: f"test:sqlbeat:{uuid.uuid4().hex}:")
    processes: list[BeatProcess] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.queue = f"sqlbeat-{uuid.uuid4().hex[:12]}"
        self.table_prefix = f"test_{uuid.uuid4().hex[:12]}_"
        engine = create_engine(self.postgres.url)
        create_tables(engine, self.table_prefix)
        engine.dispose()

    def start(self, count: int) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
            "DDD_TEST_BROKER_URL": RABBITMQ_URL,
            "DDD_TEST_SQL_URL": self.postgres.url,
            "DDD_TEST_SQL_PREFIX": self.table_prefix,
            "DDD_TEST_QUEUE": self.queue,
            "DDD_TEST_RECORDS_URL": REDIS_URL,
            "DDD_TEST_PREFIX": self.prefix,
        }
        for index in range(count):
            name = f"beat{index + 1}"
            log = self.directory / f"{name}.log"
            self.processes.append(BeatProcess(name, ["beat", "-l", "INFO"], env, log))
        worker = [
            "worker", "-l", "INFO", "-P", "solo", "-Q", self.queue, "-n", f"{self.queue}@%h",
            "--without-mingle", "--without-gossip", "--without-heartbeat",
        ]  # fmt: skip
        self.processes.append(BeatProcess("worker", worker, env, self.directory / "worker.log"))

    def read(self, name: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.records.lrange(f"{self.prefix}{name}", 0, -1)]

    def ran(self) -> list[datetime]:
        return [parse(line["scheduled_at"]) for line in self.read("ran")]

    def sent(self) -> list[datetime]:
        return [parse(line["scheduled_at"]) for line in self.read("sent") if line["task"] == JOB]

    def outcomes(self, outcome: str) -> list[dict[str, Any]]:
        return [line for line in self.read("outcomes") if line["outcome"] == outcome]

    def every_beat_is_up(self) -> bool:
        """An instant was sent by one beat and found locked by the others."""
        locked = Counter(line["scheduled_at"] for line in self.outcomes("skipped-locked"))
        return 2 in locked.values()

    def logs(self) -> str:
        return "\n".join(f"----- {p.name}\n{p.output()[-3000:]}" for p in self.processes)

    def close(self) -> None:
        stop_all(self.processes)
        for key in self.records.scan_iter(match=f"{self.prefix}*"):
            self.records.delete(key)
        broker = Celery("cleanup", broker=RABBITMQ_URL, set_as_current=False)
        with broker.connection_for_write() as connection:
            connection.default_channel.queue_delete(self.queue)
        broker.close()


@pytest.fixture
def beats(tmp_path: Path, postgres: PrivatePostgres) -> Iterator[Beats]:
    records = connect(REDIS_URL)
    deployment = Beats(tmp_path, records, postgres)
    try:
        yield deployment
    finally:
        deployment.close()
        records.close()


def test_three_beats_on_rabbitmq_and_postgresql_send_each_instant_exactly_once(
    beats: Beats,
) -> None:
    beats.start(3)
    wait_until(beats.every_beat_is_up, 30, f"an instant seen by the three beats\n{beats.logs()}")
    watched_from = datetime.now(UTC)
    time.sleep(WATCH_S)
    watched_to = datetime.now(UTC) - timedelta(seconds=1)

    assert all(beat.alive for beat in beats.processes), beats.logs()
    instants = seconds_between(watched_from, watched_to)
    sent = Counter(beats.sent())
    locked = Counter(parse(line["scheduled_at"]) for line in beats.outcomes("skipped-locked"))
    assert len(instants) >= WATCH_S - 2
    ran = Counter(beats.ran())
    assert [t for t in instants if (sent[t], locked[t], ran[t]) != (1, 2, 1)] == []
    assert set(sent.values()) == {1}, "an instant was sent twice"
    assert set(ran.values()) == {1}, "an instant ran twice"
    assert beats.outcomes("skipped-overlap") == [], "the worker's ends reached every beat"


def test_while_postgresql_is_down_nothing_is_sent_and_the_beats_recover_without_help(
    beats: Beats, postgres: PrivatePostgres
) -> None:
    beats.start(3)
    wait_until(beats.every_beat_is_up, 30, f"an instant seen by the three beats\n{beats.logs()}")
    postgres.stop()
    stopped_at = datetime.now(UTC)
    time.sleep(OUTAGE_S)
    restarted_at = datetime.now(UTC)
    postgres.start()
    back_at = datetime.now(UTC)
    wait_until(
        lambda: any(t > back_at + timedelta(seconds=2) for t in beats.sent()),
        20,
        f"an instant sent after the restart\n{beats.logs()}",
    )
    time.sleep(2)

    assert all(beat.alive for beat in beats.processes), beats.logs()
    down = seconds_between(stopped_at + timedelta(seconds=1), restarted_at - timedelta(seconds=1))
    sent = Counter(beats.sent())
    failed = Counter(
        parse(line["scheduled_at"])
        for line in beats.outcomes("failed")
        if line["error_code"] == "JOB_LOCK_UNAVAILABLE"
    )
    assert len(down) >= OUTAGE_S - 3
    assert [t for t in down if sent[t] != 0] == [], "sent while the lock store was down"
    assert [t for t in down if failed[t] != 3] == [], "a beat did not record the failure"
    after = [t for t in sent if t > back_at + timedelta(seconds=2)]
    assert after, "nothing was sent after PostgreSQL came back"
    assert set(sent.values()) == {1}, "an instant was sent twice"
