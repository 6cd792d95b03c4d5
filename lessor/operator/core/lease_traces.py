"""The operator's spans of a lease: children of the API request that created it.

The API server writes that request's trace context in the lease's `lessor.dev/traceparent`
annotation (lessor.tracing); every span here is a child of it, so "my lease took 40 s" is one
trace: the request, the wait in the queue, the cluster's start if the lease waited for it, the
bind, the diagnostics capture, the teardown and the release. A lease without the annotation
(tracing off when it was created) gets no span: reconciles never start traces of their own.

What happened across several reconciles (a wait, a start, a teardown) is recorded when it
ends, with its start and end taken from the objects' own timestamps, as a span of what already
happened; what one reconcile does (the bind, a capture) is a span around it. Attributes are
names and types only, never a credential (tests/integration/test_tracing.py reads them all).
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterator

from opentelemetry.context import Context

from lessor import tracing
from lessor.protocol.timestamps import utcnow
from lessor.resources.cluster import ClusterLease

_TRACER = tracing.tracer(__name__)


def _parent(lease: ClusterLease) -> Context | None:
    if not tracing.enabled():
        return None
    return tracing.context_of(lease.metadata.annotations)


def _attributes(lease: ClusterLease, extra: dict[str, str] | None) -> dict[str, str]:
    return {
        "k8s.namespace.name": lease.metadata.namespace or "",
        "lessor.lease.name": lease.metadata.name or "",
        "lessor.pool.name": lease.spec.pool,
        **(extra or {}),
    }


def record(
    name: str,
    lease: ClusterLease,
    start: datetime.datetime,
    end: datetime.datetime | None = None,
    attributes: dict[str, str] | None = None,
) -> None:
    """A span of `lease`'s trace for what happened from `start` to `end` (now by default)."""
    parent = _parent(lease)
    if parent is None:
        return
    span = _TRACER.start_span(
        name,
        context=parent,
        start_time=tracing.nanoseconds(start),
        attributes=_attributes(lease, attributes),
    )
    span.end(end_time=tracing.nanoseconds(end or utcnow()))


@contextlib.contextmanager
def span(
    name: str, lease: ClusterLease, attributes: dict[str, str] | None = None
) -> Iterator[None]:
    """A span of `lease`'s trace around what the block does."""
    parent = _parent(lease)
    if parent is None:
        yield
        return
    with _TRACER.start_as_current_span(
        name,
        context=parent,
        attributes=_attributes(lease, attributes),
    ):
        yield
