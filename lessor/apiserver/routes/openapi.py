"""The OpenAPI 3.1 document of the API, served at /openapi.json, built from the pydantic models
that validate requests and describe responses, so the document cannot drift from the checks.

Each route's success status, body, query parameters and security come from its resource
(lessor.apiserver.routes.route), where the responder states them once; this module adds what
only a reader needs: summaries, the errors each operation may answer, headers, notes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pydantic import BaseModel

from lessor import __version__
from lessor.apiserver.http.bodies import (
    MAX_COMMAND_BYTES,
    AttachQuery,
    CreateExecution,
    CreateLease,
    CreateSandboxLease,
    ExtendLease,
    ExtendSandboxLease,
    ForwardQuery,
    Login,
)
from lessor.apiserver.routes.route import Route
from lessor.apiserver.sandboxes.executions import MAX_RUNNING_PER_LEASE, WAIT_MARGIN
from lessor.protocol.json_object import Json
from lessor.protocol.responses import (
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


def _body(model: type[BaseModel], many: bool) -> Json:
    return {"type": "array", "items": _ref(model)} if many else _ref(model)


def _query_parameters(model: type[BaseModel]) -> list[Json]:
    """A query model's fields as query parameters, in its order."""
    schema = model.model_json_schema(by_alias=True)
    required = set(schema.get("required", []))
    parameters = []
    for name, field in schema["properties"].items():
        # An optional value is anyOf [its schema, null]: the parameter is just left out.
        options = [o for o in field.get("anyOf", []) if o.get("type") != "null"]
        merged = {**(options[0] if options else {}), **field}
        value = {
            key: given
            for key, given in merged.items()
            if key not in {"anyOf", "title", "description"} and given is not None
        }
        parameter: Json = {"name": name, "in": "query", "required": name in required}
        parameter["schema"] = value
        if "description" in field:
            parameter["description"] = field["description"]
        parameters.append(parameter)
    return parameters


def _operation(
    route: Route,
    method: str,
    summary: str,
    *,
    errors: tuple[int, ...],
) -> Json:
    """The operation of `method` on `route`: its successes, query, body and security as the
    resource declares them, and what the caller says."""
    answer = route.answer(method)
    ok = str(answer.status)
    responses: Json = {ok: {"description": summary}}
    if answer.body is not None:
        responses[ok]["content"] = _json(_body(answer.body, answer.many))
    for status, model in answer.others.items():
        responses[str(status)] = {"description": summary, "content": _json(_ref(model))}
    responses.update(_errors(*errors))
    operation: Json = {"summary": summary, "responses": responses}
    if answer.query is not None:
        operation["parameters"] = _query_parameters(answer.query)
    if answer.request is not None:
        required = not answer.request_optional
        operation["requestBody"] = {"required": required, "content": _json(_ref(answer.request))}
    if route.public:
        operation["security"] = []
    return operation


def _path_param(name: str) -> Json:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


def _header(description: str) -> Json:
    return {"description": description, "schema": {"type": "string"}}


def _sandbox_create(route: Route) -> Json:
    operation = _operation(
        route, "post", "Create a Sandbox lease (alpha)", errors=(400, 401, 503, 403, 404, 409, 429)
    )
    operation["responses"]["202"]["headers"] = {"Location": _header("/v1/sandbox-leases/{id}")}
    retry_after = "Seconds; only with reason `rate_limited`, never with `concurrency_limit`."
    operation["responses"]["429"]["headers"] = {"Retry-After": _header(retry_after)}
    return operation


def _stream(route: Route, kind: str, query: type[BaseModel]) -> Json:
    """The WebSocket is answered in front of Falcon (lessor.apiserver.sandboxes.upgrade), which
    parses its query itself, into `query`: the parameters are described from that model."""
    operation = _operation(
        route,
        "get",
        f"{kind} session over a WebSocket (alpha): send `Upgrade: websocket`; frames and close "
        "codes in docs/api.md",
        errors=(400, 401, 503, 403, 404, 409, 426, 429),
    )
    operation["responses"]["101"]["description"] = "Switching Protocols: the session begins"
    operation["responses"]["426"]["description"] = "the request did not ask for the upgrade"
    operation["parameters"] = _query_parameters(query)
    return operation


def _execution_create(route: Route) -> Json:
    operation = _operation(
        route,
        "post",
        "Run a command in the Sandbox (alpha): 200 once it ended, 202 when detached",
        errors=(400, 401, 503, 404, 409, 429, 501),
    )
    location = {"Location": _header(EXECUTION_LOCATION)}
    responses = operation["responses"]
    responses["200"]["headers"] = location
    responses["202"]["description"] = (
        "Detached and reserved; or, in wait mode, no outcome yet "
        f"{WAIT_MARGIN:.0f} s past the timeout, or the caller already holds its share of "
        "waits (`apiserver.maxWaitsPerIdentity`). Poll the Location."
    )
    responses["202"]["headers"] = location
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
    return operation


