"""The response bodies of the API, as pydantic models, declared once for both ends: the API
server answers with them and its OpenAPI document is made from them
(lessor.apiserver.routes.openapi), and the CLI reads the answers through them. A newer server
may add fields (they are ignored here); it never removes or retypes one.

An answer holds exactly the fields its server set (lessor.apiserver.http.answers says how it is
serialized): an optional field the server had nothing for is absent, and one it set to None is
null (a Pending lease's `expires_at`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from lessor.protocol.durations import format_duration
from lessor.protocol.error_reasons import Reason, SpecReason
from lessor.protocol.json_object import Json
from lessor.protocol.phases import (
    ClusterLeasePhase,
    ExecutionState,
    PoolPhase,
    ReleaseCause,
    SandboxLeasePhase,
)
from lessor.protocol.runner import LOG_WINDOW, OUTPUT_CAP
from lessor.protocol.sandbox_limits import DEFAULT_TIMEOUT, LOG_BYTES_MAX, MAX_TIMEOUT


class ResponseBody(BaseModel):
    """Every response body. An assignment is validated as construction is: a server sets an
    optional field once it knows it has one (only the fields set are answered), and what it
    sets is checked all the same. A value that fails is never repeated in the error, which is
    logged: an answer may carry a kubeconfig or a session token."""

    model_config = ConfigDict(validate_assignment=True, hide_input_in_errors=True)


class Error(ResponseBody):
    error: str
    detail: str | None = None
    reason: SpecReason | None = Field(
        default=None, description="One of spec 7.2's reasons; omitted where none applies."
    )
    code: Reason | None = Field(
        default=None,
        description="The refusal's cause: the reason, or lessor's finer code where the spec "
        "names none (alias_active, idempotency_conflict, concurrency_limit, rate_limited, ...).",
    )


class LeaseCreated(ResponseBody):
    id: str
    phase: ClusterLeasePhase
    profile: str
    queue_position: int
    effective_ttl: str
    alias: str | None = None
    metadata: dict[str, Any] | None = None


class LeaseSummary(ResponseBody):
    id: str
    phase: ClusterLeasePhase
    profile: str
    expires_at: str | None = None
    alias: str | None = None


class ClusterHealth(ResponseBody):
    healthy: bool
    since: str = Field(description="When the cluster last turned healthy or unhealthy.")
    message: str = Field(description="What the last health check found.")


class Lease(LeaseSummary):
    metadata: dict[str, Any] | None = None
    queue_position: int | None = Field(default=None, description="1-based, while Pending.")
    kubeconfig: str | None = Field(default=None, description="Present once the lease is Bound.")
    cluster_health: ClusterHealth | None = Field(
        default=None,
        description="While Bound, once the cluster has failed a health check: a cluster that "
        "fails under a lease is kept until the lease ends, and this says so.",
    )


class LeaseEvent(ResponseBody):
    type: Literal["Normal", "Warning"]
    reason: str = Field(description="A word: Bound, Extended, ClusterUnhealthy, Released, ...")
    message: str
    count: int = Field(description="How many times it happened (repeats are folded into one).")
    first_seen: str
    last_seen: str


class DiagnosticsBundle(ResponseBody):
    url: str = Field(description="A pre-signed GET URL of the bundle (a .tar.gz).")
    expires_at: str
    captured_at: str
    size_bytes: int
    truncated: bool = Field(description="Something did not fit in the pool's maxBytes or time.")


class Expiry(ResponseBody):
    expires_at: str


class PoolPolicy(ResponseBody):
    mode: str = Field(description="fixed, or autoscale (the warm target follows demand).")
    ttl: str
    warm_target: int = Field(
        alias="warmTarget", description="Warm clusters kept now (an autoscaled pool's current)."
    )


class PoolRecord(ResponseBody):
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
    phase: PoolPhase
    ready: int
    leased: int
    creating: int
    recycling: int
    unhealthy: int
    quarantined: int
    queue_depth: int = Field(alias="queueDepth")
    policy: PoolPolicy
    message: str | None = Field(
        default=None,
        description="Why the pool cannot make working clusters now (its backend is not served,"
        " or new clusters fail to start), when that is so.",
    )


class PoolLease(ResponseBody):
    id: str
    phase: ClusterLeasePhase | SandboxLeasePhase
    profile: str
    cluster_name: str | None = None
    requester: str | None = Field(
        default=None,
        description="\"redacted\" for other tenants' leases; absent for a Sandbox pool's leases.",
    )
    expires_at: str | None = None
    alias: str | None = Field(default=None, description="The caller's own leases only.")
    metadata: dict[str, Any] | None = Field(
        default=None, description="The caller's own leases only."
    )


class StatusAuth(ResponseBody):
    methods: list[str]
    sessions: list[str]


class StatusPool(ResponseBody):
    name: str
    ready: int
    leased: int
    creating: int
    phase: PoolPhase | None = None
    quarantined: int | None = None


class StatusSandbox(ResponseBody):
    mode: Literal["disabled", "external"]
    served: bool = Field(description="Whether the /v1/sandbox-leases paths are served.")
    reason: str | None = Field(default=None, description="External mode: the check's verdict.")


class Status(ResponseBody):
    version: str
    auth: StatusAuth
    pools: list[StatusPool]
    sandbox: StatusSandbox


class SessionIssued(ResponseBody):
    session_token: str
    identity: str
    method: str
    expires_at: str


class _SandboxLeaseFields(ResponseBody):
    id: str
    phase: SandboxLeasePhase
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

    phase: Literal["Pending"] = Field(description="Always `Pending`.")
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


class PlacementRef(ResponseBody):
    name: str
    uid: str


class SandboxPlacement(ResponseBody):
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


class SandboxExpiry(ResponseBody):
    model_config = ConfigDict(populate_by_name=True)

    expires_at: str = Field(alias="expiresAt")
    extensions_count: int = Field(alias="extensionsCount")
    max_extensions: int = Field(alias="maxExtensions")


class SandboxLogs(ResponseBody):
    id: str
    pod: str
    data: str
    truncated: bool = Field(description=f"The tail reached the {LOG_BYTES_MAX // 1024} KiB cap.")


DEFAULT_TIMEOUT_TEXT = f"{int(DEFAULT_TIMEOUT.total_seconds())}s"
MAX_TIMEOUT_TEXT = format_duration(MAX_TIMEOUT)
CAP = f"{OUTPUT_CAP // (1024 * 1024)} MiB"


class Execution(ResponseBody):
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
        description=f"Output past the first {CAP} of stdout or stderr was dropped; known once "
        "the command ended."
    )
    timeout: str = Field(
        description=f"The timeout granted: the request's or {DEFAULT_TIMEOUT_TEXT}, at most "
        f"{MAX_TIMEOUT_TEXT} and never past the lease's expiry."
    )


class ExecutionResult(Execution):
    """The 200 of a wait-mode create: the execution once it ended, with its retained output."""

    stdout: str = Field(
        description=f"The first {CAP} of the stream, as UTF-8 with invalid bytes replaced."
    )
    stderr: str = Field(
        description=f"The first {CAP} of the stream, as UTF-8 with invalid bytes replaced."
    )


class ExecutionWindow(ResponseBody):
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
        description=f"Output past the first {CAP} of stdout or stderr was dropped; known once "
        "the command ended."
    )


class ExecutionLogs(ResponseBody):
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


def serialized(body: BaseModel) -> Json:
    """The JSON of an answer's model, successes and errors alike: the one rule, stated here
    only. Fields are spelt as the document spells them (the aliases: `statusUrl`, `exitCode`,
    `queueDepth`, ...), and an answer holds exactly the fields its server set: one set to None
    is null (a Pending lease's `expires_at`, which the spec lists among a listed lease's
    fields), one never set is absent (the `alias` of a lease that has none). `exclude_none`
    would drop those nulls, which clients have always received."""
    return body.model_dump(mode="json", by_alias=True, exclude_unset=True)
