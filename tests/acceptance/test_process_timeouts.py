"""A timeout on real workers: failed, JOB_TIMEOUT, once, its task failed, on prefork and solo."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from celery import Celery
from process_support import Deployment, wait_until
from services import REDIS_URL

from ddd_celery.celery import OccurrenceMessage

pytestmark = pytest.mark.processes

OUTLIVE = "proc.outlive"
SLEEP_S = 5.0


def test_a_run_past_its_timeout_is_failed_job_timeout_once_on_prefork_and_solo(
    deploy: Deployment,
) -> None:
    settings = {OUTLIVE: {"enabled": True}}
    queues = {pool: f"{deploy.prefix}{pool}" for pool in ("prefork", "solo")}
    for pool, queue in queues.items():
        env = deploy.environment(settings, sleep_s=SLEEP_S, queue=queue)
        deploy.worker(env, pool=pool, name=pool)
    sender = Celery("sender", broker=REDIS_URL, set_as_current=False)
    sender.conf.update(broker_transport_options={"global_keyprefix": deploy.prefix})
    # a real instant of every 1d: a worker refuses an instant no occurrence has
    at = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    for pool, queue in queues.items():
        message = OccurrenceMessage(at, f"corr-{pool}").to_kwargs()
        sender.send_task(OUTLIVE, kwargs=message, queue=queue, serializer="json")

    def tasks_returned() -> bool:
        return (
            all(
                "raised unexpected: ScheduledJobFailedError" in p.output() for p in deploy.processes
            )
            and len(deploy.ran(OUTLIVE)) == 2
        )

    try:
        wait_until(tasks_returned, 30, "both workers to end their task")
    finally:
        sender.close()

    workers = {process.name: process for process in deploy.processes}
    solo, prefork = workers["solo"], workers["prefork"]
    outcomes = {o["pid"] == solo.pid: o for o in deploy.outcomes(OUTLIVE)}
    runs = {line["pid"] == solo.pid: line for line in deploy.ran(OUTLIVE)}
    assert len(deploy.outcomes(OUTLIVE)) == 2, deploy.logs()
    for on_solo in (True, False):
        outcome = outcomes[on_solo]
        assert (outcome["outcome"], outcome["error_code"]) == ("failed", "JOB_TIMEOUT")
        assert 1_000 <= outcome["duration_ms"] < 2_500, outcome
    # prefork's soft time limit interrupts the job; on solo it goes on behind, unrecorded
    assert "Soft time limit (1.0s) exceeded" in prefork.output()
    assert runs[False]["ended"] - runs[False]["began"] < SLEEP_S - 1.5, deploy.logs()
    assert runs[True]["ended"] - runs[True]["began"] >= SLEEP_S, deploy.logs()
