"""The run span with OpenTelemetry installed and no tracer provider set (yet), as in a worker
whose application configures none, or one that sets it after importing the jobs."""

from __future__ import annotations

from datetime import UTC, datetime

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

from ddd_celery.celery.tracing import RUN_SPAN, run_span

AT = datetime(2026, 3, 2, 10, tzinfo=UTC)
RECEIVED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_a_run_with_no_parent_has_no_trace_and_one_from_a_message_runs_in_its_trace() -> None:
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)

    with run_span("probe.sync", AT, "c-1", carrier={}) as bare:
        inside_bare = trace.get_current_span().get_span_context()
    with run_span("probe.sync", AT, "c-2", carrier={"traceparent": RECEIVED}) as carried:
        inside_carried = trace.get_current_span().get_span_context()

    assert bare.traceparent is None
    assert not inside_bare.is_valid
    assert carried.traceparent == RECEIVED
    assert (inside_carried.trace_id, inside_carried.span_id) == (
        0x0AF7651916CD43DD8448EB211C80319C,
        0xB7AD6B7169203331,
    )


def test_a_provider_set_after_the_first_run_records_the_next_one() -> None:
    with run_span("probe.sync", AT, "c-1", carrier={}):
        pass
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    try:
        with run_span("probe.sync", AT, "c-2", carrier={}) as recorded:
            pass
    finally:
        provider.shutdown()
        trace._TRACER_PROVIDER = None
        trace._TRACER_PROVIDER_SET_ONCE = Once()

    [span] = exporter.get_finished_spans()
    assert span.name == RUN_SPAN
    assert span.attributes is not None
    assert span.attributes["ddd_celery.correlation_id"] == "c-2"
    assert recorded.traceparent is not None
    assert recorded.traceparent.split("-")[1] == f"{span.context.trace_id:032x}"
