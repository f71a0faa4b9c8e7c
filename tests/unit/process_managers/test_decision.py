"""A ProcessDecision is checked where it is made, and a timeout may be armed at an instant."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from ddd_celery import ProcessDecision
from tests.unit.process_managers.conftest import START, Deployment, plus
from tests.unit.process_managers.processes import Reminder


@pytest.mark.parametrize(
    ("arm", "disarm", "message"),
    [
        ({"late": -1}, (), "whole ms >= 0"),
        ({"late": 1.5}, (), "whole ms >= 0"),
        ({"late": True}, (), "whole ms >= 0"),
        ({"late": datetime(2026, 10, 1, 8)}, (), "naive datetime"),
        ({"late": 1_000}, ("late",), "both armed and disarmed"),
    ],
)
def test_a_decision_that_cannot_be_carried_out_is_refused_when_made(
    arm: dict[str, object], disarm: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        ProcessDecision({}, arm=arm, disarm=disarm)  # type: ignore[arg-type]


def test_a_decision_is_frozen_with_its_own_copies() -> None:
    send = [1]
    arm = {"late": 5}
    decision = ProcessDecision({}, send=send, arm=arm)
    send.append(2)
    arm["later"] = 6
    assert decision.send == (1,)
    assert dict(decision.arm) == {"late": 5}


def test_a_timeout_armed_at_an_instant_is_due_then_in_utc(deployment: Deployment) -> None:
    d = deployment
    d.runner.handle(Reminder, "r-1", Reminder.start, 1_000)
    paris = timezone(timedelta(hours=2))
    at = (START + timedelta(hours=3)).astimezone(paris)
    again = d.runner.handle(Reminder, "r-1", Reminder.nudge_at, at)
    job = d.job(again.timeouts["nudge"])
    assert job.run_at == plus(3 * 3_600_000)
    assert job.run_at.tzinfo == UTC
