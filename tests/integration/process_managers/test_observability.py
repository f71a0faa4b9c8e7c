"""Each step counted in ``process_steps_total`` by outcome, and traced under what caused it.

Spans go to the OpenTelemetry SDK's in-memory exporter, set as the global tracer provider for
one test and reset after it, as in ``tests/integration/celery/test_tracing.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from opentelemetry.util._once import Once
from prometheus_client import CollectorRegistry

from ddd_celery.background import StoredJobQueue
from ddd_celery.celery.processes import OpenTelemetryStepTracer, current_traceparent
from ddd_celery.kernel import (
    Actor,
    ExecutionContext,
    InMemoryMetrics,
    Labels,
    SequentialIdGenerator,
)
from ddd_celery.processes import (
    PROCESS_STEPS_COUNTER,
    ProcessConflictError,
    ProcessNotStartedError,
    StoredProcessRunner,
)
from ddd_celery.processes.runner import STEP_NOT_COUNTED
from ddd_celery.prometheus import PrometheusMetrics
from examples.clinic.booking.process import (
    AppointmentBooking,
    PaymentReceived,
    RequestPayment,
    SlotHeld,
)
from tests.unit.process_managers.conftest import Deployment
from tests.unit.process_managers.processes import Counter, Reminder

BOOKING = "booking.appointment-booking"
SECRET = "ada@example.test"


def held(appointment: str = "a-1", pay_within_ms: int = 60_000) -> SlotHeld:
    return SlotHeld(
        appointment_id=appointment,
        patient=SECRET,
        slot="2026-10-02T09:00",
        amount_cents=4_500,
        pay_within_ms=pay_within_ms,
    )


def observed(d: Deployment, **options: object) -> StoredProcessRunner:
    """The deployment's runner again, observed: the worker's timeout job builds this one."""
    d.jobs = StoredJobQueue(
        store=d.store,
        clock=d.clock,
        ids=SequentialIdGenerator("job-"),
        scope=d.scope,
        unit_of_work=d.unit_of_work,
        traceparent=current_traceparent,
    )
    d.runner = StoredProcessRunner(
        store=d.processes,
        jobs=d.jobs,
        commands=d.bus,
        unit_of_work=d.unit_of_work,
        sleep=lambda seconds: None,
        **options,  # type: ignore[arg-type]
    )
    return d.runner


def _someone_else_saves_first(d: Deployment) -> None:
    stored = d.processes.load("tests.counter", "c", tenant_id=None)
    assert stored is not None
    d.processes.save(
        type(stored)(stored.process, stored.id, stored.version + 1, {"total": 0}),
        expected_version=stored.version,
    )


def test_each_step_is_counted_by_process_step_and_outcome() -> None:
    d = Deployment()
    metrics = InMemoryMetrics()
    runner = observed(d, metrics=metrics, max_attempts=2)

    runner.handle(AppointmentBooking, "a-1", AppointmentBooking.slot_held, held())
    runner.handle(Counter, "c", Counter.add, 1)
    Counter.before_deciding = staticmethod(lambda: _someone_else_saves_first(d))
    try:
        with pytest.raises(ProcessConflictError):
            runner.handle(Counter, "c", Counter.add, 5)
    finally:
        Counter.before_deciding = staticmethod(lambda: None)
    with pytest.raises(ProcessNotStartedError):
        runner.handle(
            AppointmentBooking,
            "a-9",
            AppointmentBooking.payment_received,
            PaymentReceived(appointment_id="a-9", payment_id="p-9"),
        )
    runner.timeout(Reminder, {"id": "r-1", "timeout": "nudge", "job_id": "job-x"})

    def failing_use_case() -> None:
        with d.unit_of_work.begin():
            runner.handle(Counter, "c", Counter.add, 1)
            raise RuntimeError("the caller's use case fails: the step never committed")

    with pytest.raises(RuntimeError):
        failing_use_case()

    counted = sorted(
        (s["process"], s["step"], s["outcome"], s["error_code"])
        for s in metrics.series(PROCESS_STEPS_COUNTER)
        for _ in range(int(metrics.counter(PROCESS_STEPS_COUNTER, **s)))
    )
    assert counted == [
        (BOOKING, "payment_received", "failed", "PROCESS_NOT_STARTED"),
        (BOOKING, "slot_held", "succeeded", ""),
        ("tests.counter", "add", "conflict", "PROCESS_CONFLICT"),
        ("tests.counter", "add", "retried", "STALE_PROCESS_VERSION"),
        ("tests.counter", "add", "succeeded", ""),
        ("tests.reminder", "nudge", "ignored", ""),
    ]


class BrokenMetrics(InMemoryMetrics):
    def increment(self, name: str, labels: Labels, value: float = 1.0) -> None:
        raise RuntimeError("the metrics backend is down")


def test_metrics_that_raise_fail_no_step_and_say_so_once_per_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    d = Deployment()
    runner = observed(d, metrics=BrokenMetrics())

    with caplog.at_level(logging.WARNING, logger="ddd_celery.processes"):
        found = runner.handle(AppointmentBooking, "a-1", AppointmentBooking.slot_held, held())
        with pytest.raises(ProcessNotStartedError):  # its own error, not the metrics'
            runner.handle(
                AppointmentBooking,
                "a-9",
                AppointmentBooking.payment_received,
                PaymentReceived(appointment_id="a-9", payment_id="p-9"),
            )

    assert found.version == 1
    assert d.bus.executed != []
    warned = [
        (r.step, r.outcome, r.error_type)  # type: ignore[attr-defined]
        for r in caplog.records
        if r.getMessage() == STEP_NOT_COUNTED
    ]
    assert warned == [
        ("slot_held", "succeeded", "RuntimeError"),
        ("payment_received", "failed", "RuntimeError"),
    ]


def test_the_step_counter_is_exposed_to_prometheus_with_its_help() -> None:
    registry = CollectorRegistry()
    runner = observed(Deployment(), metrics=PrometheusMetrics(registry))

    runner.handle(AppointmentBooking, "a-1", AppointmentBooking.slot_held, held())

    labels = {"process": BOOKING, "step": "slot_held", "outcome": "succeeded", "error_code": ""}
    assert registry.get_sample_value(PROCESS_STEPS_COUNTER, labels) == 1.0
    [family] = [m for m in registry.collect() if m.name == "process_steps"]
    assert family.documentation == "Steps of process managers, by outcome."


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The global tracer provider, exporting to memory, for this test only."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        provider.shutdown()
        trace._TRACER_PROVIDER = None
        trace._TRACER_PROVIDER_SET_ONCE = Once()


def named(spans: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in spans.get_finished_spans() if span.name == name]


def test_a_step_has_a_span_under_the_current_one_its_commands_sent_inside_it(
    spans: InMemorySpanExporter,
) -> None:
    d = Deployment()
    sent_in: list[int] = []
    d.bus = type(d.bus)()
    d.bus.register(
        RequestPayment,
        lambda command: sent_in.append(trace.get_current_span().get_span_context().span_id),
    )
    runner = observed(d, tracer=OpenTelemetryStepTracer())
    acme = ExecutionContext("test", Actor("user", "u-1"), "c-1", tenant_id="acme")

    with (
        trace.get_tracer("tests").start_as_current_span("POST /bookings") as request,
        d.scope.open(acme),
    ):
        runner.handle(AppointmentBooking, "a-1", AppointmentBooking.slot_held, held())

    [step] = named(spans, f"{BOOKING}/slot_held")
    assert step.parent is not None
    assert step.parent.span_id == request.get_span_context().span_id
    assert step.context.trace_id == request.get_span_context().trace_id
    assert dict(step.attributes or {}) == {
        "ddd_celery.process": BOOKING,
        "ddd_celery.step": "slot_held",
        "ddd_celery.instance_id": "a-1",
        "ddd_celery.tenant_id": "acme",
        "ddd_celery.outcome": "succeeded",
        "ddd_celery.attempts": 1,
        "ddd_celery.version": 1,
    }
    assert step.status.status_code is StatusCode.UNSET
    assert sent_in == [step.context.span_id]


async def test_a_timeout_step_is_traced_under_the_step_that_armed_it_through_its_job(
    spans: InMemorySpanExporter,
) -> None:
    d = Deployment()
    observed(d, tracer=OpenTelemetryStepTracer())
    await d.worker.start()
    try:
        armed = d.runner.handle(
            AppointmentBooking, "a-1", AppointmentBooking.slot_held, held(pay_within_ms=1_000)
        )
        await d.timers.advance(2_000)  # the timeout's instant, then the worker's poll
    finally:
        await d.worker.stop()

    [first] = named(spans, f"{BOOKING}/slot_held")
    [fired] = named(spans, f"{BOOKING}/payment_timed_out")
    carried = d.job(armed.timeouts["payment"]).enqueued_by.traceparent
    assert carried is not None
    assert carried.startswith(f"00-{first.context.trace_id:032x}-{first.context.span_id:016x}-")
    assert fired.parent is not None
    assert fired.parent.span_id == first.context.span_id
    assert fired.context.trace_id == first.context.trace_id
    assert (fired.attributes or {})["ddd_celery.timeout"] == "payment"
    assert (fired.attributes or {})["ddd_celery.version"] == 2


def test_a_failed_step_and_a_lost_race_have_an_error_status_with_their_code_only(
    spans: InMemorySpanExporter,
) -> None:
    d = Deployment()
    runner = observed(d, tracer=OpenTelemetryStepTracer(), max_attempts=2)
    runner.handle(Counter, "c", Counter.add, 1)
    with pytest.raises(ProcessNotStartedError):
        runner.handle(
            AppointmentBooking,
            "a-9",
            AppointmentBooking.payment_received,
            PaymentReceived(appointment_id="a-9", payment_id=SECRET),
        )
    Counter.before_deciding = staticmethod(lambda: _someone_else_saves_first(d))
    try:
        with pytest.raises(ProcessConflictError):
            runner.handle(Counter, "c", Counter.add, 5)
    finally:
        Counter.before_deciding = staticmethod(lambda: None)

    [failed] = named(spans, f"{BOOKING}/payment_received")
    assert failed.parent is None  # nothing current, no traceparent in the scope: a root
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == "PROCESS_NOT_STARTED (ProcessNotStartedError)"
    attributes = dict(failed.attributes or {})
    assert attributes["ddd_celery.outcome"] == "failed"
    assert attributes["error.type"] == "ProcessNotStartedError"
    assert SECRET not in repr(attributes)
    assert failed.events == ()
    [_, lost] = named(spans, "tests.counter/add")
    assert (lost.attributes or {})["ddd_celery.outcome"] == "conflict"
    assert (lost.attributes or {})["ddd_celery.attempts"] == 2
    assert lost.status.description == "PROCESS_CONFLICT (ProcessConflictError)"


def test_without_a_tracer_provider_nor_a_parent_no_step_span_is_started() -> None:
    d = Deployment()
    runner = observed(d, tracer=OpenTelemetryStepTracer())

    found = runner.handle(AppointmentBooking, "a-1", AppointmentBooking.slot_held, held())

    assert found.version == 1
    assert current_traceparent() is None
    assert d.job(found.timeouts["payment"]).enqueued_by.traceparent is None
