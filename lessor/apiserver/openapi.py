"""The OpenAPI 3.1 document of the API, served at /openapi.json, built from the pydantic models
that validate requests and describe responses, so the document cannot drift from the checks."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from lessor import __version__
from lessor.apiserver.bodies import CreateLease, ExtendLease, Login

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


MODELS: tuple[type[BaseModel], ...] = (
    CreateLease,
    ExtendLease,
    Login,
    Error,
    LeaseCreated,
    LeaseSummary,
    Lease,
    Expiry,
    PoolRecord,
    PoolLease,
    Status,
    SessionIssued,
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
