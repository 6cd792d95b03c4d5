"""When a cluster lease expires: one function, used by the operator that enforces it and by the
API that must answer `expires_at` at once after an extension request."""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from lessor.resources.cluster import Extension
from lessor.resources.durations import parse_duration


def expires_at(
    bound_at: datetime.datetime, ttl: str, extensions: Sequence[Extension], max_extensions: int
) -> datetime.datetime:
    """Bound time plus the TTL plus every extension within the lease's budget."""
    total = parse_duration(ttl)
    for extension in list(extensions)[:max_extensions]:
        total += parse_duration(extension.ttl)
    return bound_at + total


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def micro_timestamp(moment: datetime.datetime) -> str:
    """RFC 3339 in UTC with microseconds, as Kubernetes writes metav1.MicroTime."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def timestamp(moment: datetime.datetime) -> str:
    """RFC 3339 in UTC with seconds precision, as Kubernetes writes metav1.Time."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def sandbox_expires_at(
    ready_at: datetime.datetime,
    ttl: str,
    extensions: Sequence[Extension],
    max_extensions: int,
    max_ttl: str | None,
) -> datetime.datetime:
    """A Sandbox lease's expiry: like a cluster lease's, and never past `max_ttl` measured from
    readiness (the ceiling the lease was admitted with), whatever the extensions add."""
    expiry = expires_at(ready_at, ttl, extensions, max_extensions)
    if max_ttl is not None:
        expiry = min(expiry, ready_at + parse_duration(max_ttl))
    return expiry


def provisioning_deadline(created: datetime.datetime, timeout: str) -> datetime.datetime:
    """Anchored to the lease object's creation: queueing and controller downtime count, and a
    replayed reconcile computes the same instant, so nothing ever resets it."""
    return created + parse_duration(timeout)
