"""StoredProcessRunner in memory: the appointment booking through its steps and timeouts on
ManualJobTimers with a QueueWorker, stale timeouts, races, refused decisions, the outbox."""

from __future__ import annotations

import logging
import threading

import pytest

from ddd_celery.background import JobStatus
from ddd_celery.kernel import Actor, ExecutionContext, TimeoutFired
from ddd_celery.processes import (
    PROCESS_COMMANDS_JOB,
    InvalidDecisionError,
    NoTimeoutJobError,
    ProcessConflictError,
    ProcessNotStartedError,
    StoredProcessRunner,
    UnknownProcessError,
)
from ddd_celery.processes.runner import STEP_RAN, STEP_RETRIED, TIMEOUT_IGNORED
from examples.clinic.booking.process import (
    AppointmentBooking,
    BookingState,
    ConfirmAppointment,
    PaymentReceived,
    ReleaseSlot,
    RequestPayment,
    SlotHeld,
)
from tests.unit.process_managers.conftest import RESEND_AFTER_MS, Deployment, plus
from tests.unit.process_managers.processes import Counter, Noted, Reminder, Tally, TallyState

BOOKING = "booking.appointment-booking"
TIMEOUT_JOB = "booking.appointment-booking-timeout"
PAY_WITHIN_MS = 60_000


def held(appointment: str = "a-1") -> SlotHeld:
    return SlotHeld(
        appointment_id=appointment,
        patient="ada@example.test",
        slot="2026-10-02T09:00",
        amount_cents=4_500,
        pay_within_ms=PAY_WITHIN_MS,
    )


def paid(appointment: str = "a-1") -> PaymentReceived:
    return PaymentReceived(appointment_id=appointment, payment_id="p-1")


async def test_a_booking_whose_payment_never_comes_releases_its_slot_when_the_timeout_fires(
    running: Deployment,
) -> None:
    d = running
    started = d.runner.handle(AppointmentBooking, "a-1", AppointmentBooking.slot_held, held())

    assert started.version == 1
    assert started.state.status == "awaiting-payment"
    armed = started.timeouts["payment"]
    assert d.job(armed).run_at == plus(PAY_WITHIN_MS)
    assert d.job(armed).payload == {"process": BOOKING, "id": "a-1", "timeout": "payment"}
    assert d.bus.executed == [
        RequestPayment(appointment_id="a-1", patient="ada@example.test", amount_cents=4_500)
    ]

    await d.timers.advance(PAY_WITHIN_MS - 1)
    assert d.bus.executed[1:] == []
    await d.timers.advance(1_000)  # the worker's next poll after the instant

    assert d.bus.executed[1:] == [ReleaseSlot(appointment_id="a-1", slot="2026-10-02T09:00")]
    found = d.runner.find(AppointmentBooking, "a-1")
    assert found is not None
    assert (found.version, found.state.status, found.timeouts) == (2, "released", {})
    assert d.job(armed).status is JobStatus.SUCCEEDED


async def test_a_payment_in_time_confirms_and_disarms_the_timeout_which_never_acts(
    running: Deployment,
) -> None:
    d = running
    started = d.runner.handle(AppointmentBooking, "a-1", AppointmentBooking.slot_held, held())
    await d.timers.advance(10_000)
    confirmed = d.runner.handle(
        AppointmentBooking, "a-1", AppointmentBooking.payment_received, paid()
    )

    assert (confirmed.version, confirmed.state.status, confirmed.timeouts) == (2, "confirmed", {})
    assert d.job(started.timeouts["payment"]).status is JobStatus.CANCELLED
    await d.timers.advance(PAY_WITHIN_MS + RESEND_AFTER_MS)
    assert d.bus.executed == [
        RequestPayment(appointment_id="a-1", patient="ada@example.test", amount_cents=4_500),
        ConfirmAppointment(appointment_id="a-1", slot="2026-10-02T09:00", payment_id="p-1"),
    ]
    found = d.runner.find(AppointmentBooking, "a-1")
    assert found is not None
    assert found.version == 2


