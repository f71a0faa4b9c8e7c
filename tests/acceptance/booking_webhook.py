"""A job of the booking's application that steps the process: a payment service's webhook.

Its constructor takes the ``ProcessRunner`` port, which ``install_process_managers`` provides
to every background job of the app. Imported by the app of the workers and by the tests that
enqueue it.
"""

from __future__ import annotations

from pydantic import BaseModel

from ddd_celery import BackgroundJobExecution, background
from ddd_celery.kernel import ProcessRunner
from examples.clinic.booking.process import AppointmentBooking, PaymentReceived

PAYMENT_WEBHOOK = "booking.payment-webhook"


class PaymentWebhookPayload(BaseModel):
    appointment_id: str
    payment_id: str


@background(PAYMENT_WEBHOOK)
class PaymentWebhookJob:
    """The payment of an appointment came: its booking takes it."""

    def __init__(self, processes: ProcessRunner) -> None:
        self._processes = processes

    def run(self, payload: PaymentWebhookPayload, execution: BackgroundJobExecution) -> None:
        paid = PaymentReceived(appointment_id=payload.appointment_id, payment_id=payload.payment_id)
        self._processes.handle(
            AppointmentBooking, payload.appointment_id, AppointmentBooking.payment_received, paid
        )
