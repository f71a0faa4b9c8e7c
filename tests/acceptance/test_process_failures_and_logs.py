"""Real ``celery worker -l INFO`` and ``celery beat -l INFO`` processes, as a user runs them.

A failed run fails its task (a ``task_failure`` receiver in the worker sees it), is recorded
once, and the worker's lines show the job's fields under Celery's own formatter, never the
error's message (Celery's traceback alone prints it); beat lists each job at start with its
next run.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from celery import Celery
from process_support import Deployment, wait_until
from services import REDIS_URL

from ddd_celery.celery import OccurrenceMessage
from ddd_celery.kernel import iso_ms

pytestmark = pytest.mark.processes

FAIL, REFUSE, EVERY_SECOND = "proc.fail", "proc.refuse", "proc.every-second"
SECRET = "4242 4242 4242 4242"
"""Part of what the failing jobs' errors say (``process_app.SECRET``)."""


def send(deploy: Deployment, job: str, at: datetime, correlation_id: str) -> None:
    sender = Celery("sender", broker=REDIS_URL, set_as_current=False)
    sender.conf.update(broker_transport_options={"global_keyprefix": deploy.prefix})
    try:
        message = OccurrenceMessage(at, correlation_id).to_kwargs()
        sender.send_task(job, kwargs=message, queue=deploy.queue, serializer="json")
    finally:
        sender.close()


def failures_seen(deploy: Deployment) -> list[dict[str, Any]]:
    """What the worker's ``task_failure`` receiver kept, in order."""
    key = f"{deploy.prefix}task-failures"
    return [json.loads(line) for line in deploy.records.lrange(key, 0, -1)]


def test_a_failed_run_fails_its_task_once_and_the_worker_log_shows_its_fields_not_its_message(
    deploy: Deployment,
) -> None:
    settings = {job: {"enabled": True} for job in (FAIL, REFUSE, EVERY_SECOND)}
    env = deploy.environment(settings)
    worker = deploy.worker(env, pool="prefork")
    # a real instant of every 1d: a worker refuses an instant no occurrence has
    at = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    send(deploy, FAIL, at, "corr-fail")
    send(deploy, REFUSE, at, "corr-refuse")
    send(deploy, EVERY_SECOND, at, "corr-ok")

    def all_ended() -> bool:
        output = worker.output()
        return len(failures_seen(deploy)) == 2 and "succeeded in" in output

    wait_until(all_ended, 30, "the worker to end the three tasks")

    failures = failures_seen(deploy)
    assert [(f["task"], f["type"], f["code"]) for f in failures] == [
        (FAIL, "ScheduledJobFailedError", "UNEXPECTED_ERROR"),
        (REFUSE, "ScheduledJobRefusedError", "REMINDER_NOT_DUE"),
    ], deploy.logs()
    assert failures[0]["message"] == (
        f"{FAIL} failed: UNEXPECTED_ERROR (ValueError), scheduled_at {iso_ms(at)}, "
        "correlation id corr-fail"
    )
    for job in (FAIL, REFUSE):
        assert [o["outcome"] for o in deploy.outcomes(job)] == ["failed"]
        assert len(deploy.ran(job)) == 1  # no retry: the next occurrence is the retry

    output = worker.output()
    # the library's lines never quote the error; Celery's traceback prints it, chained to the
    # failure (ddd_celery_traceback_messages, true by default), after the job's frames
    assert [line for line in output.splitlines() if SECRET in line] == [
        f"ValueError: card {SECRET} declined"
    ], output
    line = re.escape(
        f"Scheduled job failed job={FAIL} context=proc outcome=failed scheduled_at={iso_ms(at)} "
    )
    assert re.search(
        line + r"duration_ms=[0-9.]+ correlation_id=corr-fail "
        r"error_code=UNEXPECTED_ERROR error_type=ValueError$",
        output,
        re.MULTILINE,
    ), output
    assert "error_code=REMINDER_NOT_DUE error_type=DomainError" in output
    assert re.search(
        rf"Scheduled job succeeded job={EVERY_SECOND} .*correlation_id=corr-ok$",
        output,
        re.MULTILINE,
    ), output
    assert re.search(
        rf"ERROR/.*Task {FAIL}\[[-0-9a-f]+\] raised unexpected: ScheduledJobFailedError", output
    ), output
    assert "in run\n    raise ValueError(SECRET)" in output  # the traceback is the job's
    assert re.search(
        rf"INFO/.*Task {REFUSE}\[[-0-9a-f]+\] raised expected: ScheduledJobRefusedError", output
    ), output


def test_beat_lists_each_job_at_start_with_its_next_run_in_utc_and_in_its_zone(
    deploy: Deployment,
) -> None:
    settings = {
        EVERY_SECOND: {"enabled": True},
        "proc.every-minute": {
            "enabled": True,
            "schedule": {"cron": "0 7 * * *", "time_zone": "Europe/Paris"},
        },
    }
    beat = deploy.beat(deploy.environment(settings))

    wait_until(lambda: "beat: job switched off" in beat.output(), 30, "beat to list its jobs")

    output = beat.output()
    assert re.search(
        r"beat: job scheduled job=proc\.every-minute "
        r'schedule="cron 0 7 \* \* \* \(Europe/Paris\)" '
        r"next_run_at=\S+T0[56]:00:00\.000Z next_run_local=\S+T07:00:00\+0[12]:00$",
        output,
        re.MULTILINE,
    ), output
    assert re.search(
        rf'beat: job scheduled job={EVERY_SECOND} schedule="every 1s" next_run_at=\S+Z$',
        output,
        re.MULTILINE,
    ), output
    assert 'beat: job switched off job=proc.fail schedule="every 1d"' in output
