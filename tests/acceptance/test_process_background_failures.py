"""A failed background attempt as Celery sees it, on real ``celery worker`` and ``beat``.

The app is ``background_failures_app`` (``RedisJobStore``, the relay in beat, a prefork worker),
whose Celery signals (``task_postrun``, ``task_retry``, ``task_failure``, ``task_success``)
write each task's end to Redis. An attempt that will be retried ends its task as Celery's own
retries do (``RETRY``, ``task_retry``, the INFO "retry" line); only the attempt that leaves the
job dead is a ``FAILURE``, whose traceback holds the job's frames. The attempts of one job share
its id as ``root_id`` and count their ``retries``. Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from background_failures_jobs import (
    JOBS,
    MAX_ATTEMPTS,
    SECRET,
    AlwaysFailsJob,
    FailsTwiceJob,
)
from celery import Celery
from process_support import HERE, AppProcess, deployed, stop_all, wait_until
from redis import Redis
from services import REDIS_URL

from ddd_celery.background import JobStatus, StoredJobQueue
from ddd_celery.celery.background import CeleryJobPublisher
from ddd_celery.kernel import ContextVarExecutionScope, SystemClock, UuidGenerator
from ddd_celery.redis.job_store import RedisJobStore

pytestmark = pytest.mark.processes

APP = "background_failures_app"
WAIT_S = 60


@dataclass
class Failures:
    """One test's worker and beat, its store, and what Celery's signals wrote."""

    directory: Path
    client: Redis
    messages: bool
    prefix: str = field(default_factory=lambda: f"test:procfail:{uuid.uuid4().hex}:")
    processes: list[AppProcess] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.store = RedisJobStore(self.client, prefix=f"{self.prefix}store:")
        self.sender = Celery("sender", broker=REDIS_URL, set_as_current=False)
        self.sender.conf.update(broker_transport_options={"global_keyprefix": self.prefix})
        self.queue = StoredJobQueue(
            store=self.store,
            clock=SystemClock(),
            ids=UuidGenerator(),
            scope=ContextVarExecutionScope(),
            publisher=CeleryJobPublisher(self.sender),
            declarations=JOBS,
        )
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
            "DDD_TEST_BROKER_URL": REDIS_URL,
            "DDD_TEST_PREFIX": self.prefix,
            "DDD_TEST_TRACEBACK_MESSAGES": "1" if self.messages else "0",
        }
        worker = [
            "worker", "-l", "INFO", "-P", "prefork", "-c", "1", "-Q", "procfail",
            "-n", f"failures-{uuid.uuid4().hex[:8]}@%h",
            "--without-mingle", "--without-gossip", "--without-heartbeat",
        ]  # fmt: skip
        self.worker = self._spawn("worker", worker, env)
        self._spawn("beat", ["beat", "-l", "INFO"], env)

    def ends(self, job_id: str) -> list[dict[str, Any]]:
        """The ``task_postrun`` of each task that woke ``job_id``, in order."""
        return [line for line in self._read("ends") if line["job_id"] == job_id]

    def signals(self, job_id: str) -> list[dict[str, Any]]:
        return [line for line in self._read("signals") if line["job_id"] == job_id]

    def wait_for_ends(self, job_id: str, count: int) -> list[dict[str, Any]]:
        wait_until(
            lambda: len(self.ends(job_id)) >= count,
            WAIT_S,
            f"{count} tasks of job {job_id} to end\n{self.logs()}",
        )
        return self.ends(job_id)

    def logs(self) -> str:
        return "\n".join(f"----- {p.name}\n{p.output()[-4000:]}" for p in self.processes)

    def close(self) -> None:
        stop_all(self.processes)
        self.sender.close()
        for key in self.client.scan_iter(match=f"{self.prefix}*"):
            self.client.delete(key)

    def _read(self, name: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.client.lrange(f"{self.prefix}{name}", 0, -1)]

    def _spawn(self, name: str, args: list[str], env: dict[str, str]) -> AppProcess:
        process = AppProcess(APP, name, args, env, self.directory / f"{name}.log")
        self.processes.append(process)
        return process


@pytest.fixture
def failures(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Failures]:
    with deployed(lambda client: Failures(tmp_path, client, messages=request.param)) as deployment:
        yield deployment


def task_lines(log: str, job_id: str, ends: list[dict[str, Any]]) -> list[str]:
    """The worker's log lines about the tasks that woke ``job_id``."""
    task_ids = {end["task_id"] for end in ends}
    return [line for line in log.splitlines() if any(t in line for t in task_ids)]


