"""A span per occurrence at beat's send and at the worker's run, linked through the message.

Beat ticks in this process on a fixed clock and publishes for real on Redis; a real worker (in a
thread, solo pool) runs the task. Spans go to the OpenTelemetry SDK's in-memory exporter, set as
the global tracer provider for one test and reset after it, as OpenTelemetry's own test
utilities do.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery.contrib.testing.worker import start_worker
from celery_support import AppFactory, Runs
from opentelemetry import trace
from opentelemetry.instrumentation.celery import CeleryInstrumentor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.util._once import Once
from probe_jobs import SYNC, AsyncProbeJob, Probe, SyncProbeJob

from ddd_celery.celery import CeleryJobs, install_jobs, run_now
from ddd_celery.celery.beat import JobBeatScheduler
from ddd_celery.celery.tracing import (
    RUN_SPAN,
    SEND_SPAN,
    TraceparentScope,
    run_span,
    send_span,
)
from ddd_celery.declarations import JobExecution
from ddd_celery.kernel import (
    ExecutionContext,
    FixedClock,
    FixedExecutionScope,
    InMemoryLock,
    SequentialIdGenerator,
    iso_ms,
    system_actor,
)

AT = (datetime.now(UTC) + timedelta(hours=2)).replace(minute=0, second=0, microsecond=0)
"""An instant of the hourly probe job still ahead of the real clock: beat's message expires by
the real clock, an hour or so after it."""
SECRET = "card 4242 declined"


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


def wire(make_app: AppFactory, probe: Probe, runs: Runs) -> tuple[Any, CeleryJobs, FixedClock]:
    app = make_app()
    clock = FixedClock(AT - timedelta(seconds=1))
    registry = install_jobs(
        app,
        jobs=[SyncProbeJob, AsyncProbeJob],
        providers={Probe: lambda: probe},
        lock=InMemoryLock(clock),
        clock=clock,
        ids=SequentialIdGenerator("corr-"),
        on_run=runs,
        environ={},
        settings={"probe.async": {"enabled": False}},
        routes={SYNC: f"{app.main}-probe"},
    )
    return app, registry, clock


@contextmanager
def worker(app: Any) -> Iterator[None]:
    with start_worker(app, pool="solo", perform_ping_check=False, loglevel="WARNING"):
        yield


def beat_sends_one_occurrence(app: Any, clock: FixedClock) -> None:
    """Start beat before the job's instant, and tick once on it: it sends that occurrence."""
    beat = JobBeatScheduler(app=app)
    clock.set(AT)
    beat.tick()


