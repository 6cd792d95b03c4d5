"""Request bodies and query strings, validated at the boundary: a bad field is a 400 naming it,
never a 500."""

from __future__ import annotations

import json
from typing import Annotated, Any, TypeVar
from urllib.parse import parse_qsl

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from lessor.apiserver.http.errors import BadRequestError
from lessor.protocol.durations import PositiveDuration
from lessor.protocol.lease_ids import looks_like_an_id
from lessor.resources.base import DNS_LABEL, POOL_NAME
from lessor.resources.sandbox import IdempotencyKey

ModelT = TypeVar("ModelT", bound=BaseModel)
# A JSON object as the API reads and writes it (Kubernetes objects, response bodies): declared
# once, here, for every module of the API server.
MAX_METADATA_BYTES = 8 * 1024
MAX_METADATA_KEYS = 32
MAX_METADATA_DEPTH = 4
MAX_METADATA_VALUES = 128


def _measure(value: Any, depth: int) -> tuple[int, int]:
    """(deepest nesting level, number of JSON values) below and including `value`."""
    if isinstance(value, dict):
        children = list(value.values())
    elif isinstance(value, list):
        children = value
    else:
        return depth, 1
    deepest, count = depth, 1
    for child in children:
        child_depth, child_count = _measure(child, depth + 1)
        deepest, count = max(deepest, child_depth), count + child_count
    return deepest, count


def _metadata_limits(metadata: dict[str, Any]) -> dict[str, Any]:
    """The spec's limits. The top-level object is nesting level 1; every value inside it, at any
    depth and containers included, counts as one JSON value."""
    size = len(json.dumps(metadata, separators=(",", ":")).encode())
    if size > MAX_METADATA_BYTES:
        raise ValueError(f"metadata is {size} bytes of JSON; the limit is {MAX_METADATA_BYTES}")
    if len(metadata) > MAX_METADATA_KEYS:
        raise ValueError(
            f"metadata has {len(metadata)} top-level keys; the limit is {MAX_METADATA_KEYS}"
        )
    depth, count = _measure(metadata, 1)
    if depth > MAX_METADATA_DEPTH:
        raise ValueError(f"metadata nests {depth} levels deep; the limit is {MAX_METADATA_DEPTH}")
    if count - 1 > MAX_METADATA_VALUES:
        raise ValueError(
            f"metadata has {count - 1} JSON values; the limit is {MAX_METADATA_VALUES}"
        )
    return metadata


PoolName = Annotated[str, Field(min_length=1, max_length=63, pattern=POOL_NAME)]


def _not_an_id(alias: str) -> str:
    if looks_like_an_id(alias):
        raise ValueError("an alias may not have the form of a lease id (l + 12 or s + 24 hex)")
    return alias


# A lease's name for its owner, usable where its id goes (lessor.apiserver.leases.aliases).
Alias = Annotated[
    str, Field(min_length=1, max_length=63, pattern=DNS_LABEL), AfterValidator(_not_an_id)
]


class CreateLease(BaseModel):
    model_config = ConfigDict(extra="forbid")

    profile: PoolName | None = None
    pool: PoolName | None = Field(default=None, description="Accepted alias of profile.")
    ttl: PositiveDuration | None = None
    alias: Alias | None = None
    metadata: Annotated[dict[str, Any], AfterValidator(_metadata_limits)] | None = None

    @model_validator(mode="after")
    def _one_pool(self) -> CreateLease:
        if (self.profile is None) == (self.pool is None):
            raise ValueError("give the pool name as profile (or its alias pool), exactly once")
        return self

    @property
    def pool_name(self) -> str:
        return self.profile or self.pool or ""


class ExtendLease(BaseModel):
    model_config = ConfigDict(extra="forbid")

    extend_ttl: PositiveDuration


def parse(model: type[ModelT], raw: bytes, content_type: str | None) -> ModelT:
    if content_type is None or content_type.split(";")[0].strip().lower() != "application/json":
        raise BadRequestError("the body must be JSON, sent with Content-Type: application/json")
    try:
        document = json.loads(raw or b"null")
        if not isinstance(document, dict):
            raise BadRequestError("the body must be a JSON object")
        return _validated(model, document, "body")
    except (ValueError, UnicodeDecodeError) as error:
        raise BadRequestError(f"the body is not valid JSON: {error}") from error
    except RecursionError:  # the parser's or a validator's: no body of this API nests so deep
        raise BadRequestError("the body nests too deeply") from None


