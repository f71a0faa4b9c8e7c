"""The appointment booking: a process manager that waits for a payment, within a deadline.

When a slot is held, the booking asks for the payment and arms the ``payment`` timeout. The
payment confirms the appointment and disarms it; if the timeout fires first, the slot is
released. A payment that arrives after the release changes nothing here (a real clinic would
refund it). Each step only decides: the runner saves, arms, disarms and sends.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from ddd_celery import ProcessDecision, TimeoutFired, background, process_manager, step
from ddd_celery.processes import ProcessTimeoutJob

PAY_WITHIN_MS = 15 * 60_000
"""How long a held slot waits for its payment, by default."""


class SlotHeld(BaseModel):
    """A patient held a slot: the booking starts."""

    appointment_id: str
    patient: str
    slot: str
    amount_cents: int
    pay_within_ms: int = PAY_WITHIN_MS


class PaymentReceived(BaseModel):
    appointment_id: str
    payment_id: str


class RequestPayment(BaseModel):
    appointment_id: str
    patient: str
    amount_cents: int


class ConfirmAppointment(BaseModel):
    appointment_id: str
    slot: str
    payment_id: str


class ReleaseSlot(BaseModel):
    appointment_id: str
    slot: str


class BookingState(BaseModel):
    appointment_id: str
    patient: str
    slot: str
    status: Literal["awaiting-payment", "confirmed", "released"]
    payment_id: str | None = None


@background("booking.appointment-booking-timeout")
class AppointmentBookingTimeoutJob(ProcessTimeoutJob):
    """Fires the timeouts of the appointment booking (there is one: ``payment``)."""


@process_manager(
    "booking.appointment-booking",
    state=BookingState,
    timeout_job=AppointmentBookingTimeoutJob,
    commands=[RequestPayment, ConfirmAppointment, ReleaseSlot],
)
class AppointmentBooking:
    """Hold a slot, wait for its payment, confirm it or release the slot."""

    @step(starts=True)
    def slot_held(
        self, state: BookingState | None, held: SlotHeld
    ) -> ProcessDecision[BookingState]:
        if state is not None:  # the same message again: decided already
            return ProcessDecision(state)
        return ProcessDecision(
            BookingState(
                appointment_id=held.appointment_id,
                patient=held.patient,
                slot=held.slot,
                status="awaiting-payment",
            ),
            send=[
                RequestPayment(
                    appointment_id=held.appointment_id,
                    patient=held.patient,
                    amount_cents=held.amount_cents,
                )
            ],
            arm={"payment": held.pay_within_ms},
        )

    @step
    def payment_received(
        self, state: BookingState, paid: PaymentReceived
    ) -> ProcessDecision[BookingState]:
        if state.status != "awaiting-payment":
            return ProcessDecision(state)
        return ProcessDecision(
            state.model_copy(update={"status": "confirmed", "payment_id": paid.payment_id}),
            send=[
                ConfirmAppointment(
                    appointment_id=state.appointment_id, slot=state.slot, payment_id=paid.payment_id
                )
            ],
            disarm=["payment"],
        )

    @step(on_timeout="payment")
    def payment_timed_out(
        self, state: BookingState, fired: TimeoutFired
    ) -> ProcessDecision[BookingState]:
        return ProcessDecision(
            state.model_copy(update={"status": "released"}),
            send=[ReleaseSlot(appointment_id=state.appointment_id, slot=state.slot)],
        )
