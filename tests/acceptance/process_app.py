"""The Celery app the process tests start with ``celery -A process_app beat|worker``.

Written as a project writes its app module: jobs declared with ``@scheduled``, one
``install_jobs`` call. What a test varies comes from the environment, as a deployment's does:

``DDD_TEST_BROKER_URL``   the broker, and where the jobs and ``on_run`` write their records
``DDD_TEST_STORE_URL``    the Redis of the lock, run state, checkpoints and last runs (default:
                          the broker)
``DDD_TEST_PREFIX``       the test's key prefix, for every key of every process
``DDD_TEST_QUEUE``        the queue every job is routed to
``DDD_TEST_SETTINGS``     job settings as JSON: which jobs are on, their options
``DDD_TEST_LATE_AFTER_MS`` the scheduler's ``late_after_ms`` (default 60 s)
``DDD_TEST_SLEEP_S``      how long the slow jobs take
``DDD_TEST_SEND_TO``      Celery's broker, when it is not where the records go (one that never
                          answers, say)
``DDD_TEST_CLOCK_SHIFT_MS`` how far this process's Clock is ahead (negative: behind)
``DDD_TEST_HOLD_AFTER_LOCK`` ``1``: once beat takes the lock of an occurrence, note its key in
                          ``<prefix>held`` and hang there, as a beat that dies holding it
``DDD_TEST_CONF_AFTER``   JSON ``app.conf`` settings applied after ``install_jobs``
``DDD_TEST_GRACE_MS``     ``ddd_celery_grace_ms``

Every job is declared off; a test switches on the ones it watches through the settings.
Records are JSON lines in Redis lists: ``<prefix>ran:<job>`` written by the job itself,
``<prefix>outcomes`` written by ``on_run`` in whichever process handled the occurrence,
``<prefix>task-failures`` written by a ``task_failure`` receiver in the worker.
"""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime, timedelta

from celery import Celery
from celery.signals import task_failure

from ddd_celery.celery import install_jobs
from ddd_celery.declarations import JobExecution, declaration_of, scheduled
from ddd_celery.kernel import Clock, DomainError, Lease, Lock, iso_ms
from ddd_celery.redis import (
    RedisJobCheckpoints,
    RedisJobLastRuns,
    RedisJobRunState,
    RedisLock,
    connect,
)
from ddd_celery.scheduling.observability import RunDetail
from ddd_celery.scheduling.outcomes import JobRun

BROKER_URL = os.environ["DDD_TEST_BROKER_URL"]
STORE_URL = os.environ.get("DDD_TEST_STORE_URL", BROKER_URL)
PREFIX = os.environ["DDD_TEST_PREFIX"]
QUEUE = os.environ["DDD_TEST_QUEUE"]
SLEEP_S = float(os.environ.get("DDD_TEST_SLEEP_S", "0"))
SEND_TO = os.environ.get("DDD_TEST_SEND_TO", BROKER_URL)
CLOCK_SHIFT = timedelta(milliseconds=int(os.environ.get("DDD_TEST_CLOCK_SHIFT_MS", "0")))
HOLD_AFTER_LOCK = os.environ.get("DDD_TEST_HOLD_AFTER_LOCK") == "1"

records = connect(BROKER_URL)
store = connect(STORE_URL)


def note(execution: JobExecution, job: str, **more: object) -> None:
    """The job's own record of a run: when it was due, when it started, in which process."""
    line = {
        "scheduled_at": iso_ms(execution.scheduled_at),
        "started_at": iso_ms(execution.started_at),
        "pid": os.getpid(),
        **more,
    }
    records.rpush(f"{PREFIX}ran:{job}", json.dumps(line))


@scheduled("proc.every-second", every="1s", enabled=False)
class EverySecondJob:
    def run(self, execution: JobExecution) -> None:
        note(execution, "proc.every-second")


@scheduled("proc.every-minute", cron="* * * * *", enabled=False)
class EveryMinuteJob:
    def run(self, execution: JobExecution) -> None:
        note(execution, "proc.every-minute")


# overlap="queue": a beat whose start-up ends a few ms before a whole second sends the latest
# instant due as the catch-up just before the next one is due; that next one then waits for the
# catch-up's run instead of being skipped, so the restart rule is what test_process_restarts sees.
@scheduled("proc.catch-up-once", every="1s", missed="run-once", overlap="queue", enabled=False)
class CatchUpOnceJob:
    def run(self, execution: JobExecution) -> None:
        note(execution, "proc.catch-up-once")


@scheduled("proc.catch-up-skip", every="1s", overlap="queue", enabled=False)
class CatchUpSkipJob:
    def run(self, execution: JobExecution) -> None:
        note(execution, "proc.catch-up-skip")


def take_time(execution: JobExecution, job: str) -> None:
    """Sleep ``SLEEP_S`` ignoring the signal, and note when the run really began and ended."""
    began = time.time()
    try:
        time.sleep(SLEEP_S)
    finally:
        note(execution, job, began=began, ended=time.time())


