"""Real ``celery`` processes for the process tests: start, kill, restart, and read their records.

Every process runs ``process_app`` with the test's environment, writes its output to a file of
the test's own directory (quoted when an assertion fails), and is ended when the test ends.
Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol, TypeVar

from redis import Redis
from services import REDIS_URL

from ddd_celery.redis import connect

HERE = Path(__file__).parent
STOP_S = 10.0
"""How long a process gets to stop on SIGTERM before it is killed."""


def parse(instant: str) -> datetime:
    return datetime.fromisoformat(instant)


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` every 100 ms; fail the test with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout}s for {what}")
        time.sleep(0.1)


def sleep_until_mid_second() -> None:
    """Wait for the middle of a second: beats tick on whole seconds, so none is mid-tick."""
    time.sleep((1.5 - time.time() % 1.0) % 1.0)


class CeleryProcess:
    """One ``celery -A <app> <command>`` subprocess and its output file: ``process_app``, or the
    ``app`` of a subclass (``AppProcess`` names it per process)."""

    app = "process_app"

    def __init__(self, name: str, args: list[str], env: Mapping[str, str], log: Path) -> None:
        self.name = name
        self._args = args
        self._env = dict(env)
        self.log = log
        self._process: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        with self.log.open("ab") as out:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", self.app, *self._args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self._env,
                cwd=HERE,
            )

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def returncode(self) -> int | None:
        """The exit status once the process ended, else None."""
        return None if self._process is None else self._process.poll()

    def signal(self, signum: int) -> None:
        """Send ``signum`` (SIGTERM, SIGINT...) and return at once; ``stop`` waits."""
        if self._process is not None:
            self._process.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL: nothing is flushed, nothing is released, as when a machine dies."""
        if self._process is not None:
            self._process.send_signal(signal.SIGKILL)
            self._process.wait(STOP_S)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not ended within ``STOP_S``."""
        if self.alive:
            self.signal(signal.SIGTERM)
        self._wait_or_kill()

    def _wait_or_kill(self) -> None:
        """Wait ``STOP_S`` for the end of a process told to stop, then SIGKILL it."""
        process = self._process
        if process is None or process.poll() is not None:
            return
        try:
            process.wait(STOP_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(STOP_S)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def stop_all(processes: Iterable[CeleryProcess]) -> None:
    """``stop`` every process, side by side: SIGTERM to all, then wait for each, so a test's
    teardown takes the shutdown of its slowest process, not the sum of them all."""
    processes = list(processes)
    for process in processes:
        if process.alive:
            process.signal(signal.SIGTERM)
    for process in processes:
        process._wait_or_kill()


class RedisServer:
    """A private ``redis-server`` a test may stop and start again: the shared one stays up."""

    def __init__(self, log: Path) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.log = log
        self._process: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        with self.log.open("ab") as out:
            self._process = subprocess.Popen(
                [
                    "redis-server",
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        client = connect(self.url)
        wait_until(lambda: _answers(client), 10, f"redis-server on port {self.port}")
        client.close()

    def kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGKILL)
            self._process.wait(STOP_S)


def _answers(client: Redis) -> bool:
    try:
        return bool(client.ping())
    except Exception:
        return False


@dataclass
class Deployment:
    """The processes of one test, the Redis keys they share, and what they recorded."""

    directory: Path
    records: Redis
    prefix: str = field(default_factory=lambda: f"test:processes:{uuid.uuid4().hex}:")
    processes: list[CeleryProcess] = field(default_factory=list)
    servers: list[RedisServer] = field(default_factory=list)

    @property
    def queue(self) -> str:
        return f"{self.prefix}jobs"

    def environment(
        self,
        settings: Mapping[str, Any],
        *,
        store_url: str | None = None,
        late_after_ms: int | None = None,
        sleep_s: float | None = None,
        queue: str | None = None,
    ) -> dict[str, str]:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
            "DDD_TEST_BROKER_URL": REDIS_URL,
            "DDD_TEST_PREFIX": self.prefix,
            "DDD_TEST_QUEUE": queue or self.queue,
            "DDD_TEST_SETTINGS": json.dumps(settings),
        }
        optional = {
            "DDD_TEST_STORE_URL": store_url,
            "DDD_TEST_LATE_AFTER_MS": late_after_ms,
            "DDD_TEST_SLEEP_S": sleep_s,
        }
        env.update({key: str(value) for key, value in optional.items() if value is not None})
        return env

    def beat(self, env: Mapping[str, str]) -> CeleryProcess:
        index = sum(1 for p in self.processes if p.name.startswith("beat")) + 1
        return self._spawn(f"beat{index}", ["beat", "-l", "INFO"], env)

    def worker(
        self, env: Mapping[str, str], *, pool: str, concurrency: int = 1, name: str = "worker"
    ) -> CeleryProcess:
        args = [
            "worker",
            "-l",
            "INFO",
            "-P",
            pool,
            "-c",
            str(concurrency),
            "-Q",
            env["DDD_TEST_QUEUE"],
            "-n",
            f"{name}-{uuid.uuid4().hex[:8]}@%h",
            "--without-mingle",
            "--without-gossip",
            "--without-heartbeat",
        ]
        return self._spawn(name, args, env)

    def redis_server(self) -> RedisServer:
        server = RedisServer(self.directory / f"redis-{len(self.servers) + 1}.log")
        self.servers.append(server)
        return server

    def ran(self, job: str) -> list[dict[str, Any]]:
        """The job's own records of its runs, in the order they were written."""
        return [json.loads(line) for line in self.records.lrange(f"{self.prefix}ran:{job}", 0, -1)]

    def instants_ran(self, job: str) -> list[datetime]:
        return [parse(line["scheduled_at"]) for line in self.ran(job)]

    def outcomes(self, job: str, outcome: str | None = None) -> list[dict[str, Any]]:
        """What ``on_run`` recorded for ``job`` in every process, optionally of one outcome."""
        lines = [json.loads(line) for line in self.records.lrange(f"{self.prefix}outcomes", 0, -1)]
        return [
            line
            for line in lines
            if line["job"] == job and (outcome is None or line["outcome"] == outcome)
        ]

    def jobs_list(self, env: Mapping[str, str]) -> dict[str, str]:
        """``celery -A process_app jobs list`` in a process of its own: each job's row, by name."""
        listed = subprocess.run(
            [sys.executable, "-m", "celery", "-A", "process_app", "jobs", "list"],
            capture_output=True,
            text=True,
            env=env,
            cwd=HERE,
            timeout=60,
            check=True,
        )
        rows = (line.split(maxsplit=1) for line in listed.stdout.splitlines()[1:])
        return {row[0]: row[1] for row in rows if len(row) == 2}

    def logs(self) -> str:
        """Every process's output, for the message of a failed assertion."""
        return "\n".join(f"----- {p.name}\n{p.output()[-4000:]}" for p in self.processes)

    def close(self) -> None:
        stop_all(self.processes)
        for server in self.servers:
            server.kill()
        for key in self.records.scan_iter(match=f"{self.prefix}*"):
            self.records.delete(key)

    def _spawn(self, name: str, args: list[str], env: Mapping[str, str]) -> CeleryProcess:
        process = CeleryProcess(name, args, env, self.directory / f"{name}.log")
        self.processes.append(process)
        return process


