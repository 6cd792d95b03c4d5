"""What every lessor resource shares: camelCase fields, object metadata, conditions, references,
and the class-level facts its CRD is generated from."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

GROUP = "lessor.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
POOL_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"


class SpecModel(BaseModel):
    """Written by people and the API: unknown fields are refused, so a typo is an error rather
    than a setting silently ignored."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", serialize_by_alias=True
    )


class StatusModel(BaseModel):
    """Written by the operator: unknown fields are tolerated, so an older API server can read
    the status a newer operator wrote."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", serialize_by_alias=True
    )


class ObjectMeta(BaseModel):
    """The parts of Kubernetes object metadata lessor reads; the API server owns the rest."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: datetime.datetime | None = None
    deletion_timestamp: datetime.datetime | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    finalizers: list[str] = Field(default_factory=list)


class Condition(StatusModel):
    """The shape of metav1.Condition, so `kubectl wait --for=condition=...` works."""

    type: str = Field(
        description="The condition's type (CamelCase, such as Ready): at most one condition of"
        " each type."
    )
    status: Literal["True", "False", "Unknown"] = Field(
        description="Whether the condition holds: True, False or Unknown."
    )
    reason: str = Field(
        pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        max_length=1024,
        description="Why it has this status, in one CamelCase word meant for programs (for"
        " Ready, usually the phase).",
    )
    message: str = Field(
        default="",
        max_length=32768,
        description="Why it has this status, for people; empty when there is nothing to add.",
    )
    last_transition_time: datetime.datetime = Field(
        description="When the status last changed (RFC 3339): unchanged while the status stays,"
        " so it says since when the condition has held."
    )
    observed_generation: int | None = Field(
        default=None,
        ge=0,
        description="The object's metadata.generation the condition was decided from.",
    )


# Unique by type, said in the CRD the way Kubernetes says it of metav1.Condition lists: the API
# server then refuses a status with two conditions of one type, which no reader could tell apart.
CONDITION_LIST: JsonDict = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]}


def conditions_field(types: str) -> Any:
    """The `conditions` field of a status: a list keyed by type, written by the operator;
    `types` says which types the kind has and what each means."""
    return Field(
        default_factory=list,
        description=f"The object's conditions, one of each type, written by the operator: {types}",
        json_schema_extra=CONDITION_LIST,
    )


OBSERVED_GENERATION = (
    "The metadata.generation this status was decided from, written by the operator with every"
    " status: while it is below metadata.generation the status does not reflect the latest spec."
)


# Conditions the operator derives from an object's phase and its other conditions
# (lessor.operator.readiness) for tools that know no lessor kind: `kubectl wait`, GitOps health.
READY = "Ready"
WARM = "Warm"
FINISHED = "Finished"
UP_TO_DATE = "UpToDate"
# False without a fault: a summary (it repeats a problem said elsewhere) or progress (a pool
# warming, a pool replacing its warm clusters of an older template).
NO_FAULT = frozenset({READY, WARM, FINISHED, UP_TO_DATE})


def _faults(conditions: list[Condition]) -> list[Condition]:
    return [c for c in conditions if c.status == "False" and c.type not in NO_FAULT]


def problems(conditions: list[Condition]) -> list[str]:
    """What the False conditions say is wrong."""
    return [c.message for c in _faults(conditions) if c.message]


def problems_for_tenants(conditions: list[Condition]) -> list[str]:
    """What a pool's tenants are told is wrong: each False condition's type and reason. The
    messages stay in the status, for administrators: they can carry the operator's own errors
    from kube-apiserver (its ServiceAccount, its rights), bucket names and store endpoints."""
    return [f"{c.type}: {c.reason}" for c in _faults(conditions)]


class ObjectRef(StatusModel):
    """A reference that survives name reuse: the uid tells a recreated object from the original."""

    name: str = Field(description="The object's name.")
    uid: str = Field(
        description="The object's uid: an object later made under the same name is not this one."
    )
    namespace: str | None = Field(
        default=None,
        description="The object's namespace; unset: the namespace of the object holding the"
        " reference.",
    )


class SecretRef(SpecModel):
    name: str = Field(
        min_length=1,
        max_length=253,
        description="The Secret's name, in the namespace of the object that names it.",
    )


class SecretKeyRef(SpecModel):
    name: str = Field(
        min_length=1,
        max_length=253,
        description="The Secret's name, in the namespace of the object that names it.",
    )
    key: str = Field(min_length=1, max_length=253, description="The key of the Secret's data.")


@dataclass(frozen=True)
class PrinterColumn:
    name: str
    json_path: str
    type: str = "string"
    priority: int = 0
    description: str = ""


@dataclass(frozen=True)
class CrdInfo:
    plural: str
    singular: str
    short_names: tuple[str, ...]
    columns: tuple[PrinterColumn, ...] = ()
    categories: tuple[str, ...] = ("lessor",)
    scope: str = "Namespaced"
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    # JSON paths a list or watch may select on (`fieldSelector`): how the API server's and the
    # operator's watches leave ended leases out of their caches (issue 45).
    selectable_fields: tuple[str, ...] = ()


AGE = PrinterColumn("Age", ".metadata.creationTimestamp", "date")

SpecT = TypeVar("SpecT", bound=BaseModel)
StatusT = TypeVar("StatusT", bound=BaseModel)


class Resource(BaseModel, Generic[SpecT, StatusT]):
    """A whole object as the API server stores it."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid", serialize_by_alias=True)
    crd: ClassVar[CrdInfo]

    api_version: str = Field(default=API_VERSION, alias="apiVersion")
    kind: str
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: SpecT
    status: StatusT | None = None

    @classmethod
    def kind_name(cls) -> str:
        """The kind, read from the class (every resource fixes its `kind` field's default)."""
        return str(cls.model_fields["kind"].default)
