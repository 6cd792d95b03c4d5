"""The Falcon WSGI application: its routes, and authentication (the error contract is
lessor.apiserver.http.observe's).

Stateless: everything a request needs is in the Kubernetes API (leases, pools, policies,
reservations) or recomputable from it, so any replica can serve any request.

Authentication is the `Authenticate` middleware's, not each responder's: every route requires a
principal unless its resource declares otherwise (`authentication = "none"` or `"optional"`),
so a responder cannot forget it and a new route is private until someone says it is public.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar, Literal

import falcon

from lessor import __version__, build_info, tracing
from lessor.apiserver.auth.authenticator import Authenticator, Principal
from lessor.apiserver.auth.sessions import DEFAULT_TTL
from lessor.apiserver.http import metrics, openapi
from lessor.apiserver.http.bodies import (
    CreateExecution,
    CreateLease,
    CreateSandboxLease,
    ExtendLease,
    ExtendSandboxLease,
    Login,
    parse,
)
from lessor.apiserver.http.client_address import ClientAddress, networks
from lessor.apiserver.http.errors import (
    BadRequestError,
    ForbiddenError,
    HttpNotFoundError,
    TooManyRequestsError,
    UpgradeRequiredError,
)
from lessor.apiserver.http.held_requests import HeldRequests, client_gone
from lessor.apiserver.http.listeners import Listeners, Wsgi
from lessor.apiserver.http.observe import Observe, add_error_handlers
from lessor.apiserver.http.responses import (
    DiagnosticsBundle,
    Execution,
    ExecutionLogs,
    ExecutionResult,
    Expiry,
    Lease,
    LeaseCreated,
    LeaseEvent,
    LeaseSummary,
    PoolLease,
    PoolRecord,
    SandboxExpiry,
    SandboxLease,
    SandboxLeaseCreated,
    SandboxLogs,
    SessionIssued,
    Status,
    conform,
    conform_each,
)
from lessor.apiserver.http.settings import Settings
from lessor.apiserver.http.shedding import Shed, set_aside
from lessor.apiserver.leases.cluster_leases import (
    MAX_WAIT_SECONDS,
    LeaseService,
    watch_active_leases,
)
from lessor.apiserver.leases.diagnostics import DiagnosticsService
from lessor.apiserver.leases.lease_events import LeaseEvents
from lessor.apiserver.leases.pools import PoolService
from lessor.apiserver.policy.store import PolicyStore
from lessor.apiserver.sandboxes.executions import ExecutionService
from lessor.apiserver.sandboxes.gate import SandboxGate
from lessor.apiserver.sandboxes.sandbox_leases import (
    LOG_TAIL_DEFAULT,
    LOG_TAIL_MAX,
    SandboxLeaseService,
)
from lessor.apiserver.sandboxes.stream_bridge import Limits
from lessor.apiserver.sandboxes.stream_slots import SessionSlots
from lessor.apiserver.sandboxes.streams import SandboxStreamService
from lessor.apiserver.sandboxes.upgrade import StreamRoutes
from lessor.apiserver.state.admission_limit import AdmissionLimiter
from lessor.apiserver.state.kube import Kube, kube
from lessor.apiserver.state.watched import WatchedObjects
from lessor.protocol.durations import parse_duration
from lessor.protocol.json_object import Json
from lessor.protocol.timestamps import timestamp
from lessor.resources.cluster import ClusterPool

log = logging.getLogger(__name__)
# How long /readyz waits for a worker's first list of the AccessPolicies (the manifests give
# the readiness probe a timeout of 3 s).
READY_WAIT = 2.0


class Services:
    """Per-process services, built on first use (after gunicorn's fork)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @property
    def kube(self) -> Kube:
        return kube(self.settings.kubeconfig, self.settings.namespace)

    @cached_property
    def policies(self) -> PolicyStore:
        return PolicyStore(lambda: self.kube)

    @cached_property
    def auth(self) -> Authenticator:
        signed = AdmissionLimiter(
            self.settings.ssh_signed_rate, self.settings.ssh_signed_burst, scope="ssh"
        )
        return Authenticator(
            self.policies,
            self.kube,
            self.settings.ssh_audiences,
            signed,
            session_key_ttl=self.settings.session_key_ttl,
            max_sessions_per_owner=self.settings.max_sessions_per_owner,
        )

    @cached_property
    def logins(self) -> AdmissionLimiter:
        """Each login writes a session record: a bucket per owner, as for creates."""
        return AdmissionLimiter(self.settings.login_rate, self.settings.login_burst, scope="login")

    @cached_property
    def leases(self) -> LeaseService:
        limiter = AdmissionLimiter(
            self.settings.lease_admission_rate,
            self.settings.lease_admission_burst,
            scope="cluster",
        )
        return LeaseService(
            self.kube,
            limiter,
            self.settings.default_max_concurrent_leases,
            self.watched_leases,
            self.watched_pools,
        )

    @cached_property
    def watched_leases(self) -> WatchedObjects:
        return watch_active_leases(lambda: self.kube)

    @cached_property
    def watched_pools(self) -> WatchedObjects:
        return WatchedObjects(lambda: self.kube, ClusterPool.crd.plural)

    @cached_property
    def lease_events(self) -> LeaseEvents:
        return LeaseEvents(self.kube, self.leases)

    @cached_property
    def diagnostics(self) -> DiagnosticsService:
        return DiagnosticsService(self.kube, self.leases)

    @cached_property
    def pools(self) -> PoolService:
        return PoolService(
            self.kube,
            self.watched_pools,
            self.watched_leases,
            self._sandbox_served,
            self._own_sandbox_leases,
        )

    def _sandbox_served(self) -> bool:
        return self.settings.agent_sandbox_mode == "external" and self.sandbox.verdict().served

    def _own_sandbox_leases(self, principal: Principal) -> list[dict[str, Any]]:
        return self.sandbox_leases.list_mine(principal)  # built on first use

    @cached_property
    def sandbox_leases(self) -> SandboxLeaseService:
        limiter = AdmissionLimiter(
            self.settings.sandbox_admission_rate, self.settings.sandbox_admission_burst
        )
        return SandboxLeaseService(self.kube, limiter, self.settings.default_max_concurrent_leases)

    @cached_property
    def executions(self) -> ExecutionService:
        limiter = AdmissionLimiter(
            self.settings.execution_admission_rate,
            self.settings.execution_admission_burst,
            scope="execution",
        )
        return ExecutionService(
            self.kube, self.sandbox_leases, limiter, self.settings.max_command_bytes_per_lease
        )

    @cached_property
    def held(self) -> HeldRequests:
        return HeldRequests(self.settings.max_waits_per_identity)

    @cached_property
    def streams(self) -> SandboxStreamService:
        return SandboxStreamService(self.kube, self.sandbox_leases, self.policies, self.auth)

    @cached_property
    def sandbox(self) -> SandboxGate:
        external = self.settings.agent_sandbox_mode == "external"
        return SandboxGate(self.settings.agent_sandbox_mode, self.kube if external else None)


def _target(req: falcon.Request) -> str:
    return req.path + (f"?{req.query_string}" if req.query_string else "")


Authentication = Literal["required", "optional", "none"]


class Base:
    """A resource. Its responders need an authenticated caller unless the class says otherwise:
    `"optional"` authenticates a request that sends credentials and lets others through with no
    principal; `"none"` never looks at credentials (liveness, readiness, metrics, the API's
    document)."""

    authentication: ClassVar[Authentication] = "required"

    def __init__(self, services: Services) -> None:
        self.services = services


def principal(req: falcon.Request) -> Principal:
    """The caller `Authenticate` established before the responder ran."""
    found: Principal = req.context.principal
    return found


class Authenticate:
    """Authenticates the caller before any responder of a route that requires it runs, and puts
    the principal in `req.context.principal` (None where the route lets the caller be unknown).

    A request for which no responder exists (no such path, a method the resource does not
    answer, Falcon's own OPTIONS) is left to Falcon's 404 or 405 as before, unauthenticated: it
    reaches no service, and the answer says nothing about any object."""

    def __init__(self, services: Services) -> None:
        self.services = services

    def process_resource(
        self,
        req: falcon.Request,
        resp: falcon.Response,
        resource: object,
        params: dict[str, Any],
    ) -> None:
        req.context.principal = None
        if resource is None or not hasattr(resource, f"on_{req.method.lower()}"):
            return
        if isinstance(resource, SandboxBase):
            resource.require_served()  # before credentials: a path that does not exist is a 404
        needs: Authentication = getattr(resource, "authentication", "required")
        header = req.get_header("Authorization")
        if needs == "none" or (needs == "optional" and not header):
            return
        req.context.principal = self.services.auth.authenticate(
            req.method, _target(req), header, req.context.body
        )
        if req.context.principal.session is not None:  # audit: which session to revoke
            req.context.session_id = req.context.principal.session.session_id


class LeasesResource(Base):
    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        caller = principal(req)
        request = parse(CreateLease, req.context.body, req.content_type)
        resp.media = conform(LeaseCreated, self.services.leases.create(caller, request))
        resp.status = falcon.HTTP_202
        # Where a client whose answer was cut short reads the lease (spec 4.3, rule 3).
        resp.set_header("Location", f"/v1/leases/{resp.media['id']}")

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = conform_each(LeaseSummary, self.services.leases.list_mine(principal(req)))


class LeaseResource(Base):
    def on_get(self, req: falcon.Request, resp: falcon.Response, lease_id: str) -> None:
        caller = principal(req)
        wait = _int_param(req, "waitSeconds", 0, 0, MAX_WAIT_SECONDS)
        with self.services.held.hold("lease", caller.owner) if wait else nullcontext(False) as may:
            if may:
                set_aside(req)
                req.context.waits = True
            gone = client_gone(req, "lease")
            lease = self.services.leases.read(caller, lease_id, wait if may else 0, gone)
        resp.media = conform(Lease, lease)

    def on_delete(self, req: falcon.Request, resp: falcon.Response, lease_id: str) -> None:
        self.services.leases.release(principal(req), lease_id)
        resp.status = falcon.HTTP_204

    def on_patch(self, req: falcon.Request, resp: falcon.Response, lease_id: str) -> None:
        caller = principal(req)
        request = parse(ExtendLease, req.context.body, req.content_type)
        resp.media = conform(Expiry, self.services.leases.extend(caller, lease_id, request))


class LeaseEventsResource(Base):
    def on_get(self, req: falcon.Request, resp: falcon.Response, lease_id: str) -> None:
        resp.media = conform_each(
            LeaseEvent, self.services.lease_events.of(principal(req), lease_id)
        )


class DiagnosticsResource(Base):
    def on_get(self, req: falcon.Request, resp: falcon.Response, lease_id: str) -> None:
        bundle = self.services.diagnostics.bundle(principal(req), lease_id)
        resp.media = conform(DiagnosticsBundle, bundle)


class PoolsResource(Base):
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = conform_each(PoolRecord, self.services.pools.records(principal(req)))


class PoolResource(Base):
    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        resp.media = conform(PoolRecord, self.services.pools.one(principal(req), name))


class PoolLeasesResource(Base):
    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        resp.media = conform_each(PoolLease, self.services.pools.leases(principal(req), name))


class LoginResource(Base):
    """POST exchanges any configured credential (a static token, an OIDC token, or an SSH-signed
    request, whose timestamp and single-use nonce make it the challenge) for a session token;
    DELETE with the session token logs it out on every replica."""

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        caller = principal(req)
        if caller.session is not None:
            raise BadRequestError("log in with a credential, not with a session token")
        if caller.method not in caller.policy.spec.auth.sessions.methods:
            raise ForbiddenError(
                f"the AccessPolicy {caller.policy.name} makes no sessions from {caller.method}"
                " credentials (auth.sessions.methods): send the credential with each request",
                reason="forbidden",
            )
        request = parse(Login, req.context.body, req.content_type) if req.context.body else Login()
        ttl = int(parse_duration(request.ttl).total_seconds()) if request.ttl else DEFAULT_TTL
        if caller.method == "oidc":  # never longer than the token it was exchanged for
            ttl = min(ttl, int(caller.claims["exp"]) - int(time.time()))
        decision = self.services.logins.take(caller.owner)
        if not decision.allowed:
            metrics.LOGIN_RATE_LIMITED.inc()
            raise TooManyRequestsError.rate_limited("logins", decision.retry_after)
        issued = self.services.auth.sessions.issue(
            caller.identity,
            caller.policy.name,
            dict(caller.claims),
            owner=caller.owner,
            method=caller.method,
            credential=caller.credential,
            ttl=ttl,
        )
        resp.media = conform(
            SessionIssued,
            {
                "session_token": issued.token,
                "identity": caller.identity,
                "method": caller.method,
                "expires_at": timestamp(
                    datetime.datetime.fromtimestamp(issued.expires, datetime.UTC)
                ),
            },
        )
        req.context.session_id = issued.session_id  # the login's audit record names it

    def on_delete(self, req: falcon.Request, resp: falcon.Response) -> None:
        session = principal(req).session
        if session is None:
            raise BadRequestError("log out with the session token itself")
        self.services.auth.sessions.revoke(session)
        resp.status = falcon.HTTP_204


class StatusResource(Base):
    """Anyone may ask (spec 4.6, 5.1): the version, how to authenticate, and a row per pool
    with its name, ready, leased and creating counts; a caller who sends credentials gets the
    pools it may use, whose rows add phase and quarantined. A deployment that does not want its
    pools' names and capacity told to strangers hides the anonymous rows
    (`--hide-pool-status`, docs/api.md)."""

    authentication = "optional"

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        caller: Principal | None = req.context.principal
        auth = self.services.auth
        resp.media = conform(
            Status,
            {
                "version": __version__,
                "auth": {"methods": auth.methods(), "sessions": auth.session_methods()},
                "pools": (
                    []
                    if caller is None and self.services.settings.hide_pool_status
                    else self.services.pools.status_rows(caller)
                ),
                "sandbox": self.services.sandbox.status(),
            },
        )


class SandboxBase(Base):
    """Every /v1/sandbox-leases path. They exist only with `agentSandbox.mode: external` and
    while the installed agent-sandbox passes the compatibility check (spec 1): otherwise every
    one is a 404, before any credential is looked at, whose detail says why (as /v1/status
    does). The verdict is checked again at most once a minute (lessor.apiserver.sandboxes.gate),
    so the routes appear once agent-sandbox is fixed, without a restart."""

    def require_served(self) -> None:
        verdict = self.services.sandbox.verdict()
        if not verdict.served:
            raise HttpNotFoundError(f"the Sandbox API is not served here: {verdict.reason}")

    def served(self, req: falcon.Request) -> tuple[Principal, SandboxLeaseService]:
        return principal(req), self.services.sandbox_leases


class SandboxLeasesResource(SandboxBase):
    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        caller, service = self.served(req)
        request = parse(CreateSandboxLease, req.context.body, req.content_type)
        body = conform(SandboxLeaseCreated, service.create(caller, request))
        resp.media = body
        resp.status = falcon.HTTP_202
        resp.set_header("Location", f"/v1/sandbox-leases/{body['id']}")

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        caller, service = self.served(req)
        resp.media = conform_each(SandboxLease, service.list_mine(caller))


class SandboxLeaseResource(SandboxBase):
    def on_get(self, req: falcon.Request, resp: falcon.Response, lease_id: str) -> None:
        caller, service = self.served(req)
        resp.media = conform(SandboxLease, service.read(caller, lease_id))

    def on_patch(self, req: falcon.Request, resp: falcon.Response, lease_id: str) -> None:
        caller, service = self.served(req)
        request = parse(ExtendSandboxLease, req.context.body, req.content_type)
        resp.media = conform(SandboxExpiry, service.extend(caller, lease_id, request))

    def on_delete(self, req: falcon.Request, resp: falcon.Response, lease_id: str) -> None:
        caller, service = self.served(req)
        service.release(caller, lease_id)
        resp.status = falcon.HTTP_204


class SandboxLogsResource(SandboxBase):
    def on_get(self, req: falcon.Request, resp: falcon.Response, lease_id: str) -> None:
        caller, service = self.served(req)
        tail = _int_param(req, "tailLines", LOG_TAIL_DEFAULT, 1, LOG_TAIL_MAX)
        logs = service.logs(caller, lease_id, tail, req.get_param("container"))
        resp.media = conform(SandboxLogs, logs)


class ExecutionsResource(SandboxBase):
    def on_post(self, req: falcon.Request, resp: falcon.Response, lease_id: str) -> None:
        caller, _ = self.served(req)
        request = parse(CreateExecution, req.context.body, req.content_type)
        held = self.services.held
        waits = not request.detach
        with held.hold("execution", caller.owner) if waits else nullcontext(False) as may:
            if may:
                set_aside(req)  # held for as long as its command runs, in a bound of its own
            gone = client_gone(req, "execution")
            status, body = self.services.executions.create(caller, lease_id, request, may, gone)
        resp.status = falcon.code_to_http_status(status)
        # 200: it ended, with its output; 202: detached, or no outcome yet (openapi.py).
        resp.media = conform(ExecutionResult if status == 200 else Execution, body)
        resp.set_header("Location", f"/v1/sandbox-leases/{lease_id}/executions/{body['id']}")


class ExecutionResource(SandboxBase):
    def on_get(
        self, req: falcon.Request, resp: falcon.Response, lease_id: str, execution: str
    ) -> None:
        caller, _ = self.served(req)
        resp.media = conform(Execution, self.services.executions.read(caller, lease_id, execution))

    def on_delete(
        self, req: falcon.Request, resp: falcon.Response, lease_id: str, execution: str
    ) -> None:
        caller, _ = self.served(req)
        cancelled = self.services.executions.cancel(caller, lease_id, execution)
        resp.media = conform(Execution, cancelled)


class ExecutionLogsResource(SandboxBase):
    def on_get(
        self, req: falcon.Request, resp: falcon.Response, lease_id: str, execution: str
    ) -> None:
        caller, _ = self.served(req)
        stdout = _int_param(req, "stdoutOffset", 0, 0, 1 << 40)
        stderr = _int_param(req, "stderrOffset", 0, 0, 1 << 40)
        logs = self.services.executions.logs(caller, lease_id, execution, stdout, stderr)
        resp.media = conform(ExecutionLogs, logs)


class SandboxStreamResource(SandboxBase):
    """Attach and port-forward without `Upgrade: websocket` (the upgrade itself never reaches
    Falcon: lessor.apiserver.sandboxes.upgrade): 426 once the caller is known and the API is
    served."""

    def on_get(self, req: falcon.Request, resp: falcon.Response, lease_id: str) -> None:
        self.served(req)
        raise UpgradeRequiredError(
            "this endpoint is a WebSocket: send Upgrade: websocket (docs/api.md)",
            headers={"Upgrade": "websocket"},
        )


def _int_param(req: falcon.Request, name: str, default: int, low: int, high: int) -> int:
    raw = req.get_param(name)
    if raw is None:
        return default
    # ASCII digits only: str.isdigit also takes "²", which int() then refuses.
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 16) or not low <= int(raw) <= high:
        raise BadRequestError(f"{name} must be an integer from {low} to {high}")
    return int(raw)


class HealthResource(Base):
    authentication = "none"

    def on_get(self, _req: falcon.Request, resp: falcon.Response) -> None:
        resp.content_type = falcon.MEDIA_TEXT
        resp.text = "ok\n"


class OpenApiResource(Base):
    authentication = "none"

    def __init__(self, services: Services) -> None:
        super().__init__(services)
        self.document = api_document()

    def on_get(self, _req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = self.document


class MetricsResource(Base):
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


class ReadyResource(Base):
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


RESPONDERS = ("get", "post", "put", "patch", "delete")


@dataclass(frozen=True)
class Route:
    """One path: the resource that answers it, and its OpenAPI operations (None: a path the
    document leaves out, as it describes the API, not the service's plumbing)."""

    path: str
    resource: type[Base]
    operations: Callable[[], Json] | None
    sandbox: bool = False  # served only with `agentSandbox.mode: external` (sandboxes.gate)
    # Served only where /metrics has no listener of its own (Settings.metrics_port).
    api_metrics: bool = False

    @property
    def methods(self) -> frozenset[str]:
        """The methods the resource answers, as the document names them."""
        return frozenset(m for m in RESPONDERS if hasattr(self.resource, f"on_{m}"))


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
        Authenticate(services),
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
