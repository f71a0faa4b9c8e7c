"""``python -m examples.clinic.booking.demo``: the appointment booking, run for real.

Two patients hold a slot. Ada pays within her deadline: her appointment is confirmed and her
payment timeout disarmed. Grace never pays: when her timeout fires, her slot is released. The
bookings, their timeout jobs and their commands' outbox live in one SQLite file (a directory of
the system's temporary files), written in one unit of work; a ``QueueWorker`` runs the timeout
jobs on the system clock, as a worker process would. The exit status is 0 when Ada is confirmed,
Grace released, and each command was sent once; 130 when Ctrl-C stopped it.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel
from sqlalchemy.orm import sessionmaker

from ddd_celery.background import QueueWorker, StoredJobQueue
from ddd_celery.kernel import CommandBus, FixedExecutionScope, SystemClock, UuidGenerator
from ddd_celery.processes import ProcessCommandsJob, StoredProcessRunner
from ddd_celery.sql import SqlAlchemyUnitOfWork, SqlJobStore, sqlite_engine
from ddd_celery.sql.process_store import SqlProcessStore, create_process_tables
from examples.clinic.booking.process import (
    AppointmentBooking,
    AppointmentBookingTimeoutJob,
    PaymentReceived,
    SlotHeld,
)

PAY_WITHIN_MS = 3_000
POLL_MS = 200


class PrintingBus(CommandBus):
    """Sends a command by printing it: the payment and agenda services of the demo."""

    def __init__(self, started: float) -> None:
        self._started = started
        self.sent: Counter[tuple[str, str]] = Counter()

    def execute(self, command: object) -> None:
        assert isinstance(command, BaseModel)
        fields = command.model_dump()
        self.sent[(type(command).__name__, fields["appointment_id"])] += 1
        shown = ", ".join(f"{key}={value}" for key, value in fields.items())
        say(self._started, f"command {type(command).__name__}({shown})")


def say(started: float, text: str) -> None:
    print(f"[{time.monotonic() - started:5.1f}s] {text}", flush=True)


async def run(directory: Path) -> int:
    started = time.monotonic()
    engine = sqlite_engine(directory / "clinic.sqlite3")
    create_process_tables(engine)
    unit_of_work = SqlAlchemyUnitOfWork(sessionmaker(engine))
    clock, scope, bus = SystemClock(), FixedExecutionScope(), PrintingBus(started)
    store = SqlJobStore(engine, unit_of_work=unit_of_work)
    runner = StoredProcessRunner(
        store=SqlProcessStore(engine, unit_of_work=unit_of_work),
        jobs=StoredJobQueue(
            store=store, clock=clock, ids=UuidGenerator(), scope=scope, unit_of_work=unit_of_work
        ),
        commands=bus,
        unit_of_work=unit_of_work,
    )
    worker = QueueWorker(store=store, clock=clock, scope=scope, poll_interval_ms=POLL_MS)
    worker.register(AppointmentBookingTimeoutJob, lambda: AppointmentBookingTimeoutJob(runner))
    worker.register(ProcessCommandsJob, lambda: ProcessCommandsJob(bus))
    await worker.start()
    try:
        for appointment, patient in (("a-1", "ada"), ("a-2", "grace")):
            held = SlotHeld(
                appointment_id=appointment,
                patient=f"{patient}@example.test",
                slot="2026-10-02T09:00" if patient == "ada" else "2026-10-02T10:00",
                amount_cents=4_500,
                pay_within_ms=PAY_WITHIN_MS,
            )
            booking = runner.handle(
                AppointmentBooking, appointment, AppointmentBooking.slot_held, held
            )
            say(
                started,
                f"{appointment} held for {patient}: {booking.state.status}, "
                f"payment timeout armed (job {booking.timeouts['payment'][:8]})",
            )
        await asyncio.sleep(1)
        paid = PaymentReceived(appointment_id="a-1", payment_id="p-1")
        booking = runner.handle(
            AppointmentBooking, "a-1", AppointmentBooking.payment_received, paid
        )
        say(started, f"a-1 paid: {booking.state.status}, timeouts armed: {dict(booking.timeouts)}")
        await asyncio.sleep((PAY_WITHIN_MS + 3 * POLL_MS) / 1000)
    finally:
        await worker.stop()
    ada = runner.find(AppointmentBooking, "a-1")
    grace = runner.find(AppointmentBooking, "a-2")
    statuses = {
        "a-1": ada.state.status if ada else None,
        "a-2": grace.state.status if grace else None,
    }
    say(started, f"bookings: {statuses}; commands sent: {dict(bus.sent)}")
    engine.dispose()
    expected = {
        ("RequestPayment", "a-1"), ("RequestPayment", "a-2"),
        ("ConfirmAppointment", "a-1"), ("ReleaseSlot", "a-2"),
    }  # fmt: skip
    ok = statuses == {"a-1": "confirmed", "a-2": "released"} and bus.sent == Counter(expected)
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ddd-celery-booking-") as directory:
        try:
            return asyncio.run(run(Path(directory)))
        except KeyboardInterrupt:  # Ctrl-C: asyncio.run cancelled run(), which stopped its worker
            print("\nStopped", flush=True)
            return 128 + signal.SIGINT


if __name__ == "__main__":
    sys.exit(main())
