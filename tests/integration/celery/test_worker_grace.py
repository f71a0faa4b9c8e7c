"""The grace of a stopping worker, in process: Celery's ``worker_shutting_down`` starts it.

``ddd_celery_grace_ms`` is read from ``app.conf`` like every ``ddd_celery_*`` setting. Once the
worker stops, each run in progress of the process gets the grace, then its signal is aborted
with a ``JobAbortedError`` and the run is recorded ``failed``, ``JOB_ABORTED``, at once.
The process test stops real workers with SIGTERM.
"""

from __future__ import annotations

import signal
import threading
from datetime import UTC, datetime
from typing import Any

import pytest
from celery.signals import worker_process_init, worker_shutting_down
from celery_support import AppFactory, Runs
from probe_jobs import SYNC, Probe, SyncProbeJob

from ddd_celery.celery import OccurrenceMessage, install_jobs, jobs_of
from ddd_celery.celery import shutdown as shutdown_module
from ddd_celery.celery import tasks as tasks_module
from ddd_celery.celery.config import JobsConfigError
from ddd_celery.celery.shutdown import RunsInProgress
from ddd_celery.celery.tasks import run_message
from ddd_celery.kernel import InMemoryLock, SystemClock
from ddd_celery.scheduling.errors import JobAbortedError

HOUR = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
WAIT_S = 10.0


@pytest.fixture
def runs_in_progress(monkeypatch: pytest.MonkeyPatch) -> RunsInProgress:
    """A process's runs of its own: stopping it must not stop the rest of the test session."""
    fresh = RunsInProgress()
    monkeypatch.setattr(shutdown_module, "RUNS", fresh)
    monkeypatch.setattr(tasks_module, "RUNS", fresh)
    return fresh


def wire(make_app: AppFactory, probe: Probe, runs: Runs, **conf: Any) -> Any:
    app = make_app(**conf)
    install_jobs(
        app,
        jobs=[SyncProbeJob],
        providers={Probe: lambda: probe},
        lock=InMemoryLock(SystemClock()),
        on_run=runs,
        environ={},
    )
    return app


def test_the_grace_is_30_seconds_unless_app_conf_says_otherwise(
    make_app: AppFactory, runs: Runs
) -> None:
    default = wire(make_app, Probe(), runs)
    configured = wire(make_app, Probe(), runs, ddd_celery_grace_ms=5_000)

    assert jobs_of(default).grace_ms == 30_000
    assert jobs_of(configured).grace_ms == 5_000


@pytest.mark.parametrize("value", [-1, "30s", 1.5, True, 25 * 3_600_000])
def test_a_grace_that_cannot_be_used_is_refused_naming_the_setting(
    make_app: AppFactory, runs: Runs, value: object
) -> None:
    app = wire(make_app, Probe(), runs, ddd_celery_grace_ms=value)

    with pytest.raises(JobsConfigError, match="ddd_celery_grace_ms"):
        jobs_of(app)


def test_a_run_in_progress_when_the_worker_stops_is_aborted_after_the_grace_and_recorded(
    make_app: AppFactory, runs: Runs, runs_in_progress: RunsInProgress
) -> None:
    started, seen = threading.Event(), []

    def wait_for_the_signal(execution: Any) -> None:
        started.set()
        seen.append(execution.signal.wait(WAIT_S))
        execution.signal.throw_if_aborted()

    app = wire(make_app, Probe(behaviour=wait_for_the_signal), runs, ddd_celery_grace_ms=0)
    message = OccurrenceMessage(HOUR, "corr-1").to_kwargs()
    worker = threading.Thread(target=run_message, args=(app, SYNC, (), message))
    worker.start()
    assert started.wait(WAIT_S)

    worker_shutting_down.send(sender="worker@host", sig="SIGTERM", how="Warm", exitcode=0)
    [record] = runs.wait_for(1)
    worker.join(WAIT_S)

    assert (record.outcome, record.error_code, record.scheduled_at) == (
        "failed",
        "JOB_ABORTED",
        HOUR,
    )
    assert isinstance(runs.errors[0], JobAbortedError)
    assert seen == [True]  # the job saw its signal aborted, and returned
    assert not worker.is_alive()


def test_a_run_that_ends_within_the_grace_keeps_its_outcome(
    make_app: AppFactory, runs: Runs, runs_in_progress: RunsInProgress
) -> None:
    release = threading.Event()
    started = threading.Event()

    def finish_when_released(execution: Any) -> None:
        started.set()
        release.wait(WAIT_S)

    app = wire(make_app, Probe(behaviour=finish_when_released), runs, ddd_celery_grace_ms=60_000)
    message = OccurrenceMessage(HOUR, "corr-1").to_kwargs()
    worker = threading.Thread(target=run_message, args=(app, SYNC, (), message))
    worker.start()
    assert started.wait(WAIT_S)

    worker_shutting_down.send(sender="worker@host", sig="SIGTERM", how="Warm", exitcode=0)
    release.set()
    worker.join(WAIT_S)

    assert [(r.outcome, r.error_code) for r in runs.records] == [("succeeded", None)]


def test_a_task_on_a_thread_after_a_solo_pool_s_process_init_sets_no_handler_and_raises_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A solo pool sends ``worker_process_init`` in the worker's process; ``celery.contrib.
    testing`` then runs the tasks on a thread, where ``signal.signal`` raises."""
    monkeypatch.setattr(shutdown_module, "_in_child", [])
    before = signal.getsignal(shutdown_module.GRACE_SIGNAL)
    try:
        worker_process_init.send(sender=None)
        raised: list[BaseException] = []

        def prerun() -> None:
            try:
                shutdown_module.on_task_prerun()
            except BaseException as error:  # what the thread raised, asserted
                raised.append(error)

        thread = threading.Thread(target=prerun)
        thread.start()
        thread.join(WAIT_S)
        assert raised == []
        assert signal.getsignal(shutdown_module.GRACE_SIGNAL) is signal.SIG_IGN
        shutdown_module.on_task_prerun()  # the main thread of a prefork child: the grace's
        assert signal.getsignal(shutdown_module.GRACE_SIGNAL) is shutdown_module._start_grace
    finally:
        signal.signal(shutdown_module.GRACE_SIGNAL, before)
