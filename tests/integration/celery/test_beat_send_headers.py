"""The headers beat's send span gives a message when no tracer provider is set.

Without an SDK, OpenTelemetry's span is its parent's, or the invalid one when there is none:
``send_span`` then starts none, and the message carries what the propagators inject all the
same (the parent's ``traceparent``, the context's baggage), nothing more.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from opentelemetry import baggage, trace
from opentelemetry import context as otel_context
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from ddd_celery.celery.tracing import send_span

AT = datetime(2026, 3, 2, 10, tzinfo=UTC)


@pytest.fixture(autouse=True)
def no_tracer_provider() -> None:
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def headers_within(context: Context) -> dict[str, str]:
    token = otel_context.attach(context)
    try:
        with send_span("billing.remind", AT, "id-1") as headers:
            return dict(headers)
    finally:
        otel_context.detach(token)


@pytest.fixture
def parent() -> SpanContext:
    return SpanContext(
        trace_id=0x0AF7651916CD43DD8448EB211C80319C,
        span_id=0xB7AD6B7169203331,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )


def test_with_nothing_in_the_context_a_message_carries_no_trace_header() -> None:
    assert headers_within(Context()) == {}


def test_the_context_s_baggage_is_carried_as_opentelemetry_injects_it() -> None:
    assert headers_within(baggage.set_baggage("tenant", "acme", Context())) == {
        "baggage": "tenant=acme"
    }


def test_a_parent_in_the_context_is_carried_as_the_message_s_traceparent(
    parent: SpanContext,
) -> None:
    context = trace.set_span_in_context(NonRecordingSpan(parent), Context())

    assert headers_within(context) == {
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    }
