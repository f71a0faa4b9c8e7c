"""StoredProcessRunner across tenants, and on stored values that no longer read back: each tenant
has its own instances, a timeout steps the instance of the tenant that armed it, and a damaged
state or timeout payload is named, never quoted."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from ddd_celery.background import JobStatus
from ddd_celery.kernel import Actor, ExecutionContext
from ddd_celery.processes import (
    CorruptProcessStateError,
    ProcessCommandsJob,
    ProcessNotStartedError,
)
from ddd_celery.processes.store import StoredProcess
from examples.clinic.booking.process import AppointmentBooking, AppointmentBookingTimeoutJob
from tests.unit.process_managers.conftest import Deployment
from tests.unit.process_managers.processes import Counter, Reminder, ReminderTimeoutJob, Tally

SECRET = "vanished-secret"


@contextmanager
def tenant(d: Deployment, tenant_id: str | None) -> Iterator[None]:
    """The work of ``tenant_id``'s user, as a request or a job of that tenant runs it."""
    context = ExecutionContext(
        origin="test", actor=Actor("user", "u-1"), correlation_id="c-1", tenant_id=tenant_id
    )
    with d.scope.open(context):
        yield


def quotes_nothing(error: BaseException) -> None:
    """Neither ``error`` nor anything chained to it quotes the stored value."""
    seen: BaseException | None = error
    while seen is not None:
        assert SECRET not in f"{seen} {seen!r} {seen.args!r}"
        seen = seen.__cause__ or seen.__context__


def overwrite_state(d: Deployment, kept: StoredProcess, state: str) -> None:
    """Write ``state`` as the stored JSON of ``kept``, past the store's checks."""
    key = (kept.tenant_id or "", kept.process, kept.id)
    version, _, timeouts = d.processes._instances[key]
    d.processes._instances[key] = (version, state, timeouts)


# -- tenants ---------------------------------------------------------------------------


def test_another_tenant_neither_finds_nor_advances_an_instance(deployment: Deployment) -> None:
    d = deployment
    with tenant(d, "acme"):
        d.runner.handle(Counter, "order-1", Counter.add, 1)

    with tenant(d, "globex"):
        assert d.runner.find(Counter, "order-1") is None
        with pytest.raises(ProcessNotStartedError):
            d.runner.handle(Counter, "order-1", Counter.add_each, [5])
        own = d.runner.handle(Counter, "order-1", Counter.add, 10)
    assert d.runner.find(Counter, "order-1") is None  # outside any tenant: neither

    assert (own.version, own.state) == (1, {"total": 10})
    with tenant(d, "acme"):
        acme = d.runner.find(Counter, "order-1")
    assert acme is not None
    assert (acme.version, acme.state) == (1, {"total": 1})
    assert {(kept.tenant_id, kept.version) for kept in d.processes.list()} == {
        ("acme", 1),
        ("globex", 1),
    }


async def test_a_timeout_fired_for_one_tenants_instance_steps_that_instance_only(
    deployment: Deployment,
) -> None:
    d = deployment
    d.worker.register(ReminderTimeoutJob, lambda: ReminderTimeoutJob(d.runner))
    with tenant(d, "acme"):
        acme = d.runner.handle(Reminder, "r-1", Reminder.start, 1_000)
    with tenant(d, "globex"):
        globex = d.runner.handle(Reminder, "r-1", Reminder.start, 60_000)

    await d.worker.start()
    try:
        await d.timers.advance(2_000)  # acme's instant, the worker's poll; globex's is later
    finally:
        await d.worker.stop()

    fired = d.job(acme.timeouts["nudge"])
    assert (fired.status, fired.tenant_id) == (JobStatus.SUCCEEDED, "acme")
    with tenant(d, "acme"):
        after = d.runner.find(Reminder, "r-1")
    with tenant(d, "globex"):
        untouched = d.runner.find(Reminder, "r-1")
    assert after is not None
    assert (after.version, after.state, after.timeouts) == (2, {"nudged": 1}, {})
    assert untouched == globex
    assert d.job(globex.timeouts["nudge"]).status is JobStatus.QUEUED


def test_an_empty_tenant_id_is_refused_not_read_as_no_tenant(deployment: Deployment) -> None:
    d = deployment
    d.runner.handle(Counter, "order-1", Counter.add, 1)
    with tenant(d, ""), pytest.raises(ValueError, match="tenant id"):
        d.runner.find(Counter, "order-1")
    with tenant(d, ""), pytest.raises(ValueError, match="tenant id"):
        d.runner.handle(Counter, "order-1", Counter.add, 1)
    found = d.runner.find(Counter, "order-1")
    assert found is not None
    assert found.version == 1


# -- what no longer reads back ---------------------------------------------------------


