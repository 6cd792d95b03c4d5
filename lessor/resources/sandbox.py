"""SandboxPool, SandboxLease and SandboxExecution (spec 2.4 to 2.6, 3.2, 3.3): the alpha API.

The sandbox itself belongs to the external agent-sandbox controller; these resources are what
lessor adds around it: who may have one, for how long, and the executions run in it. Callers
never send a workload, so nothing here can carry a pod spec except the administrator's pool.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field

from lessor.protocol.durations import PositiveDuration
from lessor.protocol.phases import (
    SANDBOX_LEASE,
    ExecutionState,
    LeasePhases,
    PoolPhase,
    ReleaseCause,
    SandboxLeasePhase,
)
from lessor.resources.base import (
    AGE,
    DNS_LABEL,
    OBSERVED_GENERATION,
    Condition,
    CrdInfo,
    ObjectRef,
    PrinterColumn,
    Resource,
    SpecModel,
    StatusModel,
    conditions_field,
)
from lessor.resources.cluster import ALIAS, REQUESTER, Extension, PoolName
from lessor.resources.lease_time import expires_at

# The SandboxPool's defaults, also what a lease admitted without its own copy falls back to.
DEFAULT_TTL = "30m"
DEFAULT_PROVISIONING_TIMEOUT = "5m"
# The ceiling, from readiness, the API holds an extension of a lease without `maxTtl` to. The API
# writes one at every admission (the pool's and the grant's), so only a lease made otherwise
# lacks it; the operator's expiry sets no ceiling there (SandboxLeaseSpec.expires_at).
CEILING_WITHOUT_MAX_TTL = "24h"


def _at_most_253_bytes(key: str) -> str:
    if len(key.encode()) > 253:
        raise ValueError("idempotencyKey is longer than 253 bytes")
    return key


IdempotencyKey = Annotated[str, AfterValidator(_at_most_253_bytes)]


class Runner(SpecModel):
    path: str = Field(pattern=r"^/", description="Absolute path of the lessor runner in the image.")
    container: str | None = Field(
        default=None, description="Container; default the first of the template."
    )


class DeclaredPort(SpecModel):
    name: str = Field(
        max_length=15,
        pattern=DNS_LABEL,
        description="The port's name (a DNS label of at most 15 characters): port-forward may"
        " ask for the port by it.",
    )
    port: int = Field(ge=1, le=65535, description="The sandbox pod's port number.")
    protocol: Literal["TCP"] = Field(
        default="TCP", description="TCP, the only protocol port-forward carries."
    )


# Executions per lease lifetime unless the pool says otherwise (spec 8: the bound "exists per
# lease"; its number is not shown).
DEFAULT_MAX_EXECUTIONS = 500


class SandboxPoolSpec(SpecModel):
    default_ttl: PositiveDuration = Field(
        default=DEFAULT_TTL,
        description="The TTL of a lease that asks for none (a duration such as 30m or 1h30m;"
        " default 30m), within maxTtl and the caller's grant.",
    )
    max_ttl: PositiveDuration = Field(default="4h", description="TTL cap of the pool.")
    template: dict[str, Any] = Field(
        description="Pod template of the sandbox (the agent-sandbox SandboxTemplate's podTemplate)."
    )
    runner: Runner | None = Field(default=None, description="Without it executions answer 501.")
    ports: list[DeclaredPort] = Field(default_factory=list, description="Ports callers may reach.")
    warm: int = Field(default=0, ge=0, le=1000, description="Sandboxes kept warm.")
    provisioning_timeout: PositiveDuration = Field(
        default=DEFAULT_PROVISIONING_TIMEOUT,
        description="How long a lease may take, from its creation, to be Ready.",
    )
    max_executions: int = Field(
        default=DEFAULT_MAX_EXECUTIONS,
        ge=0,
        le=1_000_000,
        description="Executions one lease may run in its lifetime (spec 8's per-lifetime bound), "
        "fixed in each lease when it is granted.",
    )

    def containers(self) -> list[str]:
        """The template's containers, in order: the only ones exec and attach may use. A pod can
        hold others (a sidecar a webhook injects, a mesh proxy holding the mesh's credentials)
        that are not the tenant's to enter."""
        listed = self.template.get("spec", {}).get("containers") or []
        return [c["name"] for c in listed if isinstance(c, dict) and isinstance(c.get("name"), str)]


class SandboxPoolStatus(StatusModel):
    phase: PoolPhase | None = Field(
        default=None,
        description="Healthy when `warm` sandboxes are ready, Degraded while fewer are, or"
        " Unavailable while the installed agent-sandbox fails the compatibility check.",
    )
    ready: int = Field(default=0, description="Warm sandboxes ready to be claimed.")
    creating: int = Field(default=0, description="Warm sandboxes made but not ready yet.")
    leased: int = Field(default=0, description="Sandboxes of Provisioning and Ready leases.")
    recycling: int = Field(default=0, description="Sandboxes of Releasing leases.")
    unhealthy: int = Field(
        default=0, description="Ready leases whose pod is being replaced (no pod recorded)."
    )
    quarantined: int = Field(
        default=0,
        description="Quarantined leases: their cleanup could not be verified, so their capacity"
        " is withheld.",
    )
    queue_depth: int = Field(default=0, description="Leases not yet given a sandbox.")
    template_ref: ObjectRef | None = Field(
        default=None,
        description="The agent-sandbox SandboxTemplate lessor-<pool> made from spec.template.",
    )
    warm_pool_ref: ObjectRef | None = Field(
        default=None,
        description="The agent-sandbox SandboxWarmPool lessor-<pool>, which keeps `warm`"
        " sandboxes; leases are placed only once it exists.",
    )
    observed_generation: int | None = Field(default=None, description=OBSERVED_GENERATION)
    conditions: list[Condition] = conditions_field(
        "Ready (the phase is Healthy) and AgentSandboxCompatible (the installed agent-sandbox"
        " passes the compatibility check; the message says why not)."
    )


class SandboxPool(Resource[SandboxPoolSpec, SandboxPoolStatus]):
    kind: Literal["SandboxPool"] = "SandboxPool"
    crd: ClassVar[CrdInfo] = CrdInfo(
        plural="sandboxpools",
        singular="sandboxpool",
        short_names=("spool",),
        description="An administrator-owned pool of agent sandboxes.",
        columns=(
            PrinterColumn("Phase", ".status.phase"),
            PrinterColumn("Default TTL", ".spec.defaultTtl"),
            PrinterColumn("Ready", ".status.ready", "integer"),
            PrinterColumn("Leased", ".status.leased", "integer"),
            AGE,
        ),
    )


class SandboxLeaseSpec(SpecModel):
    """Written once by the API at admission (what the caller asked and what its grant allowed,
    so the operator never needs the caller's claims), then only `releaseRequested` and
    `extensions` change."""

    pool: PoolName = Field(description="The SandboxPool, in the same namespace.")
    ttl: PositiveDuration | None = Field(default=None, description="As requested; none: default.")
    effective_ttl: PositiveDuration | None = Field(
        default=None, description="The TTL granted: request or default, within both caps."
    )
    max_ttl: PositiveDuration | None = Field(
        default=None, description="Ceiling of the lease's lifetime measured from readiness."
    )
    provisioning_timeout: PositiveDuration | None = Field(
        default=None, description="From creation to Ready, copied from the pool at admission."
    )
    alias: str | None = Field(default=None, max_length=63, pattern=DNS_LABEL, description=ALIAS)
    idempotency_key: IdempotencyKey | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        description="The caller's key for this create (1 to 253 bytes): the lease's name is"
        " derived from it and the requester, so a retry with the same key finds this lease.",
    )
    requester: str | None = Field(default=None, max_length=1024, description=REQUESTER)
    max_extensions: int = Field(
        default=2,
        ge=0,
        le=100,
        description="Extensions allowed, from the Sandbox grant at admission (default 2); 0"
        " forbids.",
    )
    release_requested: bool = Field(
        default=False,
        description="Release intent, written by the API's DELETE: the operator then releases the"
        " lease (cause Requested).",
    )
    extensions: list[Extension] = Field(
        default_factory=list,
        max_length=100,
        description="Extension intents, appended by the API: the first maxExtensions count, and"
        " never past maxTtl from readiness.",
    )
    max_executions: int = Field(
        default=DEFAULT_MAX_EXECUTIONS,
        ge=0,
        le=1_000_000,
        description="The pool's per-lifetime execution bound when the lease was granted.",
    )
    executions_reserved: int = Field(
        default=0, ge=0, description="Executions reserved over the lifetime (the API counts)."
    )
    cancelled: bool = Field(
        default=False,
        description="A tombstone of the admission arbiter: the name is taken so that a create "
        "whose answer was lost can no longer land; it is no lease.",
    )

    def expires_at(self, ready_at: datetime.datetime) -> datetime.datetime:
        """The one expiry rule, for the operator that enforces it and the API that answers it."""
        ttl = self.effective_ttl or self.ttl or DEFAULT_TTL
        return expires_at(ready_at, ttl, self.extensions, self.max_extensions, self.max_ttl)

    def extension_ceiling(self) -> str:
        """How long after readiness no extension may carry the lease's expiry past."""
        return self.max_ttl or CEILING_WITHOUT_MAX_TTL


