"""GET /v1/leases/:id/events: what the operator recorded on the caller's lease (bound, the
queue it waited in, extensions, its cluster failing, diagnostics, the release), as `kubectl
describe` lists an object's Events, for a user who has no access to lessor's namespace.

Only the lease's owner gets them (anyone else: 404, as for every lease route). They are the
lease's own Events, selected by its uid (not a former lease of the same name), read from
kube-apiserver when asked: a user asks after something went wrong, rarely, and kube-apiserver
keeps Events for an hour by default. Messages are the operator's, which never put a credential
in one; the last MAX_EVENTS are served, oldest first.
"""

from __future__ import annotations

from lessor.apiserver.auth.authenticator import Principal
from lessor.apiserver.leases.cluster_leases import LeaseService
from lessor.apiserver.state.kube import Kube
from lessor.protocol.json_object import Json
from lessor.protocol.responses import LeaseEvent

MAX_EVENTS = 50


def _seen(event: Json) -> tuple[str, str]:
    """When an Event (events.k8s.io/v1) was first and last seen: a repeated one has a series."""
    first = str(event.get("eventTime") or event.get("deprecatedFirstTimestamp") or "")
    series = event.get("series") or {}
    last = str(series.get("lastObservedTime") or event.get("deprecatedLastTimestamp") or first)
    return first, last


class LeaseEvents:
    def __init__(self, kube: Kube, leases: LeaseService) -> None:
        self.kube = kube
        self.leases = leases

    def of(self, principal: Principal, lease_id: str) -> list[LeaseEvent]:
        lease = self.leases.usable(principal, lease_id)
        found = self.kube.request(
            "GET",
            f"/apis/events.k8s.io/v1/namespaces/{self.kube.namespace}/events",
            query={"fieldSelector": f"regarding.uid={lease.metadata.uid}"},
        ).get("items", [])
        events = []
        for event in found:  # events.k8s.io/v1 Events: JSON, as every kind not lessor's
            first, last = _seen(event)
            series = event.get("series") or {}
            events.append(
                LeaseEvent(
                    type=event.get("type") or "Normal",
                    reason=str(event.get("reason") or ""),
                    message=str(event.get("note") or ""),
                    count=int(series.get("count") or event.get("deprecatedCount") or 1),
                    first_seen=first,
                    last_seen=last,
                )
            )
        events.sort(key=lambda event: (event.last_seen, event.first_seen))
        return events[-MAX_EVENTS:]
