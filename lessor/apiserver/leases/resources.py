"""The Falcon resources of cluster leases and pools: /v1/leases and /v1/pools."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Protocol

import falcon
from pydantic import Field

from lessor.apiserver.auth.middleware import principal
from lessor.apiserver.http.answers import responds
from lessor.apiserver.http.bodies import CreateLease, ExtendLease
from lessor.apiserver.http.queries import Digits, Query
from lessor.apiserver.http.resource import Resource
from lessor.apiserver.http.shedding import set_aside
from lessor.apiserver.leases.cluster_leases import MAX_WAIT_SECONDS, LeaseService
from lessor.apiserver.leases.diagnostics import DiagnosticsService
from lessor.apiserver.leases.lease_events import LeaseEvents
from lessor.apiserver.leases.pools import PoolService
from lessor.apiserver.state.held_requests import HeldRequests, client_gone
from lessor.protocol.responses import (
    DiagnosticsBundle,
    Expiry,
    Lease,
    LeaseCreated,
    LeaseEvent,
    LeaseSummary,
    PoolLease,
    PoolRecord,
)


class LeaseServices(Protocol):
    """What the lease and pool routes use of the process's services."""

    @property
    def leases(self) -> LeaseService: ...

    @property
    def held(self) -> HeldRequests: ...

    @property
    def lease_events(self) -> LeaseEvents: ...

    @property
    def diagnostics(self) -> DiagnosticsService: ...

    @property
    def pools(self) -> PoolService: ...


class LeaseWait(Query):
    wait_seconds: Digits = Field(
        default=0,
        ge=0,
        le=MAX_WAIT_SECONDS,
        alias="waitSeconds",
        description="A long poll: a Pending lease is answered when it changes (bound, a new "
        "queue position, released), or after this many seconds; a lease in any other phase at "
        "once. The answer may come sooner, unchanged (a stopping server).",
    )


class LeasesResource(Resource[LeaseServices]):
    @responds(LeaseCreated, status=202)
    def on_post(self, req: falcon.Request, resp: falcon.Response, body: CreateLease) -> None:
        created = self.services.leases.create(principal(req), body)
        resp.media = created
        # Where a client whose answer was cut short reads the lease (spec 4.3, rule 3).
        resp.set_header("Location", f"/v1/leases/{created.id}")

    @responds(LeaseSummary, many=True)
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = self.services.leases.list_mine(principal(req))


class LeaseResource(Resource[LeaseServices]):
    @responds(Lease)
    def on_get(
        self, req: falcon.Request, resp: falcon.Response, lease_id: str, query: LeaseWait
    ) -> None:
        caller = principal(req)
        wait = query.wait_seconds
        with self.services.held.hold("lease", caller.owner) if wait else nullcontext(False) as may:
            if may:
                set_aside(req)
                req.context.waits = True
            gone = client_gone(req, "lease")
            resp.media = self.services.leases.read(caller, lease_id, wait if may else 0, gone)

    @responds(status=204)
    def on_delete(self, req: falcon.Request, resp: falcon.Response, lease_id: str) -> None:
        self.services.leases.release(principal(req), lease_id)

    @responds(Expiry)
    def on_patch(
        self, req: falcon.Request, resp: falcon.Response, lease_id: str, body: ExtendLease
    ) -> None:
        resp.media = self.services.leases.extend(principal(req), lease_id, body)


class LeaseEventsResource(Resource[LeaseServices]):
    @responds(LeaseEvent, many=True)
    def on_get(self, req: falcon.Request, resp: falcon.Response, lease_id: str) -> None:
        resp.media = self.services.lease_events.of(principal(req), lease_id)


class DiagnosticsResource(Resource[LeaseServices]):
    @responds(DiagnosticsBundle)
    def on_get(self, req: falcon.Request, resp: falcon.Response, lease_id: str) -> None:
        resp.media = self.services.diagnostics.bundle(principal(req), lease_id)


class PoolsResource(Resource[LeaseServices]):
    @responds(PoolRecord, many=True)
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = self.services.pools.records(principal(req))


class PoolResource(Resource[LeaseServices]):
    @responds(PoolRecord)
    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        resp.media = self.services.pools.one(principal(req), name)


class PoolLeasesResource(Resource[LeaseServices]):
    @responds(PoolLease, many=True)
    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        resp.media = self.services.pools.leases(principal(req), name)