class SandboxLeaseStatus(StatusModel):
    phase: SandboxLeasePhase | None = Field(
        default=None,
        description="Pending (not placed yet; the message says why), Provisioning (its"
        " SandboxClaim made, the sandbox not ready), Ready (usable until expiresAt), Releasing"
        " (access revoked, cleanup being verified), Released or Expired (cleanup verified), or"
        " Quarantined (cleanup could not be verified: capacity withheld).",
    )
    effective_ttl: str | None = Field(
        default=None,
        description="The TTL expiresAt is computed from: spec.effectiveTtl, or spec.ttl for a"
        " lease admitted without one (a duration such as 30m).",
    )
    provisioning_deadline: datetime.datetime | None = Field(
        default=None, description="From the lease's creation time; never reset by a retry."
    )
    release_cause: ReleaseCause | None = Field(
        default=None, description="Recorded once when teardown starts; never changed."
    )
    ready_at: datetime.datetime | None = Field(
        default=None, description="When the sandbox became ready; expiresAt counts from it."
    )
    expires_at: datetime.datetime | None = Field(
        default=None,
        description="When the lease ends: readyAt plus effectiveTtl plus the extensions applied,"
        " never past readyAt plus spec.maxTtl.",
    )
    releasing_since: datetime.datetime | None = Field(
        default=None,
        description="When teardown started: unverified past the operator's --teardown-grace from"
        " then, the lease is Quarantined.",
    )
    ended_at: datetime.datetime | None = Field(
        default=None,
        description="When it became Released or Expired; the operator's --lease-retention counts"
        " from it.",
    )
    extensions_count: int = Field(default=0, description="Extensions applied to expiresAt.")
    claim: ObjectRef | None = Field(
        default=None,
        description="The agent-sandbox SandboxClaim made for the lease, named after it.",
    )
    sandbox: ObjectRef | None = Field(
        default=None, description="The agent-sandbox Sandbox the claim was given."
    )
    pod: ObjectRef | None = Field(
        default=None,
        description="The sandbox's live pod, where executions, attach and port-forward go;"
        " unset while agent-sandbox replaces it.",
    )
    evidence: list[str] = Field(default_factory=list, description="What cleanup left behind.")
    message: str = Field(
        default="",
        description="What the operator says of the lease now: why it waits, or what cleanup left.",
    )
    observed_generation: int | None = Field(default=None, description=OBSERVED_GENERATION)
    conditions: list[Condition] = conditions_field("Ready (the phase is Ready).")


