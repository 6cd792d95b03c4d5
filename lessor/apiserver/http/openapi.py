"""The OpenAPI 3.1 document of the API, served at /openapi.json, built from the pydantic models
that validate requests and describe responses, so the document cannot drift from the checks."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from lessor import __version__
from lessor.apiserver.http.bodies import (
    CreateExecution,
    CreateLease,
    CreateSandboxLease,
    ExtendLease,
    ExtendSandboxLease,
    Json,
    Login,
)
from lessor.apiserver.sandboxes.executions import (
    DEFAULT_TIMEOUT,
    EXECUTION_BOUND,
    MAX_TIMEOUT,
    WAIT_MARGIN,
)
from lessor.apiserver.sandboxes.sandbox_leases import LOG_BYTES_MAX, LOG_TAIL_DEFAULT, LOG_TAIL_MAX
from lessor.protocol.durations import format_duration
from lessor.protocol.phases import ExecutionState, SandboxLeasePhase
from lessor.protocol.runner import LOG_WINDOW, OUTPUT_CAP
from lessor.resources.sandbox import ReleaseCause


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
    resource_kind: Literal["Cluster", "Sandbox"] = Field(
        alias="resourceKind",
        description="Sandbox pools are listed while the Sandbox API is served; their "
        "creating, recycling, unhealthy and queueDepth are 0.",
    )
    capabilities: list[str] = Field(
        description="Cluster: lease, kubeconfig, extend, release. Sandbox: lease, extend, "
        "release, logs, attach, and exec (with a runner) and port-forward (with declared ports)."
    )
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
    requester: str | None = Field(
        default=None,
        description="\"redacted\" for other tenants' leases; absent for a Sandbox pool's leases.",
    )
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
    phase: SandboxLeasePhase
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


_DEFAULT_TIMEOUT = f"{int(DEFAULT_TIMEOUT.total_seconds())}s"
_MAX_TIMEOUT = format_duration(MAX_TIMEOUT)
_CAP = f"{OUTPUT_CAP // (1024 * 1024)} MiB"


class Execution(BaseModel):
    """An execution as GET, DELETE and a detached create (202) show it: never its output."""

    model_config = ConfigDict(populate_by_name=True)

    id: str = Field(description="`x` and 24 hex digits, derived from the lease instance and key.")
    state: ExecutionState = Field(
        description="`Unknown`: the outcome could not be established; do not rerun blindly."
    )
    exit_code: int | None = Field(
        default=None,
        alias="exitCode",
        description="Only when the process reported one: absent while it runs, when it could "
        "not start, when a signal ended it and when its outcome is unknown.",
    )
    started_at: str | None = Field(default=None, alias="startedAt")
    finished_at: str | None = Field(default=None, alias="finishedAt")
    message: str | None = Field(
        default=None, description="Why it could not start, or why its outcome is unknown."
    )
    truncated: bool = Field(
        description=f"Output past the first {_CAP} of stdout or stderr was dropped; known once "
        "the command ended."
    )
    timeout: str = Field(
        description=f"The timeout granted: the request's or {_DEFAULT_TIMEOUT}, at most "
        f"{_MAX_TIMEOUT} and never past the lease's expiry."
    )


class ExecutionResult(Execution):
    """The 200 of a wait-mode create: the execution once it ended, with its retained output."""

    stdout: str = Field(
        description=f"The first {_CAP} of the stream, as UTF-8 with invalid bytes replaced."
    )
    stderr: str = Field(
        description=f"The first {_CAP} of the stream, as UTF-8 with invalid bytes replaced."
    )


class ExecutionWindow(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    data: str = Field(
        description=f"At most {LOG_WINDOW // 1024} KiB of retained bytes from the offset, as "
        "UTF-8; invalid bytes are replaced here only, never in the offsets."
    )
    next_offset: int = Field(
        alias="nextOffset",
        description="Opaque resume token (a count of raw retained bytes): pass it back "
        "unchanged; it cannot be derived from the length of `data`.",
    )
    more: bool = Field(description="Another window is already available.")
    truncated: bool = Field(
        description=f"Output past the first {_CAP} of stdout or stderr was dropped; known once "
        "the command ended."
    )


class ExecutionLogs(BaseModel):
    """One output window per stream. A follower is drained once `state` is terminal and both
    windows say `more: false`; a retry with the same offsets returns the same windows."""

    model_config = ConfigDict(populate_by_name=True)

    id: str
    state: ExecutionState
    exit_code: int | None = Field(
        default=None, alias="exitCode", description="As in the execution, once it is reported."
    )
    stdout: ExecutionWindow
    stderr: ExecutionWindow


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
    CreateExecution,
    Execution,
    ExecutionResult,
    ExecutionLogs,
)

SANDBOX_ONLY = (
    "Alpha. The /v1/sandbox-leases paths exist only when `agentSandbox.mode` is `external` "
    "(otherwise every one is a 404); while the installed agent-sandbox fails the compatibility "
    "check they answer 503 `backend_error`."
)
EXECUTION_LOCATION = "/v1/sandbox-leases/{lease_id}/executions/{id}"


def _execution_notes(schema: Json) -> dict[str, str]:
    """What CreateExecution's validators check beyond its schema, in its fields' notes."""
    command = schema["properties"]["command"]
    return {
        "command": f"argv, never a shell line: {command['minItems']} to {command['maxItems']} "
        f"arguments of at most {command['items']['maxLength'] // 1024} KiB each, 256 KiB in "
        "all, no NUL",
        "cwd": "Absolute working directory; default the container's",
        "timeout": f"Default {_DEFAULT_TIMEOUT}; capped at {_MAX_TIMEOUT} and at the lease's "
        "remaining lifetime",
        "container": "Where the runner is executed; default the pool's `runner.container`",
        "idempotencyKey": "1 to 253 bytes, new for each deliberate execution. Reused with a "
        "different command, cwd, timeout, container or detach: 409 `idempotency_conflict`",
        "detach": "false: 200 once the command ended; true: 202 once it is reserved",
    }


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


def _stream(kind: str, parameters: list[tuple[str, bool, Json]]) -> Json:
    operation = _operation(
        f"{kind} session over a WebSocket (alpha): send `Upgrade: websocket`; frames and close "
        "codes in docs/api.md",
        101,
        None,
        errors=(400, 401, 503, 403, 404, 409, 426, 429),
    )
    operation["responses"]["101"]["description"] = "Switching Protocols: the session begins"
    operation["responses"]["426"]["description"] = "the request did not ask for the upgrade"
    operation["parameters"] = [
        {"name": name, "in": "query", "required": required, "schema": schema}
        for name, required, schema in parameters
    ]
    return operation


def _execution_create() -> Json:
    operation = _operation(
        "Run a command in the Sandbox (alpha): 200 once it ended, 202 when detached",
        200,
        _ref(ExecutionResult),
        errors=(400, 401, 503, 404, 409, 501),
        request=CreateExecution,
    )
    location = {"Location": _header(EXECUTION_LOCATION)}
    responses = operation["responses"]
    responses["200"]["headers"] = location
    responses["409"]["description"] = (
        "reason `idempotency_conflict`, `execution_limit_exhausted` (the lease's "
        f"{EXECUTION_BOUND} executions are spent), `not_ready`, `expired`, `target_unresolved` "
        "or `conflict_retryable`"
    )
    responses["501"]["description"] = "the SandboxPool has no runner"
    responses["503"]["description"] = (
        "reason `backend_error`: the sandbox's runner (or the cluster API) cannot be reached; "
        "an execution already reserved stays reserved, so retry with the same key"
    )
    accepted = {
        "description": "Detached and reserved; or, in wait mode, no outcome yet "
        f"{WAIT_MARGIN:.0f} s past the timeout. Poll the Location.",
        "headers": location,
        "content": _json(_ref(Execution)),
    }
    operation["responses"] = {"200": responses.pop("200"), "202": accepted, **responses}
    return operation


def _execution_logs() -> Json:
    operation = _operation(
        "Windows of an execution's retained output (alpha)",
        200,
        _ref(ExecutionLogs),
        errors=(400, 401, 503, 404),
    )
    offset = {"type": "integer", "minimum": 0, "maximum": 1 << 40, "default": 0}
    operation["parameters"] = [
        {
            "name": name,
            "in": "query",
            "required": False,
            "schema": offset,
            "description": "0, or the last answer's `nextOffset` of that stream, unchanged.",
        }
        for name in ("stdoutOffset", "stderrOffset")
    ]
    return operation


def document() -> Json:
    components: Json = {}
    for model in MODELS:
        schema = model.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
        components.update(schema.pop("$defs", {}))
        components[model.__name__] = schema
    create_execution = components[CreateExecution.__name__]["properties"]
    for field, note in _execution_notes(components[CreateExecution.__name__]).items():
        create_execution[field]["description"] = note
    common = (400, 401, 503)
    lease_param = [_path_param("lease_id")]
    execution_param = [*lease_param, _path_param("execution")]
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
                    errors=(*common, 404),  # 404: the Sandbox API is not served (SANDBOX_ONLY)
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
            "/v1/sandbox-leases/{lease_id}/attach": {
                "description": SANDBOX_ONLY,
                "parameters": lease_param,
                "get": _stream(
                    "Attach",
                    [
                        ("container", False, {"type": "string"}),
                        ("tty", False, {"type": "boolean", "default": False}),
                    ],
                ),
            },
            "/v1/sandbox-leases/{lease_id}/port-forward": {
                "description": SANDBOX_ONLY,
                "parameters": lease_param,
                "get": _stream(
                    "Port-forward",
                    [("port", True, {"type": "string", "description": "declared number or name"})],
                ),
            },
            "/v1/sandbox-leases/{lease_id}/executions": {
                "description": SANDBOX_ONLY,
                "parameters": lease_param,
                "post": _execution_create(),
            },
            "/v1/sandbox-leases/{lease_id}/executions/{execution}": {
                "description": SANDBOX_ONLY,
                "parameters": execution_param,
                "get": _operation(
                    "One execution, without its output (alpha)",
                    200,
                    _ref(Execution),
                    errors=(*common, 404),
                ),
                "delete": _operation(
                    "Cancel an execution; the state that applies (alpha)",
                    200,
                    _ref(Execution),
                    errors=(*common, 404),
                ),
            },
            "/v1/sandbox-leases/{lease_id}/executions/{execution}/logs": {
                "description": SANDBOX_ONLY,
                "parameters": execution_param,
                "get": _execution_logs(),
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
