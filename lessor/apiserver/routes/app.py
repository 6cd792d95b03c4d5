"""The Falcon WSGI application: its one route table, and the resources of the service itself
(status, health, readiness, metrics, the API's document). Each feature's resources live with
the feature (lessor.apiserver.leases.resources, sandboxes.resources, auth.resources); the error
contract is lessor.apiserver.http.observe's, authentication lessor.apiserver.auth.middleware's.

Stateless: everything a request needs is in the Kubernetes API (leases, pools, policies,
reservations) or recomputable from it, so any replica can serve any request.
"""

from __future__ import annotations

import falcon

from lessor import __version__, build_info, tracing
from lessor.apiserver.auth.authenticator import Principal
from lessor.apiserver.auth.middleware import Authenticate
from lessor.apiserver.auth.resources import LoginResource
from lessor.apiserver.http import metrics
from lessor.apiserver.http.answers import responds
from lessor.apiserver.http.client_address import ClientAddress, networks
from lessor.apiserver.http.listeners import Listeners, Wsgi
from lessor.apiserver.http.observe import Observe, add_error_handlers
from lessor.apiserver.http.resource import Resource
from lessor.apiserver.http.shedding import Shed
from lessor.apiserver.leases.resources import (
    DiagnosticsResource,
    LeaseEventsResource,
    LeaseResource,
    LeasesResource,
    PoolLeasesResource,
    PoolResource,
    PoolsResource,
)
from lessor.apiserver.routes import openapi
from lessor.apiserver.routes.route import Route
from lessor.apiserver.routes.services import Services
from lessor.apiserver.routes.settings import Settings
from lessor.apiserver.sandboxes.resources import (
    ExecutionLogsResource,
    ExecutionResource,
    ExecutionsResource,
    SandboxLeaseResource,
    SandboxLeasesResource,
    SandboxLogsResource,
    SandboxStreamResource,
)
from lessor.apiserver.sandboxes.stream_bridge import Limits
from lessor.apiserver.sandboxes.upgrade import StreamRoutes
from lessor.apiserver.state.session_slots import SessionSlots
from lessor.protocol.json_object import Json
from lessor.protocol.responses import Status, StatusAuth

# How long /readyz waits for a worker's first list of the AccessPolicies (the manifests give
# the readiness probe a timeout of 3 s).
READY_WAIT = 2.0


class StatusResource(Resource[Services]):
    """Anyone may ask (spec 4.6, 5.1): the version, how to authenticate, and a row per pool
    with its name, ready, leased and creating counts; a caller who sends credentials gets the
    pools it may use, whose rows add phase and quarantined. A deployment that does not want its
    pools' names and capacity told to strangers hides the anonymous rows
    (`--hide-pool-status`, docs/api.md)."""

    authentication = "optional"

    @responds(Status)
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        caller: Principal | None = req.context.principal
        auth = self.services.auth
        resp.media = Status(
            version=__version__,
            auth=StatusAuth(methods=auth.methods(), sessions=auth.session_methods()),
            pools=(
                []
                if caller is None and self.services.settings.hide_pool_status
                else self.services.pools.status_rows(caller)
            ),
            sandbox=self.services.sandbox.status(),
        )


class HealthResource(Resource[Services]):
    authentication = "none"

    @responds()
    def on_get(self, _req: falcon.Request, resp: falcon.Response) -> None:
        resp.content_type = falcon.MEDIA_TEXT
        resp.text = "ok\n"


