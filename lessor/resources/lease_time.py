"""When a lease expires: one function, used by the operator that enforces it and by the API that
must answer `expires_at` at once after an extension request; and the other spans of a lease's
life that both components count with."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Protocol

from lessor.protocol.durations import parse_duration

# A reservation (apiserver/leases/reservations.py) is made just before its lease: one whose lease
# is not found is left this long, by the operator that deletes orphans and by the API server
# that reclaims a slot, before either treats the lease as never coming.
RESERVATION_ORPHAN_GRACE = datetime.timedelta(seconds=30)


class Extension(Protocol):
    """An extension intent of either kind of lease (lessor.resources.cluster.Extension)."""

    @property
    def ttl(self) -> str: ...


def expires_at(
    start: datetime.datetime,
    ttl: str,
    extensions: Sequence[Extension],
    max_extensions: int,
    max_ttl: str | None = None,
) -> datetime.datetime:
    """The start (a cluster lease's binding, a Sandbox lease's readiness) plus the TTL plus every
    extension within the lease's budget, and never past `max_ttl` measured from the start (the
    ceiling the lease was admitted with), whatever the extensions add."""
    total = parse_duration(ttl)
    for extension in list(extensions)[:max_extensions]:
        total += parse_duration(extension.ttl)
    if max_ttl is not None:
        total = min(total, parse_duration(max_ttl))
    return start + total


def provisioning_deadline(created: datetime.datetime, timeout: str) -> datetime.datetime:
    """Anchored to the lease object's creation: queueing and controller downtime count, and a
    replayed reconcile computes the same instant, so nothing ever resets it."""
    return created + parse_duration(timeout)