@pytest.mark.parametrize("failures", [True], indirect=True)
def test_a_job_failing_twice_then_succeeding_is_retry_retry_success_linked_by_its_id(
    failures: Failures,
) -> None:
    job_id = failures.queue.enqueue(FailsTwiceJob, {})

    ends = failures.wait_for_ends(job_id, 3)
    job = failures.store.find(job_id, tenant_id=None)
    log = failures.worker.output()

    assert [end["state"] for end in ends] == ["RETRY", "RETRY", "SUCCESS"], failures.logs()
    assert [end["retries"] for end in ends] == [0, 1, 2]
    assert {end["root_id"] for end in ends} == {job_id}
    assert len({end["task_id"] for end in ends}) == 3  # each attempt a wake-up of its own
    signals = failures.signals(job_id)
    assert [line["signal"] for line in signals] == ["retry", "retry", "success"]
    for retry in signals[:2]:
        assert retry["reason_type"] == "AttemptFailedError"
        assert "failed with UNEXPECTED_ERROR (ValueError), retried at" in retry["reason"]
        assert SECRET not in retry["reason"]
        assert "charge_the_card" in retry["traceback"]  # the job's own frame
        assert SECRET in retry["traceback"]  # chained to the job's error: its message
    lines = task_lines(log, job_id, ends)
    assert len([line for line in lines if " retry: " in line and "INFO/" in line]) == 2, lines
    assert not [line for line in lines if "raised unexpected" in line or "ERROR/" in line], lines
    assert job is not None
    assert (job.status, job.attempts) == (JobStatus.SUCCEEDED, 3)
    hostnames = {end["hostname"] for end in ends}
    assert [attempt.worker for attempt in job.history] == [hostnames.pop()] * 3


@pytest.mark.parametrize("failures", [True, False], indirect=True, ids=["messages", "no-messages"])
def test_a_job_exhausting_its_attempts_is_retried_then_one_failure_with_the_job_s_frames(
    failures: Failures,
) -> None:
    job_id = failures.queue.enqueue(AlwaysFailsJob, {})

    ends = failures.wait_for_ends(job_id, MAX_ATTEMPTS)
    wait_until(
        lambda: "raised unexpected" in failures.worker.output(), WAIT_S, "the failure's log line"
    )
    job = failures.store.find(job_id, tenant_id=None)
    log = failures.worker.output()

    assert [end["state"] for end in ends] == ["RETRY", "RETRY", "FAILURE"], failures.logs()
    assert [end["retries"] for end in ends] == [0, 1, 2]
    assert {end["root_id"] for end in ends} == {job_id}
    signals = failures.signals(job_id)
    assert [line["signal"] for line in signals] == ["retry", "retry", "failure"]
    failure = signals[-1]
    assert failure["exception_type"] == "AttemptsExhaustedError"
    assert failure["exception"] == (
        f"procfail.always {job_id} attempt 3/3 failed with UNEXPECTED_ERROR (ValueError): dead"
    )
    assert "charge_the_card" in failure["traceback"]
    assert 'background_failures_jobs.py", line' in failure["traceback"]
    lines = task_lines(log, job_id, ends)
    unexpected = [line for line in lines if "raised unexpected" in line]
    assert len(unexpected) == 1, lines
    assert ends[-1]["task_id"] in unexpected[0]
    assert "ERROR/" in unexpected[0]
    assert len([line for line in lines if " retry: " in line]) == 2, lines
    assert job is not None
    assert (job.status, job.attempts) == (JobStatus.DEAD, MAX_ATTEMPTS)
    dead = [line for line in log.splitlines() if "Background job dead" in line]
    assert len(dead) == 1, log[-3000:]
    assert f"job_id={job_id}" in dead[0]  # the fields, in an app with no scheduled job too
    assert f"correlation_id={job_id}" in dead[0]
    if failures.messages:
        assert SECRET in failure["traceback"]
        assert SECRET in log  # Celery's traceback of the failure shows the job's error
        assert re.search(rf"ValueError: {SECRET}", log)
    else:
        assert all(SECRET not in json.dumps(line) for line in signals)
        assert SECRET not in log
        assert "ValueError" in failure["traceback"]  # its type, in the stand-in's message
