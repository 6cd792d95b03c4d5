"""The OpenAPI 3.1 document of the API, served at /openapi.json, built from the pydantic models
that validate requests and describe responses, so the document cannot drift from the checks."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Protocol

from pydantic import BaseModel

from lessor import __version__
from lessor.apiserver.http.bodies import (
    MAX_COMMAND_BYTES,
    CreateExecution,
    CreateLease,
    CreateSandboxLease,
    ExtendLease,
    ExtendSandboxLease,
    Login,
)
from lessor.apiserver.http.responses import (
    DEFAULT_TIMEOUT_TEXT,
    MAX_TIMEOUT_TEXT,
    ClusterHealth,
    DiagnosticsBundle,
    Error,
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
)
from lessor.apiserver.leases.cluster_leases import MAX_WAIT_SECONDS
from lessor.apiserver.sandboxes.executions import MAX_RUNNING_PER_LEASE, WAIT_MARGIN
from lessor.apiserver.sandboxes.sandbox_leases import LOG_TAIL_DEFAULT, LOG_TAIL_MAX
from lessor.protocol.json_object import Json

MODELS: tuple[type[BaseModel], ...] = (
    CreateLease,
    ExtendLease,
    Login,
    CreateSandboxLease,
    ExtendSandboxLease,
    Error,
    LeaseCreated,
    LeaseSummary,
    ClusterHealth,
    Lease,
    Expiry,
    LeaseEvent,
    DiagnosticsBundle,
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
        f"arguments, at most {MAX_COMMAND_BYTES // 1024} KiB in all (UTF-8), no NUL; larger "
        "input belongs in a file",
        "cwd": "Absolute working directory; default the container's",
        "timeout": f"Default {DEFAULT_TIMEOUT_TEXT}; capped at {MAX_TIMEOUT_TEXT} and at the "
        "lease's remaining lifetime",
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
        errors=(400, 401, 503, 404, 409, 429, 501),
        request=CreateExecution,
    )
    location = {"Location": _header(EXECUTION_LOCATION)}
    responses = operation["responses"]
    responses["200"]["headers"] = location
    responses["409"]["description"] = (
        "reason `idempotency_conflict`, `execution_limit_exhausted` (the lease has run the "
        "`maxExecutions` its pool allowed when it was granted, or stored its "
        "`apiserver.maxCommandBytesPerLease` of command bytes), `not_ready`, `expired`, "
        "`target_unresolved` or `conflict_retryable`"
    )
    _rate_limited(responses, "execution creates", "apiserver.executionAdmissionRate")
    responses["429"]["description"] += (
        "; or code `concurrency_limit`, without Retry-After: the lease has "
        f"{MAX_RUNNING_PER_LEASE} executions that have not ended"
    )
    responses["501"]["description"] = "the SandboxPool has no runner"
    responses["503"]["description"] = (
        "reason `backend_error`: the sandbox's runner (or the cluster API) cannot be reached; "
        "an execution already reserved stays reserved, so retry with the same key"
    )
    accepted = {
        "description": "Detached and reserved; or, in wait mode, no outcome yet "
        f"{WAIT_MARGIN:.0f} s past the timeout, or the caller already holds its share of "
        "waits (`apiserver.maxWaitsPerIdentity`). Poll the Location.",
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


COMMON = (400, 401, 503)


def leases() -> Json:
    create = _operation(
        "Create a cluster lease",
        202,
        _ref(LeaseCreated),
        errors=(*COMMON, 403, 404, 409, 429),
        request=CreateLease,
    )
    create["responses"]["202"]["headers"] = {"Location": _header("/v1/leases/{id}")}
    retry_after = "Seconds; with code `rate_limited` or `overloaded`, never `concurrency_limit`."
    create["responses"]["429"]["headers"] = {"Retry-After": _header(retry_after)}
    return {
        "post": create,
        "get": _operation(
            "The caller's active leases",
            200,
            {"type": "array", "items": _ref(LeaseSummary)},
            errors=COMMON,
        ),
    }


def lease() -> Json:
    read = _operation("One lease", 200, _ref(Lease), errors=(*COMMON, 404))
    read["parameters"] = [
        {
            "name": "waitSeconds",
            "in": "query",
            "required": False,
            "schema": {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_SECONDS, "default": 0},
            "description": "A long poll: a Pending lease is answered when it changes (bound, a "
            "new queue position, released), or after this many seconds; a lease in any other "
            "phase at once. The answer may come sooner, unchanged (a stopping server).",
        }
    ]
    return {
        "get": read,
        "delete": _operation("Release", 204, None, errors=(*COMMON, 404, 409)),
        "patch": _operation(
            "Extend the TTL", 200, _ref(Expiry), errors=(*COMMON, 404, 409), request=ExtendLease
        ),
    }


def lease_events() -> Json:
    return {
        "get": _operation(
            "The lease's recent events, oldest first",
            200,
            {"type": "array", "items": _ref(LeaseEvent)},
            errors=(*COMMON, 404),
        ),
    }


def diagnostics() -> Json:
    return {
        "get": _operation(
            "Diagnostics bundle URL", 200, _ref(DiagnosticsBundle), errors=(*COMMON, 404, 503)
        ),
    }


def pools() -> Json:
    return {
        "get": _operation(
            "Accessible pools", 200, {"type": "array", "items": _ref(PoolRecord)}, errors=COMMON
        ),
    }


def pool() -> Json:
    return {"get": _operation("One pool", 200, _ref(PoolRecord), errors=(*COMMON, 404))}


def pool_leases() -> Json:
    return {
        "get": _operation(
            "Leases of a pool",
            200,
            {"type": "array", "items": _ref(PoolLease)},
            errors=(*COMMON, 404),
        ),
    }


def sandbox_leases() -> Json:
    return {
        "post": _sandbox_create(),
        "get": _operation(
            "The caller's Sandbox leases (alpha)",
            200,
            {"type": "array", "items": _ref(SandboxLease)},
            errors=(*COMMON, 404),  # 404: the Sandbox API is not served (SANDBOX_ONLY)
        ),
    }


def sandbox_lease() -> Json:
    return {
        "get": _operation(
            "One Sandbox lease (alpha)", 200, _ref(SandboxLease), errors=(*COMMON, 404)
        ),
        "patch": _operation(
            "Extend a Ready Sandbox lease (alpha)",
            200,
            _ref(SandboxExpiry),
            errors=(*COMMON, 404, 409),
            request=ExtendSandboxLease,
        ),
        "delete": _operation("Request release (alpha)", 204, None, errors=(*COMMON, 403, 404, 409)),
    }


def sandbox_logs() -> Json:
    return {"get": _sandbox_logs()}


def attach() -> Json:
    options: list[tuple[str, bool, Json]] = [
        ("container", False, {"type": "string"}),
        ("tty", False, {"type": "boolean", "default": False}),
    ]
    return {"get": _stream("Attach", options)}


def port_forward() -> Json:
    port = {"type": "string", "description": "declared number or name"}
    return {"get": _stream("Port-forward", [("port", True, port)])}


def executions() -> Json:
    return {"post": _execution_create()}


def execution() -> Json:
    return {
        "get": _operation(
            "One execution, without its output (alpha)",
            200,
            _ref(Execution),
            errors=(*COMMON, 404),
        ),
        "delete": _operation(
            "Cancel an execution; the state that applies (alpha)",
            200,
            _ref(Execution),
            errors=(*COMMON, 404),
        ),
    }


def execution_logs() -> Json:
    return {"get": _execution_logs()}


def _rate_limited(responses: Json, what: str, setting: str) -> None:
    """The 429 of a route charged to a per-principal token bucket: which rate, and when to retry."""
    responses["429"]["description"] = (
        f"code `rate_limited`: the caller's {what} passed the replica's rate "
        f"(`{setting}`); `Retry-After` in seconds"
    )
    responses["429"]["headers"] = {"Retry-After": _header("Seconds until a token is back.")}


def _login() -> Json:
    operation = _operation(
        "Exchange a credential for a session",
        200,
        _ref(SessionIssued),
        errors=(*COMMON, 409, 429),
        request=Login,
    )
    responses = operation["responses"]
    responses["409"]["description"] = (
        "reason `conflict_retryable`: other logins of this identity took its session slots "
        "meanwhile; retry"
    )
    _rate_limited(responses, "logins", "apiserver.loginRate")
    return operation


def login() -> Json:
    return {
        "post": _login(),
        "delete": _operation("Log out the session", 204, None, errors=COMMON),
    }


def status() -> Json:
    return {
        "get": _operation("Service status", 200, _ref(Status), errors=(401, 503), secured=False)
    }


def healthz() -> Json:
    return {"get": _operation("Liveness", 200, None, errors=(), secured=False)}


class DocumentedRoute(Protocol):
    """A route of the app's route table (lessor.apiserver.http.app.ROUTES), as the document
    sees it: the one table that both registers the routes and lists the document's paths."""

    @property
    def path(self) -> str: ...

    @property
    def sandbox(self) -> bool: ...

    @property
    def operations(self) -> Callable[[], Json] | None: ...

    @property
    def methods(self) -> frozenset[str]: ...


def document(routes: Iterable[DocumentedRoute]) -> Json:
    """The document of the routes that have `operations`. A path documents exactly the methods
    its resource answers: anything else fails here, so in the unit test of the reference."""
    components: Json = {}
    for model in MODELS:
        schema = model.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
        components.update(schema.pop("$defs", {}))
        components[model.__name__] = schema
    create_execution = components[CreateExecution.__name__]["properties"]
    for field, note in _execution_notes(components[CreateExecution.__name__]).items():
        create_execution[field]["description"] = note
    paths: Json = {}
    for route in routes:
        if route.operations is None:
            continue
        operations = route.operations()
        if set(operations) != route.methods:
            raise ValueError(
                f"{route.path} documents {sorted(operations)}, answers {sorted(route.methods)}"
            )
        item: Json = {"description": SANDBOX_ONLY} if route.sandbox else {}
        if parameters := re.findall(r"{(\w+)}", route.path):
            item["parameters"] = [_path_param(name) for name in parameters]
        paths[route.path] = item | operations
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
        "paths": paths,
    }