def test_a_stored_state_its_model_no_longer_takes_is_named_never_quoted(
    deployment: Deployment,
) -> None:
    d = deployment
    with tenant(d, "acme"):
        d.runner.handle(Tally, "t-1", Tally.set_to, 3)
    [kept] = d.processes.list()
    overwrite_state(d, kept, f'{{"total": "{SECRET}"}}')

    with tenant(d, "acme"), pytest.raises(CorruptProcessStateError) as finding:
        d.runner.find(Tally, "t-1")
    with tenant(d, "acme"), pytest.raises(CorruptProcessStateError) as stepping:
        d.runner.handle(Tally, "t-1", Tally.set_to, 4)

    for error in (finding.value, stepping.value):
        assert str(error) == (
            "process 'tests.tally': the stored state of instance 't-1' no longer fits "
            "TallyState (int_parsing at field 'total')"
        )
        assert (error.code, error.instance_id, error.tenant_id) == (
            "CORRUPT_PROCESS_STATE",
            "t-1",
            "acme",
        )
        assert error.__cause__ is None
        assert error.__context__ is None
        quotes_nothing(error)
    assert d.processes.list()[0].version == 1
    assert d.store.list() == []  # the refused step enqueued nothing


def test_a_stored_state_that_is_no_longer_json_is_named_never_quoted(
    deployment: Deployment,
) -> None:
    d = deployment
    d.runner.handle(Counter, "c-1", Counter.add, 1)
    [kept] = d.processes.list()
    overwrite_state(d, kept, f'{{"total": "{SECRET}')

    with pytest.raises(CorruptProcessStateError, match="'c-1' no longer reads back") as refused:
        d.runner.handle(Counter, "c-1", Counter.add, 1)

    assert refused.value.process == "tests.counter"
    quotes_nothing(refused.value)


def test_a_decided_state_its_model_refuses_quotes_nothing_in_its_chain(
    deployment: Deployment,
) -> None:
    with pytest.raises(ValueError, match="field 'total' is refused by TallyState") as refused:
        deployment.runner.handle(Tally, "t-1", Tally.set_to, SECRET)
    assert refused.value.__context__ is None
    quotes_nothing(refused.value)


@pytest.mark.parametrize(
    "payload",
    [
        {"process": "booking.appointment-booking", "id": "a-1"},
        {"process": "booking.appointment-booking", "id": 7, "timeout": "payment"},
        {"process": SECRET, "id": "a-1", "timeout": "payment", "extra": SECRET},
        [SECRET],
        SECRET,
    ],
)
async def test_a_timeout_job_whose_stored_payload_is_garbage_is_dead_at_once_as_invalid(
    running: Deployment, payload: object
) -> None:
    d = running
    job_id = d.jobs.enqueue(
        AppointmentBookingTimeoutJob,
        {"process": "booking.appointment-booking", "id": "a-1", "timeout": "payment"},
        delay_ms=1_000,
    )
    d.store._jobs[job_id].payload = json.dumps(payload)  # as a forged or damaged row would

    await d.timers.advance(2_000)

    dead = d.job(job_id)
    assert (dead.status, dead.attempts, dead.last_error_code) == (
        JobStatus.DEAD,
        1,
        "INVALID_ENQUEUE",
    )
    assert d.runner.find(AppointmentBooking, "a-1") is None


def test_a_timeout_payload_that_is_not_one_is_refused_at_enqueue(deployment: Deployment) -> None:
    with pytest.raises(ValueError, match="refused by ProcessTimeoutPayload") as refused:
        deployment.jobs.enqueue(AppointmentBookingTimeoutJob, {"process": "p", "id": 7})
    assert getattr(refused.value, "code", None) == "INVALID_ENQUEUE"
    assert deployment.store.list() == []


@pytest.mark.parametrize(
    "payload",
    [
        {"process": "tests.counter", "id": "c", "version": 1},
        {"process": "tests.counter", "id": "c", "version": "1", "commands": []},
        {"process": "tests.counter", "id": "c", "version": 1, "commands": [SECRET]},
        [SECRET],
    ],
)
async def test_an_outbox_job_whose_stored_payload_is_garbage_is_dead_at_once_as_invalid(
    running: Deployment, payload: object
) -> None:
    d = running
    job_id = d.jobs.enqueue(
        ProcessCommandsJob,
        {"process": "tests.counter", "id": "c", "version": 1, "commands": []},
        delay_ms=1_000,
    )
    d.store._jobs[job_id].payload = json.dumps(payload)

    await d.timers.advance(2_000)

    dead = d.job(job_id)
    assert (dead.status, dead.attempts, dead.last_error_code) == (
        JobStatus.DEAD,
        1,
        "INVALID_ENQUEUE",
    )
    assert d.bus.executed == []