COMMON = (400, 401, 503)


def leases(route: Route) -> Json:
    create = _operation(
        route, "post", "Create a cluster lease", errors=(*COMMON, 403, 404, 409, 429)
    )
    create["responses"]["202"]["headers"] = {"Location": _header("/v1/leases/{id}")}
    retry_after = "Seconds; with code `rate_limited` or `overloaded`, never `concurrency_limit`."
    create["responses"]["429"]["headers"] = {"Retry-After": _header(retry_after)}
    return {
        "post": create,
        "get": _operation(route, "get", "The caller's active leases", errors=COMMON),
    }


def lease(route: Route) -> Json:
    return {
        "get": _operation(route, "get", "One lease", errors=(*COMMON, 404)),
        "delete": _operation(route, "delete", "Release", errors=(*COMMON, 404, 409)),
        "patch": _operation(route, "patch", "Extend the TTL", errors=(*COMMON, 404, 409)),
    }


def lease_events(route: Route) -> Json:
    summary = "The lease's recent events, oldest first"
    return {"get": _operation(route, "get", summary, errors=(*COMMON, 404))}


def diagnostics(route: Route) -> Json:
    return {
        "get": _operation(route, "get", "Diagnostics bundle URL", errors=(*COMMON, 404, 503)),
    }


def pools(route: Route) -> Json:
    return {"get": _operation(route, "get", "Accessible pools", errors=COMMON)}


def pool(route: Route) -> Json:
    return {"get": _operation(route, "get", "One pool", errors=(*COMMON, 404))}


def pool_leases(route: Route) -> Json:
    return {"get": _operation(route, "get", "Leases of a pool", errors=(*COMMON, 404))}


def sandbox_leases(route: Route) -> Json:
    return {
        "post": _sandbox_create(route),
        "get": _operation(
            route,
            "get",
            "The caller's Sandbox leases (alpha)",
            errors=(*COMMON, 404),  # 404: the Sandbox API is not served (SANDBOX_ONLY)
        ),
    }


def sandbox_lease(route: Route) -> Json:
    return {
        "get": _operation(route, "get", "One Sandbox lease (alpha)", errors=(*COMMON, 404)),
        "patch": _operation(
            route, "patch", "Extend a Ready Sandbox lease (alpha)", errors=(*COMMON, 404, 409)
        ),
        "delete": _operation(
            route, "delete", "Request release (alpha)", errors=(*COMMON, 403, 404, 409)
        ),
    }


def sandbox_logs(route: Route) -> Json:
    summary = "Tail of the Sandbox's pod log (alpha)"
    return {"get": _operation(route, "get", summary, errors=(*COMMON, 404, 409))}


def attach(route: Route) -> Json:
    return {"get": _stream(route, "Attach", AttachQuery)}


def port_forward(route: Route) -> Json:
    return {"get": _stream(route, "Port-forward", ForwardQuery)}


def executions(route: Route) -> Json:
    return {"post": _execution_create(route)}


def execution(route: Route) -> Json:
    return {
        "get": _operation(
            route, "get", "One execution, without its output (alpha)", errors=(*COMMON, 404)
        ),
        "delete": _operation(
            route,
            "delete",
            "Cancel an execution; the state that applies (alpha)",
            errors=(*COMMON, 404),
        ),
    }


def execution_logs(route: Route) -> Json:
    summary = "Windows of an execution's retained output (alpha)"
    return {"get": _operation(route, "get", summary, errors=(*COMMON, 404))}


def _rate_limited(responses: Json, what: str, setting: str) -> None:
    """The 429 of a route charged to a per-principal token bucket: which rate, and when to retry."""
    responses["429"]["description"] = (
        f"code `rate_limited`: the caller's {what} passed the replica's rate "
        f"(`{setting}`); `Retry-After` in seconds"
    )
    responses["429"]["headers"] = {"Retry-After": _header("Seconds until a token is back.")}


def login(route: Route) -> Json:
    create = _operation(
        route, "post", "Exchange a credential for a session", errors=(*COMMON, 409, 429)
    )
    responses = create["responses"]
    responses["409"]["description"] = (
        "reason `conflict_retryable`: other logins of this identity took its session slots "
        "meanwhile; retry"
    )
    _rate_limited(responses, "logins", "apiserver.loginRate")
    return {
        "post": create,
        "delete": _operation(route, "delete", "Log out the session", errors=COMMON),
    }


def status(route: Route) -> Json:
    return {"get": _operation(route, "get", "Service status", errors=(401, 503))}


def healthz(route: Route) -> Json:
    return {"get": _operation(route, "get", "Liveness", errors=())}


def document(routes: Iterable[Route]) -> Json:
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
        operations = route.operations(route)
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
