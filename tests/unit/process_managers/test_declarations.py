"""@process_manager and @step are checked when the declaring module is imported."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import BaseModel

from ddd_celery import DeclarationError, ProcessDecision, process_manager, step
from ddd_celery.declarations.process import process_declaration_of
from examples.clinic.booking.process import (
    AppointmentBooking,
    AppointmentBookingTimeoutJob,
    BookingState,
    ReleaseSlot,
)


class Started:
    @step(starts=True)
    def begin(self, state: Any, message: Any) -> ProcessDecision[Any]:
        return ProcessDecision({})


def test_the_booking_declares_its_state_timeout_job_commands_and_steps() -> None:
    declaration = process_declaration_of(AppointmentBooking)
    assert declaration.name == "booking.appointment-booking"
    assert declaration.state_type is BookingState
    assert declaration.timeout_job is not None
    assert declaration.timeout_job.job_class is AppointmentBookingTimeoutJob
    assert set(declaration.commands) == {"RequestPayment", "ConfirmAppointment", "ReleaseSlot"}
    assert {name: (s.starts, s.on_timeout) for name, s in declaration.steps.items()} == {
        "slot_held": (True, None),
        "payment_received": (False, None),
        "payment_timed_out": (False, "payment"),
    }
    assert process_declaration_of("booking.appointment-booking") is declaration


@dataclass
class Holder:
    value: object


@pytest.mark.parametrize(
    ("declare", "message"),
    [
        (lambda: process_manager("Booking")(Started), "lower case"),
        (lambda: process_manager("tests.bad-state", state=dict)(Started), "pydantic model"),
        (
            lambda: process_manager("tests.bad-job", timeout_job=Started)(Started),
            "is not declared with @background",
        ),
        (
            lambda: process_manager("tests.bad-command", commands=[object])(Started),
            "must be a pydantic model or a dataclass",
        ),
        (
            lambda: process_manager("tests.two-commands", commands=[ReleaseSlot, _other_release()])(
                Started
            ),
            "two command types are named 'ReleaseSlot'",
        ),
        (lambda: process_manager("tests.no-step")(Holder), "has no @step method"),
        (lambda: process_manager("tests.no-start")(_not_starting()), "no step that starts it"),
        (
            lambda: process_manager("tests.bad-signature")(_bad_signature()),
            "(self, state, message)",
        ),
        (lambda: process_manager("tests.two-on-one")(_two_on_one()), "both run on timeout 'late'"),
        (lambda: process_manager("tests.no-timeout-job")(_two_on_one(1)), "need a timeout_job"),
        (lambda: process_manager("tests.function")(lambda: None), "decorates a class"),
    ],
)
def test_a_declaration_that_cannot_work_is_refused_naming_the_process(
    declare: Any, message: str
) -> None:
    with pytest.raises(DeclarationError, match=re.escape(message)) as refused:
        declare()
    assert refused.value.job is not None


def test_a_name_is_taken_by_one_class_only() -> None:
    with pytest.raises(DeclarationError, match=r"already declared by .*AppointmentBooking"):
        process_manager("booking.appointment-booking")(Started)


def test_on_timeout_names_a_timeout() -> None:
    with pytest.raises(DeclarationError, match="on_timeout names a timeout"):
        step(on_timeout="")


def _other_release() -> type:
    class ReleaseSlot(BaseModel):  # another class of the same name
        slot: str

    return ReleaseSlot


def _not_starting() -> type:
    class NotStarting:
        @step
        def go(self, state: Any, message: Any) -> ProcessDecision[Any]:
            return ProcessDecision(state)

    return NotStarting


def _bad_signature() -> type:
    class BadSignature(Started):
        @step
        def go(self, state: Any) -> ProcessDecision[Any]:
            return ProcessDecision(state)

    return BadSignature


def _two_on_one(steps: int = 2) -> type:
    class OnTimeout(Started):
        @step(on_timeout="late")
        def first(self, state: Any, message: Any) -> ProcessDecision[Any]:
            return ProcessDecision(state)

    if steps == 1:
        return OnTimeout

    class TwoOnOne(OnTimeout):
        @step(on_timeout="late")
        def second(self, state: Any, message: Any) -> ProcessDecision[Any]:
            return ProcessDecision(state)

    return TwoOnOne
