"""What every lessor resource shares: camelCase fields, object metadata, conditions, references,
and the class-level facts its CRD is generated from."""

from __future__ import annotations

import datetime
import types
from dataclasses import dataclass, field
from typing import (
    Annotated,
    Any,
    ClassVar,
    Generic,
    Literal,
    Self,
    TypeVar,
    Union,
    get_args,
    get_origin,
)

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from pydantic.alias_generators import to_camel
from pydantic.config import ExtraValues, JsonDict

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
    the status a newer operator wrote. Changed by assignment, which mypy checks by name and
    pydantic validates by value (`validate_assignment`): a phase outside its Literal fails where
    it is set, not in kube-apiserver's schema at the write (`model_copy(update=...)` checks
    neither, and drops a misspelt key silently)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        serialize_by_alias=True,
        validate_assignment=True,
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
    owner_references: list[dict[str, Any]] = Field(default_factory=list)


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
# (lessor.operator.core.readiness) for tools that know no lessor kind: `kubectl wait`, GitOps
# health.
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
    def model_validate(
        cls,
        obj: Any,
        *,
        strict: bool | None = None,
        extra: ExtraValues | None = None,
        from_attributes: bool | None = None,
        context: Any | None = None,
        by_alias: bool | None = None,
        by_name: bool | None = None,
    ) -> Self:
        """An object as kube-apiserver stores it, read tolerantly: a field this lessor does not
        know is ignored, not an error. The CRDs in the cluster may be newer than this replica
        (a rolling upgrade applies them first), and a read that refused the new field would
        fail every lease a newer replica made. Writing stays strict: a model built in code
        (`ClusterLease(spec=ClusterLeaseSpec(...))`, then `manifest()`) refuses a misspelt field,
        and so does a request body (lessor.apiserver.http.bodies)."""
        return super().model_validate(
            obj,
            strict=strict,
            extra=extra or "ignore",
            from_attributes=from_attributes,
            context=context,
            by_alias=by_alias,
            by_name=by_name,
        )

    @classmethod
    def kind_name(cls) -> str:
        """The kind, read from the class (every resource fixes its `kind` field's default)."""
        return str(cls.model_fields["kind"].default)

    def manifest(self) -> dict[str, Any]:
        """The object to create, as kube-apiserver takes it: apiVersion and kind from the class,
        camelCase keys, and only the fields given, never a null. A default is left to the CRD,
        as a manifest written by hand leaves it, so a created object holds what its creator
        decided and nothing else; a misspelt field never gets this far (`extra="forbid"`)."""
        given = self.model_dump(mode="json", by_alias=True, exclude_unset=True, exclude_none=True)
        return {"apiVersion": self.api_version, "kind": self.kind, **given}

    def owner_reference(self) -> dict[str, str]:
        """This exact object (name and uid) as the owner of another: kube-apiserver's garbage
        collector deletes that one with this one, and never with a successor of the same name."""
        if self.metadata.name is None or self.metadata.uid is None:
            raise ValueError(f"a {self.kind} owns nothing before it is stored (no name or uid)")
        return {"apiVersion": self.api_version, "kind": self.kind,
                "name": self.metadata.name, "uid": self.metadata.uid}  # fmt: skip


def json_pointer(*path: str, model: type[BaseModel]) -> str:
    """The JSON pointer (RFC 6901) of `path`, given by Python field names from `model` down, each
    spelt as the model serializes it: `json_pointer("spec", "release_requested",
    model=ClusterLease) == "/spec/releaseRequested"`. What a JSON patch writes is then named by
    the model that reads it. A name the model at that step lacks is a ValueError at once: a patch
    to a misspelt path is no error to kube-apiserver, whose structural schema prunes the unknown
    field, so the intent would silently do nothing. Below a dict a step is a key (`"metadata",
    "annotations", "lessor.dev/x"`), below a list an index or `-` (the end), below `Any` anything.
    """
    tokens: list[str] = []
    current: Any = model
    for step in path:
        current = _single_type(current)
        origin = get_origin(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            info = current.model_fields.get(step)
            if info is None:
                raise ValueError(f"{current.__name__} has no field {step!r}")
            tokens.append(info.serialization_alias or info.alias or step)
            current = info.annotation
        elif origin is dict:
            tokens.append(step)
            current = get_args(current)[1]
        elif origin is list:
            if step != "-" and not step.isdigit():
                raise ValueError(f"{step!r} is not an index of a list (a number, or -)")
            tokens.append(step)
            current = get_args(current)[0]
        elif current is Any:
            tokens.append(step)
        else:
            raise ValueError(
                f"{'/'.join(path)}: {step!r} is below a {current}, which has no fields"
            )
    return "".join("/" + token.replace("~", "~0").replace("/", "~1") for token in tokens)


def _single_type(annotation: Any) -> Any:
    """`X` of `Annotated[X, ...]` and of `X | None`; any other annotation as it is."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin is Union or origin is types.UnionType:
            present = [arg for arg in get_args(annotation) if arg is not type(None)]
            if len(present) != 1:
                return annotation
            annotation = present[0]
        else:
            return annotation


_INSTANT: TypeAdapter[datetime.datetime] = TypeAdapter(datetime.datetime)


def instant_json(moment: datetime.datetime) -> str:
    """An instant of a lessor object as its JSON spells it: RFC 3339 as pydantic writes it,
    which is how the operator's status writes store it (fractions of a second included). An
    answer that repeats a status instant read through the model repeats the stored text."""
    return str(_INSTANT.dump_python(moment, mode="json"))
