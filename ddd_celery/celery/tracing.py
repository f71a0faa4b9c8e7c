"""A span per occurrence, at beat's send and at the worker's run, linked through the message.

With ``opentelemetry-api`` installed (``pip install 'ddd-celery[otel]'``) and a tracer provider
set by the application:

- beat sends each occurrence inside a ``ddd_celery.schedule.send`` span (kind producer) and
  puts its context in the task message's headers (``traceparent``, through the global
  propagator);
- the worker runs it inside a ``ddd_celery.schedule.run`` span, whose parent is the span
  already current in the task when there is one (``opentelemetry-instrumentation-celery``'s
  ``run/<task>``, itself the child of its ``apply_async/<task>`` under beat's span), and
  otherwise the context the message carries (kind consumer). When that parent is not in the
  message's trace (the instrumentation's ``use_span_links``), the run span links to it;
- the run span's W3C ``traceparent`` is put in the execution scope of each run
  (``ExecutionContext.traceparent``), so what the job does, and the background jobs it
  enqueues, carry it.

Attributes are namespaced ``ddd_celery.*`` (``ddd_celery.job``, ``ddd_celery.scheduled_at``,
``ddd_celery.correlation_id``, ``ddd_celery.outcome``, ``ddd_celery.error_code``,
``ddd_celery.error_type``), as OpenTelemetry asks of attributes outside its conventions; a
failed run sets the span's status to error with its code and ``error.type``, never the error's
message (it quotes data). Without the package nothing is traced, nothing of it is imported, and
a ``traceparent`` a message carries is still put in the scope as it came. With the package but
no tracer provider set, a run with no parent (none current, none in the message) starts no span:
OpenTelemetry's would be the invalid one, and building it cost more than a short job.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from ddd_celery.kernel.instants import iso_ms
from ddd_celery.kernel.scope import ExecutionContext, ExecutionScope
from ddd_celery.scheduling.outcomes import JobRun, Outcome

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.propagators.textmap import Getter
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    from opentelemetry.trace.status import Status, StatusCode
except ImportError:  # the [otel] extra is not installed: nothing is traced
    TRACING = False
else:
    TRACING = True

SEND_SPAN = "ddd_celery.schedule.send"
RUN_SPAN = "ddd_celery.schedule.run"
TRACEPARENT = "traceparent"
TRACER_NAME = "ddd_celery"


def occurrence_attributes(
    job: str, scheduled_at: datetime, correlation_id: str | None
) -> dict[str, str]:
    """What identifies an occurrence on its spans."""
    attributes = {"ddd_celery.job": job, "ddd_celery.scheduled_at": iso_ms(scheduled_at)}
    if correlation_id is not None:
        attributes["ddd_celery.correlation_id"] = correlation_id
    return attributes


@contextmanager
def send_span(
    job: str, scheduled_at: datetime, correlation_id: str | None
) -> Iterator[dict[str, str]]:
    """The span of one publish; yields the headers that carry its context to the worker.

    An exception out of the block (the broker is down) sets the span's status to error with the
    exception's type, and goes on.
    """
    if not TRACING:
        yield {}
        return
    headers: dict[str, str] = {}
    if not _recording() and not trace.get_current_span().get_span_context().is_valid:
        # No SDK and no parent: the span would be the invalid one, which carries no traceparent.
        # The propagators still inject what the context holds (baggage).
        propagate.inject(headers)
        yield headers
        return
    tracer = trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(
        SEND_SPAN,
        kind=trace.SpanKind.PRODUCER,
        attributes=occurrence_attributes(job, scheduled_at, correlation_id),
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        propagate.inject(headers)
        try:
            yield headers
        except BaseException as error:
            span.set_attribute("error.type", type(error).__name__)
            span.set_status(Status(StatusCode.ERROR, type(error).__name__))
            raise


def sends_untraced() -> bool:
    """Whether ``send_span`` would start no span and carry no header here: then many sends
    may go as one write, with no span each (beat's messages written from templates)."""
    if not TRACING:
        return True
    if _recording() or trace.get_current_span().get_span_context().is_valid:
        return False
    headers: dict[str, str] = {}
    propagate.inject(headers)
    return not headers


@dataclass
class RunSpan:
    """The span of one run, as the run needs it: the traceparent for its scope, its outcome."""

    traceparent: str | None
    _span: Any = field(default=None, repr=False)

    def conclude(self, record: JobRun) -> None:
        """Set the outcome of the run on the span; a failure's status is its error code."""
        span = self._span
        if span is None or not span.is_recording():
            return
        span.set_attribute("ddd_celery.outcome", record.outcome.value)
        if record.tenant_id is not None:
            span.set_attribute("ddd_celery.tenant_id", record.tenant_id)
        if record.outcome is Outcome.FAILED:
            code, kind = record.error_code or "", record.error_type or ""
            span.set_attribute("ddd_celery.error_code", code)
            span.set_attribute("ddd_celery.error_type", kind)
            span.set_attribute("error.type", kind)
            span.set_status(Status(StatusCode.ERROR, f"{code} ({kind})"))


@contextmanager
def run_span(
    job: str, scheduled_at: datetime, correlation_id: str, *, carrier: Any = None
) -> Iterator[RunSpan]:
    """The span of one run, current within the block.

    ``carrier`` is what the message brought (the task's request, or a mapping of headers);
    None for a run asked in this process (``run_now``), which nests under the caller's span.
    """
    received = _header(carrier, TRACEPARENT)
    if not TRACING:
        yield RunSpan(received)
        return
    sent = None if carrier is None else propagate.extract(carrier, otel_context.Context(), _getter)
    message = (
        trace.INVALID_SPAN_CONTEXT
        if sent is None
        else trace.get_current_span(sent).get_span_context()
    )
    current = trace.get_current_span().get_span_context()
    if not (current.is_valid or message.is_valid) and not _recording():
        # No parent and no SDK: the span would be the invalid one, as when nothing is current.
        yield RunSpan(received)
        return
    parent = current if current.is_valid else message
    links = (
        [trace.Link(message)] if message.is_valid and message.trace_id != parent.trace_id else []
    )
    consumer = carrier is not None and not current.is_valid
    tracer = trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(
        RUN_SPAN,
        context=None if current.is_valid else sent,
        kind=trace.SpanKind.CONSUMER if consumer else trace.SpanKind.INTERNAL,
        attributes=occurrence_attributes(job, scheduled_at, correlation_id),
        links=links,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield RunSpan(_traceparent_of_current() or received, span)


class TraceparentScope(ExecutionScope):
    """``scope`` that opens each context with ``traceparent``, unless it already has one."""

    def __init__(self, scope: ExecutionScope, traceparent: str | None) -> None:
        self._scope = scope
        self._traceparent = traceparent

    @contextmanager
    def open(self, context: ExecutionContext) -> Iterator[ExecutionContext]:
        if context.traceparent is None and self._traceparent is not None:
            context = replace(context, traceparent=self._traceparent)
        with self._scope.open(context) as opened:
            yield opened

    def current(self) -> ExecutionContext | None:
        return self._scope.current()


def _recording() -> bool:
    """Whether a tracer provider is set that may record spans: without one (no SDK, or
    OpenTelemetry's no-op provider) a span has no context of its own, only its parent's."""
    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def _traceparent_of_current() -> str | None:
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, otel_context.get_current())
    return carrier.get(TRACEPARENT)


def _header(carrier: Any, key: str) -> str | None:
    """A header of a message: a key of a mapping, an attribute of Celery's task request."""
    if carrier is None:
        return None
    value = carrier.get(key) if isinstance(carrier, Mapping) else getattr(carrier, key, None)
    return value if isinstance(value, str) else None


if TRACING:

    class _HeaderGetter(Getter[Any]):
        """Reads a header from a mapping or from Celery's request, whose headers are attributes."""

        def get(self, carrier: Any, key: str) -> list[str] | None:
            value = _header(carrier, key)
            return None if value is None else [value]

        def keys(self, carrier: Any) -> list[str]:
            return list(carrier) if isinstance(carrier, Mapping) else []

    _getter = _HeaderGetter()