def named(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    [span] = [s for s in exporter.get_finished_spans() if s.name == name]
    return span


def traceparent_of(span: ReadableSpan) -> str:
    context = span.get_span_context()
    assert context is not None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def test_the_worker_s_run_span_is_the_child_of_beat_s_send_span_through_the_message(
    make_app: AppFactory, runs: Runs, spans: InMemorySpanExporter
) -> None:
    probe = Probe()
    app, _, clock = wire(make_app, probe, runs)

    with worker(app):
        beat_sends_one_occurrence(app, clock)
        runs.wait_for(1)

    sent, ran = named(spans, SEND_SPAN), named(spans, RUN_SPAN)
    assert sent.kind is SpanKind.PRODUCER
    assert ran.kind is SpanKind.CONSUMER
    assert ran.parent is not None
    assert sent.context is not None
    assert (ran.parent.trace_id, ran.parent.span_id) == (
        sent.context.trace_id,
        sent.context.span_id,
    )
    assert ran.parent.is_remote
    occurrence = {
        "ddd_celery.job": SYNC,
        "ddd_celery.scheduled_at": iso_ms(AT),
        "ddd_celery.correlation_id": "corr-1",
    }
    assert dict(sent.attributes or {}) == occurrence
    assert dict(ran.attributes or {}) == occurrence | {"ddd_celery.outcome": "succeeded"}
    assert ran.status.status_code is StatusCode.UNSET
    [seen] = probe.seen
    assert seen.context is not None
    assert seen.context.traceparent == traceparent_of(ran)


def test_a_failed_run_s_span_is_an_error_with_its_code_and_type_never_its_message(
    make_app: AppFactory, runs: Runs, spans: InMemorySpanExporter
) -> None:
    def fail(execution: JobExecution) -> None:
        raise ValueError(SECRET)

    app, _, clock = wire(make_app, Probe(behaviour=fail), runs)

    with worker(app):
        beat_sends_one_occurrence(app, clock)
        runs.wait_for(1)

    ran = named(spans, RUN_SPAN)
    assert ran.status.status_code is StatusCode.ERROR
    assert ran.status.description == "UNEXPECTED_ERROR (ValueError)"
    attributes = dict(ran.attributes or {})
    assert attributes["ddd_celery.outcome"] == "failed"
    assert attributes["ddd_celery.error_code"] == "UNEXPECTED_ERROR"
    assert attributes["error.type"] == "ValueError"
    assert ran.events == ()
    assert all(SECRET not in str(value) for value in attributes.values())


def test_with_the_celery_instrumentation_the_run_span_nests_in_its_spans_in_one_trace(
    make_app: AppFactory, runs: Runs, spans: InMemorySpanExporter
) -> None:
    app, _, clock = wire(make_app, Probe(), runs)
    instrumentor = CeleryInstrumentor()
    instrumentor.instrument(tracer_provider=trace.get_tracer_provider())
    try:
        with worker(app):
            beat_sends_one_occurrence(app, clock)
            runs.wait_for(1)
    finally:
        instrumentor.uninstrument()

    sent, ran = named(spans, SEND_SPAN), named(spans, RUN_SPAN)
    publish = named(spans, f"apply_async/{SYNC}")
    task = named(spans, f"run/{SYNC}")
    chain = [sent, publish, task, ran]
    for parent, child in itertools.pairwise(chain):
        assert child.parent is not None
        assert parent.context is not None
        assert child.parent.span_id == parent.context.span_id, (parent.name, child.name)
    assert len({span.context.trace_id for span in chain if span.context}) == 1
    assert ran.kind is SpanKind.INTERNAL
    assert ran.links == ()
    assert len([s for s in spans.get_finished_spans() if s.name == RUN_SPAN]) == 1


def test_run_now_nests_its_run_span_under_the_caller_s_span(
    make_app: AppFactory, runs: Runs, spans: InMemorySpanExporter
) -> None:
    probe = Probe()
    app, _, _ = wire(make_app, probe, runs)

    with trace.get_tracer("test").start_as_current_span("POST /operations/run-job"):
        run_now(app, SYNC)

    request, ran = named(spans, "POST /operations/run-job"), named(spans, RUN_SPAN)
    assert ran.parent is not None
    assert request.context is not None
    assert ran.parent.span_id == request.context.span_id
    assert ran.kind is SpanKind.INTERNAL
    assert probe.seen[0].context is not None
    assert probe.seen[0].context.traceparent == traceparent_of(ran)


def test_a_run_under_a_span_of_another_trace_nests_in_it_and_links_to_the_message_s_context(
    spans: InMemorySpanExporter,
) -> None:
    message = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    # as the Celery instrumentation's run span does with use_span_links=True: a new trace
    with (
        trace.get_tracer("test").start_as_current_span("run/probe.sync") as task,
        run_span(SYNC, AT, "corr-1", carrier={"traceparent": message}) as span,
    ):
        assert span.traceparent is not None
        assert span.traceparent.split("-")[1] == f"{task.get_span_context().trace_id:032x}"

    ran = named(spans, RUN_SPAN)
    assert ran.parent is not None
    assert ran.parent.span_id == task.get_span_context().span_id
    [link] = ran.links
    assert (f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}") == (
        "0af7651916cd43dd8448eb211c80319c",
        "b7ad6b7169203331",
    )


def test_a_publish_that_fails_ends_its_send_span_in_error_with_the_type_only(
    spans: InMemorySpanExporter,
) -> None:
    carried: list[dict[str, str]] = []

    def publish() -> None:
        with send_span(SYNC, AT, "corr-1") as headers:
            carried.append(headers)
            raise ConnectionError(SECRET)

    with pytest.raises(ConnectionError):
        publish()

    assert carried[0]["traceparent"].startswith("00-")

    sent = named(spans, SEND_SPAN)
    assert sent.status.status_code is StatusCode.ERROR
    assert sent.status.description == "ConnectionError"
    assert sent.events == ()


def test_the_scope_takes_the_run_s_traceparent_unless_the_context_has_one() -> None:
    inner = FixedExecutionScope()
    scope = TraceparentScope(inner, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    context = ExecutionContext(origin="schedule", actor=system_actor(SYNC), correlation_id="c")
    kept = ExecutionContext(
        origin="schedule", actor=system_actor(SYNC), correlation_id="c", traceparent="00-kept"
    )

    with scope.open(context) as opened:
        assert scope.current() is opened
    with scope.open(kept):
        pass

    assert [c.traceparent for c in inner.opened] == [
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "00-kept",
    ]


WITHOUT_OPENTELEMETRY = textwrap.dedent(
    """
    import sys
    from datetime import UTC, datetime

    sys.modules["opentelemetry"] = None  # as if the [otel] extra were not installed

    from ddd_celery.celery.tracing import TRACING, run_span, send_span

    at = datetime(2026, 3, 2, 10, tzinfo=UTC)
    received = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with send_span("probe.sync", at, "c-1") as headers:
        pass
    with run_span("probe.sync", at, "c-1", carrier={"traceparent": received}) as span:
        pass
    loaded = sorted(n for n, m in sys.modules.items() if n.startswith("opentelemetry") and m)
    print(TRACING, headers, span.traceparent == received, loaded)
    """
)


def test_without_opentelemetry_nothing_is_traced_nor_imported_and_the_traceparent_passes() -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_OPENTELEMETRY],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )

    assert done.stdout.split() == ["False", "{}", "True", "[]"]
