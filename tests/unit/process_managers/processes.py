"""Process managers of the specs, beside the clinic's appointment booking."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from pydantic import BaseModel

from ddd_celery import ProcessDecision, TimeoutFired, background, process_manager, step
from ddd_celery.processes import ProcessTimeoutJob


@dataclass(frozen=True)
class Noted:
    """A dataclass command: the total a counter reached."""

    counter: str
    total: int


@dataclass(frozen=True)
class NotDeclared:
    counter: str


@process_manager("tests.counter", commands=[Noted])
class Counter:
    """Adds what it is told to a JSON total; no timeout job."""

    before_deciding: ClassVar[Callable[[], None]] = staticmethod(lambda: None)
    """What a spec runs inside each step, before it decides (to make two steps race)."""

    @step(starts=True)
    def add(self, state: Any, amount: int) -> ProcessDecision[Any]:
        Counter.before_deciding()
        total = (state or {"total": 0})["total"] + amount
        return ProcessDecision({"total": total}, send=[Noted("c", total)])

    @step
    def add_each(self, state: Any, amounts: list[int]) -> ProcessDecision[Any]:
        totals, total = [], state["total"]
        for amount in amounts:
            total += amount
            totals.append(Noted("c", total))
        return ProcessDecision({"total": total}, send=totals)

    @step
    def remind_later(self, state: Any, message: Any) -> ProcessDecision[Any]:
        return ProcessDecision(state, arm={"reminder": 1_000})

    @step
    def send_undeclared(self, state: Any, message: Any) -> ProcessDecision[Any]:
        return ProcessDecision(state, send=[NotDeclared("c")])

    @step
    def keep_a_set(self, state: Any, message: Any) -> ProcessDecision[Any]:
        return ProcessDecision({"total": {1, 2}})

    @step
    def answer_none(self, state: Any, message: Any) -> Any:
        return None


@background("tests.reminder-timeout")
class ReminderTimeoutJob(ProcessTimeoutJob):
    """Fires the reminder's ``nudge``."""


@process_manager("tests.reminder", timeout_job=ReminderTimeoutJob, commands=[Noted])
class Reminder:
    """Nudges after a delay, unless postponed (re-armed) or stopped (disarmed) first."""

    @step(starts=True)
    def start(self, state: Any, delay_ms: int) -> ProcessDecision[Any]:
        return ProcessDecision({"nudged": 0}, arm={"nudge": delay_ms})

    @step
    def postpone(self, state: Any, delay_ms: int) -> ProcessDecision[Any]:
        return ProcessDecision(state, arm={"nudge": delay_ms})

    @step
    def nudge_at(self, state: Any, at: datetime) -> ProcessDecision[Any]:
        return ProcessDecision(state, arm={"nudge": at})

    @step
    def stop(self, state: Any, message: Any) -> ProcessDecision[Any]:
        return ProcessDecision(state, disarm=["nudge", "never-armed"])

    @step(on_timeout="nudge")
    def nudge(self, state: Any, fired: TimeoutFired) -> ProcessDecision[Any]:
        nudged = state["nudged"] + 1
        return ProcessDecision({"nudged": nudged}, send=[Noted("reminder", nudged)])


class TallyState(BaseModel):
    total: int


@process_manager("tests.tally", state=TallyState)
class Tally:
    """A state model, given whatever the message says: the runner validates it."""

    @step(starts=True)
    def set_to(self, state: TallyState | None, value: Any) -> ProcessDecision[Any]:
        return ProcessDecision({"total": value})
