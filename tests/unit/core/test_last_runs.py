"""The stored form of a last run: JSON, in UTC, and read back as the JobRun it was."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from ddd_celery.scheduling.last_runs import run_as_dict, run_from_dict
from ddd_celery.scheduling.outcomes import JobRun, Outcome

SIX = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
FAILED = JobRun(
    job="billing.close-month",
    scheduled_at=SIX,
    outcome=Outcome.FAILED,
    context="billing",
    started_at=SIX + timedelta(microseconds=1_234_567),
    duration_ms=812.25,
    error_code="JOB_TIMEOUT",
    error_type="JobTimeoutError",
    correlation_id="9b2e4c1d",
    tenant_id="acme",
)


def test_a_record_is_json_with_instants_in_iso_8601_utc_to_the_microsecond() -> None:
    paris = ZoneInfo("Europe/Paris")
    in_paris = replace(
        FAILED,
        scheduled_at=SIX.astimezone(paris),
        started_at=FAILED.started_at and FAILED.started_at.astimezone(paris),
    )

    assert json.loads(json.dumps(run_as_dict(in_paris))) == {
        "job": "billing.close-month",
        "context": "billing",
        "scheduled_at": "2026-03-02T06:00:00.000000Z",
        "outcome": "failed",
        "started_at": "2026-03-02T06:00:01.234567Z",
        "duration_ms": 812.25,
        "error_code": "JOB_TIMEOUT",
        "error_type": "JobTimeoutError",
        "correlation_id": "9b2e4c1d",
        "tenant_id": "acme",
    }


def test_a_record_reads_back_as_the_run_it_was() -> None:
    not_run = JobRun(
        job="billing.close-month", scheduled_at=SIX, outcome=Outcome.MISSED, context="billing"
    )

    assert run_from_dict(json.loads(json.dumps(run_as_dict(FAILED)))) == FAILED
    assert run_from_dict(run_as_dict(not_run)) == not_run


@pytest.mark.parametrize(
    "change",
    [
        {"outcome": "exploded"},
        {"scheduled_at": "2026-03-02T06:00:00"},
        {"scheduled_at": "the sixth hour"},
        {"scheduled_at": None},
    ],
    ids=["unknown outcome", "naive instant", "not an instant", "no instant"],
)
def test_what_is_not_a_record_is_refused_with_a_value_error(change: dict[str, Any]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the message is the parser's own
        run_from_dict(run_as_dict(FAILED) | change)


def test_a_record_missing_a_field_is_refused_with_a_value_error() -> None:
    record = run_as_dict(FAILED)
    del record["tenant_id"]

    with pytest.raises(ValueError, match="not the record of a run"):
        run_from_dict(record)
