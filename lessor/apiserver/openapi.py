"""The OpenAPI 3.1 document of the API, served at /openapi.json, built from the pydantic models
that validate requests and describe responses, so the document cannot drift from the checks."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from lessor import __version__
from lessor.apiserver.bodies import (
    CreateLease,
    CreateSandboxLease,
    ExtendLease,
    ExtendSandboxLease,
    Login,
)
from lessor.apiserver.sandbox_leases import LOG_BYTES_MAX, LOG_TAIL_DEFAULT, LOG_TAIL_MAX
from lessor.resources.sandbox import ReleaseCause, SandboxPhase

Json = dict[str, Any]


class Error(BaseModel):
    error: str
    detail: str | None = None
    reason: str | None = None


class LeaseCreated(BaseModel):
    id: str
    phase: str
    profile: str
    queue_position: int
    effective_ttl: str
    alias: str | None = None
    metadata: dict[str, Any] | None = None


class LeaseSummary(BaseModel):
    id: str
    phase: str
    profile: str
    expires_at: str | None = None
    alias: str | None = None


class Lease(LeaseSummary):
    metadata: dict[str, Any] | None = None
    queue_position: int | None = Field(default=None, description="1-based, while Pending.")
    kubeconfig: str | None = Field(default=None, description="Present once the lease is Bound.")


class Expiry(BaseModel):
    expires_at: str


class PoolPolicy(BaseModel):
    mode: str
    ttl: str
    warm_target: int = Field(alias="warmTarget")


class PoolRecord(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    name: str
    resource_kind: str = Field(alias="resourceKind")
    capabilities: list[str]
    phase: str
    ready: int
    leased: int
    creating: int
    recycling: int
    unhealthy: int
    quarantined: int
    queue_depth: int = Field(alias="queueDepth")
    policy: PoolPolicy


class PoolLease(BaseModel):
    id: str
    phase: str
    profile: str
    cluster_name: str | None = None
    requester: str
    expires_at: str | None = None


class StatusAuth(BaseModel):
    methods: list[str]
    sessions: list[str]


class StatusPool(BaseModel):
    name: str
    ready: int
    leased: int
    creating: int
    phase: str | None = None
    quarantined: int | None = None


class Status(BaseModel):
    version: str
    auth: StatusAuth
    pools: list[StatusPool]


class SessionIssued(BaseModel):
    session_token: str
    identity: str
    method: str
    expires_at: str


class _SandboxLeaseFields(BaseModel):
    id: str
    phase: str
    pool: str
    ttl: str = Field(description="The TTL asked for; without one, the TTL granted.")
    effective_ttl: str | None = Field(
        default=None, description="The TTL granted; present only when less than `ttl`."
    )
    alias: str | None = None
    provisioning_deadline: str = Field(
        description="The lease's creation time plus the pool's provisioningTimeout; never reset."
    )


class SandboxLeaseCreated(_SandboxLeaseFields):
    """The 202 of a create (with a Location header). The handoff variant adds `status`,
    `retry` and `statusUrl`: the outcome is not known yet; do not repeat the create, poll."""

    model_config = ConfigDict(populate_by_name=True)

    phase: str = Field(description="Always `Pending`.")
    provisioning_deadline: str = Field(
        description="The lease's creation time plus the pool's provisioningTimeout; in the "
        "handoff variant, counted from the time of the answer."
    )
    status: Literal["admission_pending"] | None = Field(
        default=None, description="Handoff variant only: `admission_pending`."
    )
    retry: bool | None = Field(default=None, description="Handoff variant only: `false`.")
    status_url: str | None = Field(
        default=None, alias="statusUrl", description="Handoff variant only: the lease's path."
    )


class PlacementRef(BaseModel):
    name: str
    uid: str


class SandboxPlacement(BaseModel):
    lease_uid: str
    claim: PlacementRef | None = Field(default=None, description="The agent-sandbox SandboxClaim.")
    sandbox: PlacementRef | None = None
    pod: PlacementRef | None = None


class SandboxLease(_SandboxLeaseFields):
    phase: SandboxPhase
    release_cause: ReleaseCause | None = Field(
        default=None, description="Recorded once when teardown starts; never changed."
    )
    ready_at: str | None = None
    expires_at: str | None = Field(default=None, description="Once Ready.")
    message: str | None = None
    extensions_count: int
    max_extensions: int
    placement: SandboxPlacement


class SandboxExpiry(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    expires_at: str = Field(alias="expiresAt")
    extensions_count: int = Field(alias="extensionsCount")
    max_extensions: int = Field(alias="maxExtensions")


class SandboxLogs(BaseModel):
    id: str
    pod: str
    data: str
    truncated: bool = Field(description=f"The tail reached the {LOG_BYTES_MAX // 1024} KiB cap.")


MODELS: tuple[type[BaseModel], ...] = (
    CreateLease,
    ExtendLease,
    Login,
    CreateSandboxLease,
    ExtendSandboxLease,
    Error,
    LeaseCreated,
    LeaseSummary,
    Lease,
    Expiry,
    PoolRecord,
    PoolLease,
    Status,
    SessionIssued,
    SandboxLeaseCreated,
    SandboxLease,
    SandboxExpiry,
    SandboxLogs,
)

SANDBOX_ONLY = (
    "Alpha. The /v1/sandbox-leases paths exist only when `agentSandbox.mode` is `external` "
    "(otherwise every one is a 404); while the installed agent-sandbox fails the compatibility "
    "check they answer 503 `backend_error`."
)


def _ref(model: type[BaseModel]) -> Json:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _json(schema: Json) -> Json:
    return {"application/json": {"schema": schema}}


def _errors(*statuses: int) -> Json:
    return {str(s): {"description": "error", "content": _json(_ref(Error))} for s in statuses}


def _operation(
    summary: str,
    ok: int,
    body: Json | None,
    *,
    errors: tuple[int, ...],
    secured: bool = True,
    request: type[BaseModel] | None = None,
) -> Json:
    responses: Json = {str(ok): {"description": summary}}
    if body is not None:
        responses[str(ok)]["content"] = _json(body)
    responses.update(_errors(*errors))
    operation: Json = {"summary": summary, "responses": responses}
    if request is not None:
        operation["requestBody"] = {"required": True, "content": _json(_ref(request))}
    if not secured:
        operation["security"] = []
    return operation


def _path_param(name: str) -> Json:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


def _header(description: str) -> Json:
    return {"description": description, "schema": {"type": "string"}}


def _sandbox_create() -> Json:
    operation = _operation(
        "Create a Sandbox lease (alpha)",
        202,
        _ref(SandboxLeaseCreated),
        errors=(400, 401, 503, 403, 404, 409, 429),
        request=CreateSandboxLease,
    )
    operation["responses"]["202"]["headers"] = {"Location": _header("/v1/sandbox-leases/{id}")}
    retry_after = "Seconds; only with reason `rate_limited`, never with `concurrency_limit`."
    operation["responses"]["429"]["headers"] = {"Retry-After": _header(retry_after)}
    return operation


def _sandbox_logs() -> Json:
    operation = _operation(
        "Tail of the Sandbox's pod log (alpha)",
        200,
        _ref(SandboxLogs),
        errors=(400, 401, 503, 404, 409),
    )
    tail = {"type": "integer", "minimum": 1, "maximum": LOG_TAIL_MAX, "default": LOG_TAIL_DEFAULT}
    operation["parameters"] = [
        {"name": "tailLines", "in": "query", "required": False, "schema": tail},
        {
            "name": "container",
            "in": "query",
            "required": False,
            "schema": {"type": "string"},
            "description": "Which container; may be left out when the pod has one.",
        },
    ]
    return operation


def document() -> Json:
    components: Json = {}
    for model in MODELS:
        schema = model.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
        components.update(schema.pop("$defs", {}))
        components[model.__name__] = schema
    common = (400, 401, 503)
    lease_param = [_path_param("lease_id")]
    pool_param = [_path_param("name")]
    return {
        "openapi": "3.1.0",
        "info": {"title": "lessor", "version": __version__},
        "components": {
            "schemas": components,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "OIDC JWT, static token or session token",
                },
            },
        },
        "security": [{"bearer": []}],
        "paths": {
            "/v1/leases": {
                "post": _operation(
                    "Create a cluster lease",
                    202,
                    _ref(LeaseCreated),
                    errors=(*common, 403, 404, 409, 429),
                    request=CreateLease,
                ),
                "get": _operation(
                    "The caller's active leases",
                    200,
                    {"type": "array", "items": _ref(LeaseSummary)},
                    errors=common,
                ),
            },
            "/v1/leases/{lease_id}": {
                "parameters": lease_param,
                "get": _operation("One lease", 200, _ref(Lease), errors=(*common, 404)),
                "delete": _operation("Release", 204, None, errors=(*common, 404, 409)),
                "patch": _operation(
                    "Extend the TTL",
                    200,
                    _ref(Expiry),
                    errors=(*common, 404, 409),
                    request=ExtendLease,
                ),
            },
            "/v1/leases/{lease_id}/diagnostics": {
                "parameters": lease_param,
                "get": _operation(
                    "Diagnostics bundle URL", 200, {"type": "object"}, errors=(*common, 404)
                ),
            },
            "/v1/pools": {
                "get": _operation(
                    "Accessible pools",
                    200,
                    {"type": "array", "items": _ref(PoolRecord)},
                    errors=common,
                ),
            },
            "/v1/pools/{name}": {
                "parameters": pool_param,
                "get": _operation("One pool", 200, _ref(PoolRecord), errors=(*common, 404)),
            },
            "/v1/pools/{name}/leases": {
                "parameters": pool_param,
                "get": _operation(
                    "Leases of a pool",
                    200,
                    {"type": "array", "items": _ref(PoolLease)},
                    errors=(*common, 404),
                ),
            },
            "/v1/sandbox-leases": {
                "description": SANDBOX_ONLY,
                "post": _sandbox_create(),
                "get": _operation(
                    "The caller's Sandbox leases (alpha)",
                    200,
                    {"type": "array", "items": _ref(SandboxLease)},
                    errors=common,
                ),
            },
            "/v1/sandbox-leases/{lease_id}": {
                "description": SANDBOX_ONLY,
                "parameters": lease_param,
                "get": _operation(
                    "One Sandbox lease (alpha)", 200, _ref(SandboxLease), errors=(*common, 404)
                ),
                "patch": _operation(
                    "Extend a Ready Sandbox lease (alpha)",
                    200,
                    _ref(SandboxExpiry),
                    errors=(*common, 404, 409),
                    request=ExtendSandboxLease,
                ),
                "delete": _operation(
                    "Request release (alpha)", 204, None, errors=(*common, 403, 404, 409)
                ),
            },
            "/v1/sandbox-leases/{lease_id}/logs": {
                "description": SANDBOX_ONLY,
                "parameters": lease_param,
                "get": _sandbox_logs(),
            },
            "/v1/login": {
                "post": _operation(
                    "Exchange a credential for a session",
                    200,
                    _ref(SessionIssued),
                    errors=common,
                    request=Login,
                ),
                "delete": _operation("Log out the session", 204, None, errors=common),
            },
            "/v1/status": {
                "get": _operation(
                    "Service status", 200, _ref(Status), errors=(401, 503), secured=False
                ),
            },
            "/healthz": {"get": _operation("Liveness", 200, None, errors=(), secured=False)},
        },
    }
