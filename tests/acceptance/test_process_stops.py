"""How real processes stop: refusing to start, a beat stopped mid-send, a worker's grace."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import threading
import time
from datetime import UTC, datetime

import pytest
from celery import Celery
from process_support import STOP_S, Deployment, parse, wait_until
from services import REDIS_URL

from ddd_celery.celery import OccurrenceMessage
from ddd_celery.redis import RedisJobCheckpoints, RedisJobRunState

pytestmark = pytest.mark.processes

EVERY_SECOND = "proc.every-second"


def test_a_worker_and_a_beat_refuse_to_start_once_the_configuration_allows_pickle(
    deploy: Deployment,
) -> None:
    """``install_jobs`` refused pickle; a ``conf.update`` after it turns it on anyway."""
    env = deploy.environment({EVERY_SECOND: {"enabled": True}})
    env["DDD_TEST_CONF_AFTER"] = json.dumps({"accept_content": ["json", "pickle"]})
    env["C_FORCE_ROOT"] = "1"  # as root, Celery's own refusal of pickle would come first
    worker = deploy.worker(env, pool="solo")
    beat = deploy.beat(env)

    wait_until(lambda: not worker.alive and not beat.alive, 40, "both processes to refuse")

    for process in (worker, beat):
        assert process.returncode not in (None, 0), deploy.logs()
        output = process.output()
        assert "ddd_celery refuses to start" in output, deploy.logs()
        assert "accept_content" in output, deploy.logs()
    assert deploy.ran(EVERY_SECOND) == []


class SilentBroker:
    """A TCP port that accepts connections and never answers, as a broker that hangs."""

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self.url = f"redis://127.0.0.1:{self._server.getsockname()[1]}/0"
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                connection, _ = self._server.accept()
                self._held.append(connection)

    def close(self) -> None:
        self._server.close()
        for connection in self._held:
            connection.close()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_a_beat_stopped_while_its_send_hangs_records_the_occurrence_and_frees_the_job(
    deploy: Deployment, signum: int
) -> None:
    broker = SilentBroker()
    try:
        env = deploy.environment({EVERY_SECOND: {"enabled": True}})
        env["DDD_TEST_SEND_TO"] = broker.url
        beat = deploy.beat(env)
        run_state = RedisJobRunState(deploy.records, prefix=f"{deploy.prefix}run:")
        wait_until(
            lambda: (
                "Sending due task proc.every-second" in beat.output()
                and run_state.running(EVERY_SECOND) is not None
            ),
            30,
            "beat to claim an occurrence and hang in its send",
        )
        sending = run_state.running(EVERY_SECOND)
        time.sleep(1.5)  # still there: the send hangs, beat handles nothing else
        assert run_state.running(EVERY_SECOND) == sending, deploy.logs()

        beat.signal(signum)
        wait_until(lambda: not beat.alive, STOP_S, "beat to stop")
    finally:
        broker.close()

    assert run_state.running(EVERY_SECOND) is None, deploy.logs()
    assert sending is not None
    [aborted] = deploy.outcomes(EVERY_SECOND, "failed")
    assert parse(aborted["scheduled_at"]) == sending, deploy.logs()
    assert aborted["error_code"] == "JOB_ABORTED"
    assert deploy.ran(EVERY_SECOND) == []
    checkpoint = RedisJobCheckpoints(deploy.records, prefix=f"{deploy.prefix}checkpoint:")
    assert checkpoint.read(EVERY_SECOND) == sending, deploy.logs()


UNTIL_ABORTED = "proc.until-aborted"
GRACE_MS = 2_000


@pytest.mark.parametrize("pool", ["solo", "threads", "prefork"])
def test_a_worker_stopped_gives_its_run_the_grace_then_aborts_and_records_it_before_exiting(
    deploy: Deployment, pool: str
) -> None:
    """Celery's warm shutdown would wait the whole minute the job takes; on prefork the run is
    in a child, which the main process tells."""
    env = deploy.environment({UNTIL_ABORTED: {"enabled": True}}, sleep_s=60)
    env["DDD_TEST_GRACE_MS"] = str(GRACE_MS)
    worker = deploy.worker(env, pool=pool)
    sender = Celery("sender", broker=REDIS_URL, set_as_current=False)
    sender.conf.update(broker_transport_options={"global_keyprefix": deploy.prefix})
    midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    try:
        sender.send_task(
            UNTIL_ABORTED,
            kwargs=OccurrenceMessage(midnight, "corr-stop").to_kwargs(),
            queue=deploy.queue,
            serializer="json",
        )
    finally:
        sender.close()
    started = f"{deploy.prefix}started:{UNTIL_ABORTED}"
    wait_until(lambda: deploy.records.llen(started) == 1, 30, "the run to start")

    stopped_at = time.time()
    worker.signal(signal.SIGTERM)
    wait_until(lambda: not worker.alive, 20, "the worker to exit once the grace passed")

    [outcome] = deploy.outcomes(UNTIL_ABORTED)
    assert (outcome["outcome"], outcome["error_code"]) == ("failed", "JOB_ABORTED"), outcome
    [run] = deploy.ran(UNTIL_ABORTED)
    assert outcome["pid"] == run["pid"]  # recorded where it ran: a prefork child is told too
    assert (run["aborted"], run["reason"]) == (True, "JobAbortedError"), run
    assert run["ended"] - stopped_at >= GRACE_MS / 1000 - 0.2, (run, stopped_at)
    assert outcome["duration_ms"] >= GRACE_MS, outcome