def parse_query(model: type[ModelT], query_string: str) -> ModelT:
    """A query string as `model`; a parameter given twice is refused rather than guessed."""
    pairs = parse_qsl(query_string, keep_blank_values=True)
    document = dict(pairs)
    if len(document) != len(pairs):
        raise BadRequestError("a query parameter is given more than once")
    return _validated(model, document, "query")


def _validated(model: type[ModelT], document: dict[str, Any], where: str) -> ModelT:
    try:
        return model.model_validate(document)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or where}: {e['msg']}" for e in error.errors()
        )
        raise BadRequestError(problems, reason="invalid_request") from error


class Login(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ttl: PositiveDuration | None = Field(default=None, description="Session lifetime; max 24h.")


# What a Sandbox caller can never send (spec 1): the administrator's SandboxPool defines the
# workload. Any unknown field is refused anyway; these get a message that says why.
WORKLOAD_FIELDS = frozenset({
    "spec", "template", "podTemplate", "podSpec", "containers", "image", "command", "args",
    "namespace", "runtimeClass", "runtimeClassName", "env", "envFrom", "mounts", "volumeMounts",
    "volumes", "volumeClaims", "volumeClaimTemplates", "credentials", "secrets", "kubeconfig",
    "serviceAccount", "serviceAccountName", "token",
})  # fmt: skip


class CreateSandboxLease(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    pool: PoolName
    ttl: PositiveDuration | None = None
    alias: Alias | None = None
    idempotency_key: IdempotencyKey | None = Field(
        default=None, alias="idempotencyKey", min_length=1
    )

    @model_validator(mode="before")
    @classmethod
    def _no_workload(cls, document: Any) -> Any:
        if isinstance(document, dict):
            sent = sorted(WORKLOAD_FIELDS & document.keys())
            if sent:
                raise ValueError(
                    f"callers cannot send {', '.join(sent)}: the SandboxPool's administrator "
                    "defines the sandbox's workload, namespace, environment and credentials"
                )
        return document


class ExtendSandboxLease(BaseModel):
    """`extendTtl`, or its alias `extend_ttl`, exactly once."""

    model_config = ConfigDict(extra="forbid")

    extendTtl: PositiveDuration | None = None  # noqa: N815 - the wire name
    extend_ttl: PositiveDuration | None = None

    @model_validator(mode="after")
    def _once(self) -> ExtendSandboxLease:
        if (self.extendTtl is None) == (self.extend_ttl is None):
            raise ValueError("give the extension as extendTtl (or its alias extend_ttl), once")
        return self

    @property
    def duration(self) -> str:
        return self.extendTtl or self.extend_ttl or ""


# The arguments of one execution, in bytes, however they are split: each command is kept in a
# Secret while it runs (lessor.resources.sandbox.ExecutionCommand), so what one request stores
# in etcd is small. Input larger than that is a file's job, not argv's.
MAX_COMMAND_BYTES = 16 * 1024
MAX_ARGUMENTS = 1024


def _argv_limits(argv: list[str]) -> list[str]:
    if any("\0" in arg for arg in argv):
        raise ValueError("arguments cannot contain NUL characters")
    size = sum(len(arg.encode()) for arg in argv)
    if size > MAX_COMMAND_BYTES:
        raise ValueError(
            f"the command's arguments are {size} bytes; the limit is "
            f"{MAX_COMMAND_BYTES // 1024} KiB in all: large input belongs in a file in the "
            "sandbox, whose path the command names"
        )
    return argv


class CreateExecution(BaseModel):
    """POST /v1/sandbox-leases/:id/executions (spec 4.5): an argv, never a shell line."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    command: Annotated[
        list[str], Field(min_length=1, max_length=MAX_ARGUMENTS), AfterValidator(_argv_limits)
    ]
    cwd: str | None = Field(default=None, max_length=4096, pattern=r"^/[^\x00]*$")
    timeout: PositiveDuration | None = None
    container: str | None = Field(default=None, min_length=1, max_length=63, pattern=DNS_LABEL)
    idempotency_key: IdempotencyKey = Field(alias="idempotencyKey", min_length=1)
    detach: bool = False


class AttachQuery(BaseModel):
    """GET /v1/sandbox-leases/:id/attach?container=&tty="""

    model_config = ConfigDict(extra="forbid")

    container: str | None = Field(default=None, min_length=1, max_length=63, pattern=DNS_LABEL)
    tty: bool = False


class ForwardQuery(BaseModel):
    """GET /v1/sandbox-leases/:id/port-forward?port= : a declared port's number or name."""

    model_config = ConfigDict(extra="forbid")

    port: str = Field(
        pattern=r"^([1-9][0-9]{0,4}|[a-z]([-a-z0-9]{0,13}[a-z0-9])?)$",
        description="A port the pool declares, by number or name.",
    )