class SandboxLease(Resource[SandboxLeaseSpec, SandboxLeaseStatus]):
    kind: Literal["SandboxLease"] = "SandboxLease"
    phases: ClassVar[LeasePhases] = SANDBOX_LEASE
    crd: ClassVar[CrdInfo] = CrdInfo(
        plural="sandboxleases",
        singular="sandboxlease",
        short_names=("slease",),
        description="A time-limited lease of one agent sandbox.",
        columns=(
            PrinterColumn("Pool", ".spec.pool"),
            PrinterColumn("Phase", ".status.phase"),
            PrinterColumn("Cause", ".status.releaseCause", priority=1),
            PrinterColumn("Expires", ".status.expiresAt"),
            AGE,
        ),
    )


def command_secret_name(execution: str) -> str:
    """The Secret that holds an execution's ExecutionCommand."""
    return f"{execution}-command"


class ExecutionCommand(SpecModel):
    """What an execution runs: its argv and working directory. They are kept out of the
    SandboxExecution, since argv often carries credentials (`curl -H "Authorization: ..."`) and a
    custom object is shown whole (`kubectl get -o yaml`, audit logs at RequestResponse level,
    every reader of the kind), in a Secret of their own, which audit policies conventionally log
    at Metadata level and RBAC guards apart. The execution keeps the digest: a keyed retry is
    compared with it, and the Secret is checked against it before anything runs."""

    command: list[Annotated[str, Field(pattern=r"^[^\x00]*$")]] = Field(
        min_length=1, max_length=1024, description="argv; no shell, no NUL."
    )
    cwd: str | None = Field(default=None, max_length=4096, pattern=r"^/[^\x00]*$")

    def digest(self) -> str:
        """sha256 (hex) of the canonical JSON of {command, cwd}."""
        canonical = json.dumps(
            {"command": self.command, "cwd": self.cwd}, sort_keys=True, separators=(",", ":")
        )
        return hashlib.sha256(canonical.encode()).hexdigest()

    def _plain(self) -> dict[str, str]:
        return {"argv": "\0".join(self.command)} | ({} if self.cwd is None else {"cwd": self.cwd})

    def secret_data(self) -> dict[str, str]:
        """The Secret's `data`: the argv joined by NUL, which no argument holds, and the cwd if
        any. Not JSON, which spells a control character in six bytes: this way the value is the
        argv's bytes and one per separator (at most about 17 KiB as the API accepts commands),
        well within a Secret's 1 MiB."""
        return {
            key: base64.b64encode(value.encode()).decode() for key, value in self._plain().items()
        }

    def stored_bytes(self) -> int:
        """The bytes its Secret holds (decoded): what a lease's cap on command bytes counts."""
        return sum(len(value.encode()) for value in self._plain().values())

    @classmethod
    def from_secret(cls, data: Mapping[str, str | bytes] | None, digest: str) -> ExecutionCommand:
        """The command of a Secret's `data`, provided it has `digest`, the one its execution was
        reserved with; ValueError otherwise, so a missing or changed value never runs."""
        plain = {
            key: base64.b64decode(value, validate=True).decode()
            for key, value in (data or {}).items()
        }
        command = cls(command=plain.get("argv", "").split("\0"), cwd=plain.get("cwd"))
        if command.digest() != digest:
            raise ValueError("the command does not have the execution's commandDigest")
        return command