def test_each_step_sends_its_commands_once_and_cancels_their_outbox_job(
    deployment: Deployment,
) -> None:
    d = deployment
    d.runner.handle(AppointmentBooking, "a-1", AppointmentBooking.slot_held, held())
    d.runner.handle(AppointmentBooking, "a-1", AppointmentBooking.payment_received, paid())

    outbox = d.jobs_named(PROCESS_COMMANDS_JOB)
    assert [job.status for job in outbox] == [JobStatus.CANCELLED, JobStatus.CANCELLED]
    assert [job.payload["version"] for job in outbox] == [1, 2]
    assert outbox[1].payload["commands"] == [
        {
            "type": "ConfirmAppointment",
            "body": {"appointment_id": "a-1", "slot": "2026-10-02T09:00", "payment_id": "p-1"},
        }
    ]
    assert len(d.bus.executed) == 2


@pytest.mark.parametrize("why", ["disarmed", "re-armed", "already fired"])
def test_a_timeout_that_is_no_longer_the_armed_one_does_nothing(
    deployment: Deployment, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    d = deployment
    first = d.runner.handle(Reminder, "r-1", Reminder.start, 1_000)
    stale = {"id": "r-1", "timeout": "nudge", "job_id": first.timeouts["nudge"]}
    if why == "disarmed":
        d.runner.handle(Reminder, "r-1", Reminder.stop, None)
    elif why == "re-armed":
        d.runner.handle(Reminder, "r-1", Reminder.postpone, 5_000)
    else:
        d.runner.timeout(Reminder, stale)
    before = d.runner.find(Reminder, "r-1")
    sent = list(d.bus.executed)

    with caplog.at_level(logging.INFO, logger="ddd_celery.processes"):
        assert d.runner.timeout(Reminder, stale) is None

    assert d.runner.find(Reminder, "r-1") == before
    assert d.bus.executed == sent
    ignored = [r for r in caplog.records if r.getMessage() == TIMEOUT_IGNORED]
    assert [(r.levelname, getattr(r, "job_id", None)) for r in ignored] == [
        ("INFO", stale["job_id"])
    ]


def test_re_arming_a_timeout_replaces_its_job_and_cancels_the_earlier_one(
    deployment: Deployment,
) -> None:
    d = deployment
    first = d.runner.handle(Reminder, "r-1", Reminder.start, 1_000)
    d.clock.advance(500)
    again = d.runner.handle(Reminder, "r-1", Reminder.postpone, 5_000)

    assert again.timeouts["nudge"] != first.timeouts["nudge"]
    assert d.job(first.timeouts["nudge"]).status is JobStatus.CANCELLED
    assert d.job(again.timeouts["nudge"]).run_at == plus(5_500)
    fired = d.runner.timeout(
        Reminder, {"id": "r-1", "timeout": "nudge", "job_id": again.timeouts["nudge"]}
    )
    assert fired is not None
    assert fired.state == {"nudged": 1}
    assert fired.timeouts == {}


def test_disarming_cancels_the_timeout_job_and_ignores_a_timeout_never_armed(
    deployment: Deployment,
) -> None:
    d = deployment
    first = d.runner.handle(Reminder, "r-1", Reminder.start, 1_000)
    stopped = d.runner.handle(Reminder, "r-1", Reminder.stop, None)
    assert stopped.timeouts == {}
    assert d.job(first.timeouts["nudge"]).status is JobStatus.CANCELLED


def test_a_timeout_job_delivered_twice_runs_its_step_once(deployment: Deployment) -> None:
    d = deployment
    started = d.runner.handle(AppointmentBooking, "a-1", AppointmentBooking.slot_held, held())
    fired = {"id": "a-1", "timeout": "payment", "job_id": started.timeouts["payment"]}

    assert d.runner.timeout(BOOKING, fired) is not None
    assert d.runner.timeout(BOOKING, fired) is None
    assert d.bus.executed.count(ReleaseSlot(appointment_id="a-1", slot="2026-10-02T09:00")) == 1


def test_a_timeout_of_an_instance_that_does_not_exist_does_nothing(
    deployment: Deployment,
) -> None:
    fired = {"id": "a-404", "timeout": "payment", "job_id": "job-1"}
    assert deployment.runner.timeout(AppointmentBooking, fired) is None
    assert deployment.processes.list() == []


def test_a_step_given_explicitly_runs_for_a_timeout(deployment: Deployment) -> None:
    d = deployment
    started = d.runner.handle(AppointmentBooking, "a-1", AppointmentBooking.slot_held, held())
    fired = {"id": "a-1", "timeout": "payment", "job_id": started.timeouts["payment"]}
    after = d.runner.timeout(AppointmentBooking, fired, "payment_timed_out")
    assert after is not None
    assert after.state.status == "released"


def test_two_steps_racing_on_one_instance_both_apply_one_after_the_other(
    deployment: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    d = deployment
    d.runner.handle(Counter, "c", Counter.add, 1)
    both_read = threading.Barrier(2)
    racing = threading.local()

    def wait_for_the_other() -> None:
        if not getattr(racing, "done", False):  # only the first run of each step waits
            racing.done = True
            both_read.wait(5)

    Counter.before_deciding = staticmethod(wait_for_the_other)
    errors: list[BaseException] = []

    def add(amount: int) -> None:
        try:
            d.runner.handle(Counter, "c", Counter.add, amount)
        except BaseException as error:
            errors.append(error)

    try:
        with caplog.at_level(logging.INFO, logger="ddd_celery.processes"):
            threads = [threading.Thread(target=add, args=(n,)) for n in (10, 100)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(10)
    finally:
        Counter.before_deciding = staticmethod(lambda: None)

    assert errors == []
    found = d.runner.find(Counter, "c")
    assert found is not None
    assert (found.version, found.state) == (3, {"total": 111})
    retried = [r for r in caplog.records if r.getMessage().startswith("Process step lost a race")]
    assert len(retried) == 1
    totals = sorted(command.total for command in d.bus.executed if isinstance(command, Noted))
    assert totals[0] == 1
    assert totals[2] == 111
    assert len(totals) == 3


def test_a_step_that_loses_every_race_fails_clearly_and_leaves_nothing(
    deployment: Deployment,
) -> None:
    d = Deployment(max_attempts=2)
    d.runner.handle(Counter, "c", Counter.add, 1)

    def someone_else_saves_first() -> None:
        stored = d.processes.load("tests.counter", "c", tenant_id=None)
        assert stored is not None
        d.processes.save(
            type(stored)(stored.process, stored.id, stored.version + 1, {"total": 0}),
            expected_version=stored.version,
        )

    Counter.before_deciding = staticmethod(someone_else_saves_first)
    try:
        with pytest.raises(ProcessConflictError, match="lost the race for it 2 time") as failed:
            d.runner.handle(Counter, "c", Counter.add, 5)
    finally:
        Counter.before_deciding = staticmethod(lambda: None)

    assert failed.value.code == "PROCESS_CONFLICT"
    assert failed.value.__cause__ is not None
    assert [c.total for c in d.bus.executed if isinstance(c, Noted)] == [1]
    assert len(d.jobs_named(PROCESS_COMMANDS_JOB)) == 1


def test_arming_a_timeout_without_a_timeout_job_is_refused_and_nothing_is_saved(
    deployment: Deployment,
) -> None:
    d = deployment
    d.runner.handle(Counter, "c", Counter.add, 1)
    with pytest.raises(NoTimeoutJobError, match=r"'tests\.counter'.*'reminder'") as refused:
        d.runner.handle(Counter, "c", Counter.remind_later, None)
    assert refused.value.code == "NO_TIMEOUT_JOB"
    found = d.runner.find(Counter, "c")
    assert found is not None
    assert found.version == 1
    assert len(d.store.list()) == 1  # the first step's outbox job, nothing more


@pytest.mark.parametrize(
    ("step", "error", "match"),
    [
        (Counter.send_undeclared, InvalidDecisionError, "sends a NotDeclared, which is not one"),
        (Counter.keep_a_set, InvalidDecisionError, "cannot be stored as JSON"),
        (Counter.answer_none, InvalidDecisionError, "returned a NoneType, not a ProcessDecision"),
        ("no_such_step", UnknownProcessError, "has no step 'no_such_step'"),
    ],
)
def test_a_decision_the_process_cannot_carry_out_is_refused_and_changes_nothing(
    deployment: Deployment, step: object, error: type[Exception], match: str
) -> None:
    d = deployment
    d.runner.handle(Counter, "c", Counter.add, 1)
    with pytest.raises(error, match=match):
        d.runner.handle(Counter, "c", step, None)  # type: ignore[arg-type]
    found = d.runner.find(Counter, "c")
    assert found is not None
    assert found.version == 1
    assert len(d.bus.executed) == 1


def test_a_state_its_model_refuses_is_refused_naming_the_field(deployment: Deployment) -> None:
    d = deployment
    with pytest.raises(InvalidDecisionError, match="field 'total' is refused by TallyState"):
        d.runner.handle(Tally, "t", Tally.set_to, "many")
    assert d.processes.list() == []
    saved = d.runner.handle(Tally, "t", Tally.set_to, 3)
    assert saved.state == TallyState(total=3)
    assert d.runner.find(Tally, "t") == saved


def test_a_step_that_does_not_start_the_process_needs_an_instance(deployment: Deployment) -> None:
    with pytest.raises(ProcessNotStartedError, match="'payment_received' does not start"):
        deployment.runner.handle(
            AppointmentBooking, "a-404", AppointmentBooking.payment_received, paid()
        )
    with pytest.raises(UnknownProcessError, match="not declared with @process_manager"):
        deployment.runner.handle(Deployment, "a-1", "slot_held", held())


def test_a_starting_step_on_an_existing_instance_sees_its_state(deployment: Deployment) -> None:
    d = deployment
    d.runner.handle(AppointmentBooking, "a-1", AppointmentBooking.slot_held, held())
    again = d.runner.handle(AppointmentBooking, "a-1", AppointmentBooking.slot_held, held())
    assert (again.version, again.state.status) == (2, "awaiting-payment")
    assert len(d.bus.executed) == 1


async def test_a_command_that_fails_after_the_commit_is_sent_by_its_outbox_job(
    running: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    d = running
    down = [True]

    def request_payment(command: object) -> None:
        if down[0]:
            raise ConnectionError("the payment service is down")

    d.bus._handlers[RequestPayment] = request_payment
    with caplog.at_level(logging.WARNING, logger="ddd_celery.processes"):
        started = d.runner.handle(AppointmentBooking, "a-1", AppointmentBooking.slot_held, held())

    assert started.version == 1
    warned = [
        r
        for r in caplog.records
        if r.getMessage() == "Process command not sent, its outbox job will"
    ]
    assert [(r.command, r.error_type) for r in warned] == [("RequestPayment", "ConnectionError")]  # type: ignore[attr-defined]
    [outbox] = d.jobs_named(PROCESS_COMMANDS_JOB)
    assert outbox.status is JobStatus.QUEUED
    assert outbox.run_at == plus(RESEND_AFTER_MS)

    down[0] = False
    await d.timers.advance(RESEND_AFTER_MS + 1_000)
    assert d.job(outbox.id).status is JobStatus.SUCCEEDED
    requests = [c for c in d.bus.executed if isinstance(c, RequestPayment)]
    assert len(requests) == 2  # the failed send, then the outbox's


def test_inside_the_callers_unit_of_work_the_step_commits_and_sends_with_it(
    deployment: Deployment,
) -> None:
    d = deployment
    with d.unit_of_work.begin():
        d.runner.handle(AppointmentBooking, "a-1", AppointmentBooking.slot_held, held())
        assert d.bus.executed == []
        assert d.store.list() == []
    assert len(d.bus.executed) == 1
    assert {job.name for job in d.store.list()} == {TIMEOUT_JOB, PROCESS_COMMANDS_JOB}


def test_a_timeout_step_gets_which_timeout_fired(deployment: Deployment) -> None:
    seen: list[TimeoutFired] = []
    d = deployment
    started = d.runner.handle(AppointmentBooking, "a-1", AppointmentBooking.slot_held, held())
    original = AppointmentBooking.payment_timed_out

    def spy(self: AppointmentBooking, state: BookingState, fired: TimeoutFired) -> object:
        seen.append(fired)
        return original(self, state, fired)

    AppointmentBooking.payment_timed_out = spy  # type: ignore[method-assign]
    try:
        d.runner.timeout(
            AppointmentBooking,
            {"id": "a-1", "timeout": "payment", "job_id": started.timeouts["payment"]},
        )
    finally:
        AppointmentBooking.payment_timed_out = original  # type: ignore[method-assign]
    assert seen == [TimeoutFired("payment", started.timeouts["payment"])]


async def test_the_outbox_job_resumes_after_the_commands_it_already_sent(
    running: Deployment,
) -> None:
    d = running
    d.runner.handle(Counter, "c", Counter.add, 1)
    delivered: list[int] = []
    failures = {13: 2}  # the third command fails twice: the direct send, the outbox's first try

    def note(command: Noted) -> None:
        if failures.get(command.total, 0) > 0:
            failures[command.total] -= 1
            raise ConnectionError("the ledger is down")
        delivered.append(command.total)

    d.bus._handlers[Noted] = note
    d.runner.handle(Counter, "c", Counter.add_each, [1, 1, 10])
    assert delivered == [2, 3]

    await d.timers.advance(RESEND_AFTER_MS + 1_000)  # the outbox's first try: 2, 3, then fails
    await d.timers.advance(2_000)  # its retry, after the backoff: the third command only

    assert delivered == [2, 3, 2, 3, 13]
    [_, outbox] = d.jobs_named(PROCESS_COMMANDS_JOB)
    assert outbox.status is JobStatus.SUCCEEDED
    assert outbox.checkpoint == 3


def _losing_every_race(d: Deployment) -> None:
    """Before each step decides, another process saves the instance first."""
    stored = d.processes.load("tests.counter", "c", tenant_id=None)
    assert stored is not None
    d.processes.save(
        type(stored)(stored.process, stored.id, stored.version + 1, {"total": 0}),
        expected_version=stored.version,
    )


def test_a_step_that_lost_a_race_pauses_a_random_part_of_a_doubling_bound_before_its_next(
    deployment: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    d = deployment
    d.runner.handle(Counter, "c", Counter.add, 1)
    draws = iter([0.5, 0.25, 1.0])
    slept: list[float] = []
    runner = StoredProcessRunner(
        store=d.processes,
        jobs=d.jobs,
        commands=d.bus,
        unit_of_work=d.unit_of_work,
        max_attempts=4,
        backoff_ms=10,
        max_backoff_ms=25,
        random=lambda: next(draws),
        sleep=slept.append,
    )
    Counter.before_deciding = staticmethod(lambda: _losing_every_race(d))
    try:
        with (
            caplog.at_level(logging.INFO, logger="ddd_celery.processes"),
            pytest.raises(ProcessConflictError, match="4 time"),
        ):
            runner.handle(Counter, "c", Counter.add, 5)
    finally:
        Counter.before_deciding = staticmethod(lambda: None)

    # bounds 10, 20, then 40 capped at 25 ms; none after the last loss
    assert slept == [0.005, 0.005, 0.025]
    retried = [r for r in caplog.records if r.getMessage() == STEP_RETRIED]
    assert [(r.attempt, r.pause_ms) for r in retried] == [(1, 5.0), (2, 5.0), (3, 25.0)]  # type: ignore[attr-defined]


def test_inside_the_callers_unit_of_work_a_lost_race_raises_at_once_without_pausing(
    deployment: Deployment,
) -> None:
    d = deployment
    d.runner.handle(Counter, "c", Counter.add, 1)
    slept: list[float] = []
    runner = StoredProcessRunner(
        store=d.processes,
        jobs=d.jobs,
        commands=d.bus,
        unit_of_work=d.unit_of_work,
        sleep=slept.append,
    )
    Counter.before_deciding = staticmethod(lambda: _losing_every_race(d))
    try:
        with pytest.raises(ProcessConflictError, match="1 time"), d.unit_of_work.begin():
            runner.handle(Counter, "c", Counter.add, 5)
    finally:
        Counter.before_deciding = staticmethod(lambda: None)
    assert slept == []


@pytest.mark.parametrize("name", ["backoff_ms", "max_backoff_ms"])
@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_a_backoff_that_is_not_a_positive_int_is_refused(
    deployment: Deployment, name: str, value: object
) -> None:
    d = deployment
    with pytest.raises(ValueError, match=name):
        StoredProcessRunner(
            store=d.processes,
            jobs=d.jobs,
            commands=d.bus,
            unit_of_work=d.unit_of_work,
            **{name: value},  # type: ignore[arg-type]
        )


def test_each_step_that_commits_is_logged_with_what_it_sent_armed_disarmed_and_fired(
    deployment: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    d = deployment
    with caplog.at_level(logging.INFO, logger="ddd_celery.processes"):
        with d.scope.open(ExecutionContext("test", Actor("user", "u-1"), "c-1", tenant_id="acme")):
            d.runner.handle(AppointmentBooking, "a-1", AppointmentBooking.slot_held, held())
            d.runner.handle(AppointmentBooking, "a-1", AppointmentBooking.payment_received, paid())
        started = d.runner.handle(Reminder, "r-1", Reminder.start, 1_000)
        d.runner.timeout(Reminder, {"id": "r-1", "timeout": "nudge", "job_id": "job-x"})  # stale
        d.runner.timeout(
            Reminder, {"id": "r-1", "timeout": "nudge", "job_id": started.timeouts["nudge"]}
        )
        with pytest.raises(InvalidDecisionError):
            d.runner.handle(Tally, "t", Tally.set_to, "many")

        def failing_use_case() -> None:
            with d.unit_of_work.begin():
                d.runner.handle(Counter, "c", Counter.add, 1)
                raise RuntimeError("the caller's use case fails: nothing committed")

        with pytest.raises(RuntimeError):
            failing_use_case()

    ran = [
        (
            r.process_manager,  # type: ignore[attr-defined]
            r.instance_id,  # type: ignore[attr-defined]
            r.tenant_id,  # type: ignore[attr-defined]
            r.step,  # type: ignore[attr-defined]
            r.version,  # type: ignore[attr-defined]
            r.commands,  # type: ignore[attr-defined]
            r.armed,  # type: ignore[attr-defined]
            r.disarmed,  # type: ignore[attr-defined]
            r.fired,  # type: ignore[attr-defined]
        )
        for r in caplog.records
        if r.getMessage() == STEP_RAN
    ]
    assert ran == [
        (BOOKING, "a-1", "acme", "slot_held", 1, ["RequestPayment"], ["payment"], [], None),
        (
            BOOKING,
            "a-1",
            "acme",
            "payment_received",
            2,
            ["ConfirmAppointment"],
            [],
            ["payment"],
            None,
        ),
        ("tests.reminder", "r-1", None, "start", 1, [], ["nudge"], [], None),
        ("tests.reminder", "r-1", None, "nudge", 2, ["Noted"], [], [], "nudge"),
    ]
    assert {r.levelname for r in caplog.records if r.getMessage() == STEP_RAN} == {"INFO"}
    [ignored] = [r for r in caplog.records if r.getMessage() == TIMEOUT_IGNORED]
    assert (ignored.instance_id, ignored.tenant_id, ignored.job_id) == ("r-1", None, "job-x")  # type: ignore[attr-defined]