class OpenApiResource(Resource[Services]):
    authentication = "none"

    def __init__(self, services: Services) -> None:
        super().__init__(services)
        self.document = api_document()

    def on_get(self, _req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = self.document


class MetricsResource(Resource[Services]):
    """The spec's `GET /metrics` at the API's address, without credentials: every worker's
    counts (prometheus multiprocess mode), as the metrics listener serves them. Registered only
    where the deployment gives /metrics no listener of its own (`--metrics-bind`): there it is
    a 404 (lessor.apiserver.http.listeners). Its labels are bounded as every request's are: a
    route template, a known method or `other`, a status."""

    authentication = "none"

    def on_get(self, _req: falcon.Request, resp: falcon.Response) -> None:
        body, content_type = metrics.exposition()
        resp.data = body
        resp.content_type = content_type


class ReadyResource(Resource[Services]):
    """Readiness, apart from liveness (/healthz): this worker can serve once it has read the
    AccessPolicies, which every authenticated request needs, and keeps reading them (its watch
    lists again after any failure, and is not synced meanwhile): so kube-apiserver is reachable
    with this server's credentials. A worker that is not ready answers 503, and the kubelet
    takes the pod out of its Service until it is, without restarting it."""

    authentication = "none"

    def on_get(self, _req: falcon.Request, resp: falcon.Response) -> None:
        resp.content_type = falcon.MEDIA_TEXT
        if self.services.policies.ready(timeout=READY_WAIT):
            resp.text = "ok\n"
        else:
            resp.status = falcon.HTTP_503
            resp.text = "not ready: the access policies could not be read from kube-apiserver\n"


_SANDBOX = "/v1/sandbox-leases/{lease_id}"
_EXECUTIONS = _SANDBOX + "/executions"

# Every route the Falcon app serves, and every path of its OpenAPI document, in the document's
# order (the WebSocket upgrades of attach and port-forward are answered in front of Falcon, by
# lessor.apiserver.sandboxes.upgrade; a plain GET of them comes here).
ROUTES: tuple[Route, ...] = (
    Route("/v1/leases", LeasesResource, openapi.leases),
    Route("/v1/leases/{lease_id}", LeaseResource, openapi.lease),
    Route("/v1/leases/{lease_id}/events", LeaseEventsResource, openapi.lease_events),
    Route("/v1/leases/{lease_id}/diagnostics", DiagnosticsResource, openapi.diagnostics),
    Route("/v1/pools", PoolsResource, openapi.pools),
    Route("/v1/pools/{name}", PoolResource, openapi.pool),
    Route("/v1/pools/{name}/leases", PoolLeasesResource, openapi.pool_leases),
    Route("/v1/sandbox-leases", SandboxLeasesResource, openapi.sandbox_leases, sandbox=True),
    Route(_SANDBOX, SandboxLeaseResource, openapi.sandbox_lease, sandbox=True),
    Route(_SANDBOX + "/logs", SandboxLogsResource, openapi.sandbox_logs, sandbox=True),
    Route(_SANDBOX + "/attach", SandboxStreamResource, openapi.attach, sandbox=True),
    Route(_SANDBOX + "/port-forward", SandboxStreamResource, openapi.port_forward, sandbox=True),
    Route(_EXECUTIONS, ExecutionsResource, openapi.executions, sandbox=True),
    Route(_EXECUTIONS + "/{execution}", ExecutionResource, openapi.execution, sandbox=True),
    Route(
        _EXECUTIONS + "/{execution}/logs",
        ExecutionLogsResource,
        openapi.execution_logs,
        sandbox=True,
    ),
    Route("/v1/login", LoginResource, openapi.login),
    Route("/v1/status", StatusResource, openapi.status),
    Route("/healthz", HealthResource, openapi.healthz),
    Route("/readyz", ReadyResource, None),
    Route("/metrics", MetricsResource, None, api_metrics=True),
    Route("/openapi.json", OpenApiResource, None),
)


def api_document() -> Json:
    """The OpenAPI document of ROUTES, as /openapi.json serves it."""
    return openapi.document(ROUTES)


def create_app(settings: Settings) -> Wsgi:
    """The WSGI application: the WebSocket routes in front of the Falcon app; /metrics at the
    API's address, or on the metrics listener only where there is one
    (lessor.apiserver.http.listeners)."""
    build_info.export()  # in the worker: its own multiprocess file holds the sample
    tracing.configure("lessor-apiserver")  # in the worker: an exporter's thread is not forked
    services = Services(settings)
    middleware: list[Shed | Observe | Authenticate] = [
        # Observe reads the body first: a request counts against the worker's bound only once
        # its body is here, so bodies still trickling in cannot make everyone else 429.
        Observe(ClientAddress(networks(settings.trusted_proxies))),
        Shed(settings.max_in_flight),  # before authenticating: an overloaded worker does no more
        Authenticate(lambda: services.auth),
    ]
    app = falcon.App(middleware=middleware)
    sandbox = settings.agent_sandbox_mode == "external"
    for route in ROUTES:
        if route.sandbox and not sandbox:
            continue
        if route.api_metrics and settings.metrics_port is not None:
            continue
        app.add_route(route.path, route.resource(services))
    if sandbox:
        services.sandbox.verdict()  # checked (and logged) as the worker starts
    add_error_handlers(app)
    limits = Limits(settings.sandbox_stream_idle_timeout, settings.sandbox_stream_max_duration)
    slots = SessionSlots(settings.sandbox_stream_max_per_identity)
    return Listeners(StreamRoutes(app, services, limits, slots), settings.metrics_port)