class SandboxExecutionSpec(SpecModel):
    lease: ObjectRef = Field(description="The exact lease instance (name and uid).")
    pod: ObjectRef | None = Field(default=None, description="The sandbox pod it runs in.")
    runner: Runner | None = Field(default=None, description="The pool's runner, at creation.")
    command_digest: str = Field(
        pattern=r"^[0-9a-f]{64}$",
        description="sha256 of the canonical JSON of {command, cwd}, which are kept in the Secret"
        " <execution>-command, out of this object (argv can carry credentials).",
    )
    timeout: PositiveDuration = Field(default="60s", description="At most 1h; never past expiry.")
    requested_timeout: PositiveDuration | None = Field(
        default=None, description="As the caller asked: what a keyed retry is compared with."
    )
    container: str | None = Field(
        default=None,
        max_length=63,
        description="The container the caller asked for, one of the pool template's; unset: the"
        " runner's container.",
    )
    idempotency_key: IdempotencyKey = Field(
        min_length=1,
        max_length=253,
        description="The caller's key for this execution (1 to 253 bytes): the name is derived"
        " from it and the lease's uid, so a retry with the same key finds this execution and"
        " never runs the command again.",
    )
    detach: bool = Field(
        default=False,
        description="As the caller asked: true answered at once, false (wait mode) waited for"
        " the outcome. A keyed retry must ask the same; the operator runs both alike.",
    )
    requester: str | None = Field(
        default=None,
        max_length=1024,
        description="Who asked for it, <AccessPolicy name>/<identity>: only that caller reads or"
        " cancels it through the API.",
    )
    cancel_requested: bool = Field(
        default=False,
        description="Cancel intent, written by the API's DELETE of an execution not yet"
        " finished: the operator then has the runner signal the command's process group.",
    )


class SandboxExecutionStatus(StatusModel):
    state: ExecutionState | None = Field(
        default=None,
        description="Queued (also when unset), Running, Succeeded, Failed, Cancelled, TimedOut,"
        " or Unknown: the outcome could not be established, and the command may have run, so"
        " never rerun it blindly.",
    )
    exit_code: int | None = Field(
        default=None,
        description="The command's exit code, when its process reported one (not when a signal"
        " ended it).",
    )
    started_at: datetime.datetime | None = Field(
        default=None, description="When the runner started the command."
    )
    finished_at: datetime.datetime | None = Field(
        default=None, description="When the command ended."
    )
    truncated: bool = Field(
        default=False,
        description="Output was dropped: the runner keeps the first 1 MiB of each of stdout and"
        " stderr.",
    )
    message: str = Field(
        default="",
        description="What the runner or the operator said of the outcome, such as why it is"
        " Unknown.",
    )
    observed_generation: int | None = Field(default=None, description=OBSERVED_GENERATION)
    conditions: list[Condition] = conditions_field(
        "Ready (the state is Running or Succeeded) and Finished (it has an outcome, whatever it"
        " is; the reason is the state)."
    )


class SandboxExecution(Resource[SandboxExecutionSpec, SandboxExecutionStatus]):
    kind: Literal["SandboxExecution"] = "SandboxExecution"
    crd: ClassVar[CrdInfo] = CrdInfo(
        plural="sandboxexecutions",
        singular="sandboxexecution",
        short_names=("sexec",),
        description="One command run in a leased sandbox, reserved before it starts.",
        columns=(
            PrinterColumn("Lease", ".spec.lease.name"),
            PrinterColumn("State", ".status.state"),
            PrinterColumn("Exit", ".status.exitCode", "integer"),
            AGE,
        ),
    )
