"""OpenTelemetry traces of the operator and the API server: off unless an OTLP endpoint is set.

Configured by the SDK's own environment variables, so a platform team sets what it sets for
every other service: `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`)
turns tracing on, and `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG` choose the sampling
(the SDK's default, `parentbased_always_on`, follows the caller's sampled flag). Spans go by
OTLP over HTTP (protobuf), the transport every collector accepts without gRPC in the image.

With no endpoint nothing is configured: the API's tracer is the no-op one, `enabled()` is
False, and the request path skips tracing entirely (bench.api_throughput measured it).

A lease's trace crosses the two components on the lease object: the API server writes its
request span's context in the `lessor.dev/traceparent` annotation (W3C trace context), and the
operator makes its spans of that lease (bind, the cluster's start and teardown, diagnostics,
the release) children of it. Nothing in a span is a credential: attributes are names, phases,
routes and statuses only (tests/integration/test_tracing.py reads every span back).
"""

from __future__ import annotations

import datetime
import os

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from lessor import __version__

ANNOTATION = "lessor.dev/traceparent"
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
TRACEPARENT = "traceparent"
# A traceparent is 55 characters; anything longer in an annotation or a header is not one.
MAX_TRACEPARENT = 64

_PROPAGATOR = TraceContextTextMapPropagator()
_enabled = False


def enabled() -> bool:
    """Whether this process exports spans (an OTLP endpoint was set when it started)."""
    return _enabled


def configure(service_name: str) -> bool:
    """Export this process's spans, as `service_name`, if an OTLP endpoint is set. Called once
    per process, in each gunicorn worker (a provider's export thread does not survive a
    fork). Returns whether tracing is on."""
    global _enabled  # noqa: PLW0603 - one provider per process, as the SDK's own global
    if _enabled or not any(os.environ.get(name) for name in ENDPOINT_VARIABLES):
        return _enabled
    # Imported only when on: the SDK and its exporter are not loaded by a process that
    # does not trace.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
        OTLPSpanExporter,
    )
    from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415

    resource = Resource.create({"service.name": service_name, "service.version": __version__})
    provider = TracerProvider(resource=resource)  # the sampler from OTEL_TRACES_SAMPLER
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _enabled = True
    return True


def shutdown() -> None:
    """Send the spans still buffered: called as the process stops."""
    provider = trace.get_tracer_provider()
    flush = getattr(provider, "shutdown", None)
    if _enabled and flush is not None:
        flush()


def tracer(name: str) -> trace.Tracer:
    return trace.get_tracer(name, __version__)


def context_of(carrier: dict[str, str] | None) -> Context | None:
    """The trace context a `traceparent` in `carrier` (headers, or a lease's annotations under
    ANNOTATION) names; None when there is none or it is malformed. A tenant's bytes: bounded,
    and parsed by the W3C propagator, which refuses anything but the exact format."""
    if not carrier:
        return None
    value = carrier.get(TRACEPARENT) or carrier.get(ANNOTATION)
    if not value or len(value) > MAX_TRACEPARENT:
        return None
    context = _PROPAGATOR.extract({TRACEPARENT: value})
    span = trace.get_current_span(context).get_span_context()
    return context if span.is_valid else None


def carried() -> dict[str, str]:
    """The annotation that carries the active span's context to the operator on the object
    being created: empty when tracing is off or no span is active."""
    if not _enabled:
        return {}
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return {ANNOTATION: carrier[TRACEPARENT]} if TRACEPARENT in carrier else {}


def nanoseconds(moment: datetime.datetime) -> int:
    """A span's start or end time: nanoseconds since the epoch."""
    return int(moment.timestamp() * 1e9)