@scheduled("proc.until-aborted", every="1d", enabled=False)
class UntilAbortedJob:
    """Sent by the test itself: works ``SLEEP_S`` unless its signal is aborted first."""

    def run(self, execution: JobExecution) -> None:
        began = time.time()
        records.rpush(f"{PREFIX}started:proc.until-aborted", str(began))
        aborted = execution.signal.wait(SLEEP_S)
        reason = execution.signal.reason
        note(
            execution,
            "proc.until-aborted",
            began=began,
            ended=time.time(),
            aborted=aborted,
            reason=None if reason is None else type(reason).__name__,
        )
        execution.signal.throw_if_aborted()


@scheduled("proc.half-second", every="500ms", enabled=False)
class HalfSecondJob:
    def run(self, execution: JobExecution) -> None:
        note(execution, "proc.half-second")


@scheduled("proc.slow-skip", every="1s", overlap="skip", enabled=False)
class SlowSkipJob:
    def run(self, execution: JobExecution) -> None:
        take_time(execution, "proc.slow-skip")


@scheduled("proc.slow-queue", every="1s", overlap="queue", enabled=False)
class SlowQueueJob:
    def run(self, execution: JobExecution) -> None:
        take_time(execution, "proc.slow-queue")


@scheduled("proc.outlive", every="1d", timeout_ms=1_000, enabled=False)
class OutliveJob:
    """Sent by the test itself: it outlives its timeout and ignores its signal."""

    def run(self, execution: JobExecution) -> None:
        take_time(execution, "proc.outlive")


SECRET = "card 4242 4242 4242 4242 declined"
"""What the failing jobs' errors say: data, which no log line may quote."""


@scheduled("proc.fail", every="1d", enabled=False)
class FailJob:
    """Sent by the test itself: raises an error whose message quotes data."""

    def run(self, execution: JobExecution) -> None:
        note(execution, "proc.fail")
        raise ValueError(SECRET)


@scheduled("proc.refuse", every="1d", enabled=False)
class RefuseJob:
    """Sent by the test itself: the model refuses, with a message that quotes data."""

    def run(self, execution: JobExecution) -> None:
        note(execution, "proc.refuse")
        raise DomainError("REMINDER_NOT_DUE", SECRET)


@task_failure.connect(weak=False)
def keep_task_failure(sender: object = None, exception: object = None, **_: object) -> None:
    """What Celery's failure path saw: the task, and the exception it failed with."""
    line = {
        "task": getattr(sender, "name", None),
        "type": type(exception).__name__,
        "code": getattr(exception, "code", None),
        "message": str(exception),
        "pid": os.getpid(),
    }
    records.rpush(f"{PREFIX}task-failures", json.dumps(line))


def keep_outcome(run: JobRun, error: BaseException | None, detail: RunDetail) -> None:
    line = {
        "job": run.job,
        "outcome": run.outcome.value,
        "scheduled_at": iso_ms(run.scheduled_at),
        "error_code": run.error_code,
        "duration_ms": run.duration_ms,
        "at": iso_ms(datetime.now(UTC)),
        "pid": os.getpid(),
    }
    records.rpush(f"{PREFIX}outcomes", json.dumps(line))


class ShiftedClock(Clock):
    """This machine's clock moved by ``DDD_TEST_CLOCK_SHIFT_MS``: a server whose NTP lags."""

    def now(self) -> datetime:
        return datetime.now(UTC) + CLOCK_SHIFT


class HoldingLock(Lock):
    """A lock that, once taken, notes its key and hangs: the test kills the process there."""

    def __init__(self, lock: Lock) -> None:
        self._lock = lock

    def acquire(self, key: str, ttl_ms: int) -> Lease | None:
        lease = self._lock.acquire(key, ttl_ms)
        if lease is not None:
            records.rpush(f"{PREFIX}held", key)
            time.sleep(3600)
        return lease

    def release(self, lease: Lease) -> bool:
        return self._lock.release(lease)


JOBS = [
    EverySecondJob,
    UntilAbortedJob,
    HalfSecondJob,
    EveryMinuteJob,
    CatchUpOnceJob,
    CatchUpSkipJob,
    SlowSkipJob,
    SlowQueueJob,
    OutliveJob,
    FailJob,
    RefuseJob,
]

clock = ShiftedClock()
lock: Lock = RedisLock(store, prefix=PREFIX, clock=clock)
app = Celery("process_app", broker=SEND_TO)
app.conf.update(
    broker_transport_options={"global_keyprefix": PREFIX},
    broker_connection_retry_on_startup=True,
    task_default_queue=QUEUE,
)
install_jobs(
    app,
    jobs=JOBS,
    lock=HoldingLock(lock) if HOLD_AFTER_LOCK else lock,
    clock=clock,
    run_state=RedisJobRunState(store, prefix=f"{PREFIX}run:"),
    checkpoints=RedisJobCheckpoints(store, prefix=f"{PREFIX}checkpoint:"),
    last_runs=RedisJobLastRuns(store, prefix=f"{PREFIX}last-run:"),
    settings=json.loads(os.environ.get("DDD_TEST_SETTINGS", "{}")),
    late_after_ms=int(os.environ.get("DDD_TEST_LATE_AFTER_MS", "60000")),
    on_run=keep_outcome,
    routes={declaration_of(job).name: QUEUE for job in JOBS},
)
if "DDD_TEST_GRACE_MS" in os.environ:
    app.conf.ddd_celery_grace_ms = int(os.environ["DDD_TEST_GRACE_MS"])
app.conf.update(json.loads(os.environ.get("DDD_TEST_CONF_AFTER", "{}")))
