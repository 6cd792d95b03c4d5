"""A server span for each API request, when tracing is on (lessor.tracing).

The span is the child of the caller's `traceparent` (the CLI sends one per command), active
while the route runs, so a lease created now carries its context to the operator in the
lease's annotation. Its attributes are the request's shape only (method, route template,
status), never a header, a body or a query string: those carry credentials. Written here
rather than with opentelemetry-instrumentation-falcon: Observe already knows the route
template, the long polls and the answer, and the instrumentation packages are beta releases
pinned to their own semantic-convention versions.
"""

from __future__ import annotations

import falcon
from opentelemetry import context, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from lessor import tracing

_TRACER = tracing.tracer(__name__)


def start(req: falcon.Request) -> None:
    if not tracing.enabled():
        return
    parent = tracing.context_of({tracing.TRACEPARENT: req.get_header("traceparent") or ""})
    span = _TRACER.start_span(req.method[:16], context=parent, kind=SpanKind.SERVER)
    req.context.span = span
    req.context.span_token = context.attach(trace.set_span_in_context(span))


def end(req: falcon.Request, resp: falcon.Response, route: str, method: str) -> None:
    span: trace.Span | None = getattr(req.context, "span", None)
    if span is None:
        return
    span.update_name(f"{method} {route}")
    span.set_attribute("http.request.method", method)
    span.set_attribute("http.route", route)
    span.set_attribute("http.response.status_code", resp.status_code)
    if resp.status_code >= 500:
        span.set_status(Status(StatusCode.ERROR))
    span.end()
    context.detach(req.context.span_token)