class _Closing(Protocol):
    def close(self) -> None: ...


_Deployed = TypeVar("_Deployed", bound=_Closing)


@contextmanager
def deployed(make: Callable[[Redis], _Deployed]) -> Iterator[_Deployed]:
    """What ``make`` deploys on a client of the real Redis (asked first: a Redis down fails the
    test before any process starts), closed with the client whatever the test did."""
    client = connect(REDIS_URL)
    client.ping()
    running = make(client)
    try:
        yield running
    finally:
        running.close()
        client.close()


def deployment(directory: Path) -> AbstractContextManager[Deployment]:
    return deployed(lambda records: Deployment(directory, records))


def seconds_between(start: datetime, end: datetime) -> list[datetime]:
    """Every whole second ``t`` with ``start <= t <= end``."""
    first = start.replace(microsecond=0)
    if first < start:
        first += timedelta(seconds=1)
    count = int((end - first).total_seconds()) + 1
    return [first + timedelta(seconds=i) for i in range(max(0, count))]


class AppProcess(CeleryProcess):
    """A ``celery -A <app> <command>`` subprocess of a test app other than ``process_app``."""

    def __init__(
        self, app: str, name: str, args: list[str], env: Mapping[str, str], log: Path
    ) -> None:
        self.app = app
        super().__init__(name, args, env, log)
