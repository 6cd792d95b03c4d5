"""Request bodies, validated at the boundary: a bad field is a 400 naming it, never a 500."""

from __future__ import annotations

import json
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from lessor.apiserver.errors import BadRequestError
from lessor.resources.base import DNS_LABEL, POOL_NAME
from lessor.resources.durations import PositiveDuration

ModelT = TypeVar("ModelT", bound=BaseModel)
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


class CreateLease(BaseModel):
    model_config = ConfigDict(extra="forbid")

    profile: PoolName | None = None
    pool: PoolName | None = Field(default=None, description="Accepted alias of profile.")
    ttl: PositiveDuration | None = None
    alias: str | None = Field(default=None, min_length=1, max_length=63, pattern=DNS_LABEL)
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
    except (ValueError, UnicodeDecodeError) as error:
        raise BadRequestError(f"the body is not valid JSON: {error}") from error
    if not isinstance(document, dict):
        raise BadRequestError("the body must be a JSON object")
    try:
        return model.model_validate(document)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in error.errors()
        )
        raise BadRequestError(problems, reason="invalid_request") from error


class Login(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ttl: PositiveDuration | None = Field(default=None, description="Session lifetime; max 24h.")
