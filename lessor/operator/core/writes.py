"""Fenced writes: every write names the resourceVersion (and so the uid) it was computed from.

A reconcile reads from the cache, decides, and writes. If the object changed in between, or was
deleted and recreated under the same name, the write fails with a ConflictError and the
reconcile runs again on fresh data; nothing is ever decided on one version and applied to
another.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any, TypeVar

from lessor.operator.core.readiness import stamped
from lessor.operator.runtime.client import (
    ApiError,
    ConflictError,
    KubeClient,
    NotFoundError,
    ResourceType,
)
from lessor.protocol.json_object import Json
from lessor.resources.base import StatusModel

S = TypeVar("S", bound=StatusModel)


def _fence(obj: Json) -> list[Json]:
    metadata = obj["metadata"]
    return [
        {"op": "test", "path": "/metadata/uid", "value": metadata["uid"]},
        {"op": "test", "path": "/metadata/resourceVersion", "value": metadata["resourceVersion"]},
    ]


def _path(resource: ResourceType, obj: Json, subresource: str | None = None) -> str:
    metadata = obj["metadata"]
    return resource.path(metadata.get("namespace"), metadata["name"], subresource)


def status_json(status: StatusModel) -> Json:
    """The status as written: the fields read from the stored status or set since, never a
    default that nobody set (a reconcile adds only what it decided), and never a null (omitted
    and null read the same, and only omission compares equal to what the API server keeps)."""
    dumped: Json = status.model_dump(
        mode="json", by_alias=True, exclude_unset=True, exclude_none=True
    )
    return dumped


def without(status: S, *fields: str) -> S:
    """`status` with `fields` omitted from what is written, as if never set: a field with a
    default (an empty list) has no value that means "absent"."""
    return type(status).model_validate(status.model_dump(exclude_unset=True, exclude=set(fields)))


async def write_status(
    client: KubeClient, resource: ResourceType, obj: Json, status: StatusModel
) -> Json:
    """Replace the status if it differs; returns the object as stored. Every status is stamped
    on its way out with its observedGeneration and Ready condition
    (lessor.operator.core.readiness)."""
    return await replace_status(client, resource, obj, outgoing_status(obj, status))


def outgoing_status(obj: Json, status: StatusModel) -> Json:
    """`status` of `obj` as `write_status` writes it, for a caller that looks before it writes."""
    return status_json(stamped(obj, status))


async def replace_status(
    client: KubeClient, resource: ResourceType, obj: Json, written: Json
) -> Json:
    """Replace the status with `outgoing_status`'s JSON if it differs; the object as stored.
    Compared as JSON, raw: what kube-apiserver holds against what it would be sent."""
    if obj.get("status") == written:
        return obj
    body = copy.deepcopy(obj)
    body["status"] = written
    return await client.replace(_path(resource, obj, "status"), body)


async def patch_fenced(
    client: KubeClient, resource: ResourceType, obj: Json, operations: list[Json]
) -> Json:
    """A JSON patch that applies only to the version of `obj` it was computed from.

    kube-apiserver answers a failed `test` operation with 422 Invalid and no details, as it does
    any patch it cannot apply, so a 422 is told apart by reading the object again: no longer
    the fenced version means the race was lost (ConflictError, a requeue like a 409); still
    the fenced version means the patch itself was wrong, and that error stands."""
    path = _path(resource, obj)
    try:
        return await client.json_patch(path, [*_fence(obj), *operations])
    except ApiError as error:
        if error.status != 422:
            raise
        current = (await client.get(path))["metadata"]  # NotFoundError if it is gone
        fenced = obj["metadata"]
        if (current["uid"], current["resourceVersion"]) != (
            fenced["uid"],
            fenced["resourceVersion"],
        ):
            raise ConflictError(409, "Conflict", f"{path} changed since it was read") from error
        raise


async def add_finalizer(client: KubeClient, resource: ResourceType, obj: Json, name: str) -> Json:
    finalizers = list(obj["metadata"].get("finalizers") or [])
    if name in finalizers:
        return obj
    return await patch_fenced(
        client,
        resource,
        obj,
        [{"op": "add", "path": "/metadata/finalizers", "value": [*finalizers, name]}],
    )


async def remove_finalizer(
    client: KubeClient, resource: ResourceType, obj: Json, name: str
) -> None:
    finalizers = list(obj["metadata"].get("finalizers") or [])
    if name not in finalizers:
        return
    remaining = [f for f in finalizers if f != name]
    with contextlib.suppress(NotFoundError):
        await patch_fenced(
            client,
            resource,
            obj,
            [{"op": "replace", "path": "/metadata/finalizers", "value": remaining}],
        )


async def delete_fenced(client: KubeClient, resource: ResourceType, obj: Json) -> None:
    """Delete this object and no other: a uid precondition protects a successor of the same name."""
    with contextlib.suppress(NotFoundError):
        await client.delete(_path(resource, obj), preconditions={"uid": obj["metadata"]["uid"]})


def owner_reference(obj: Json, *, controller: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": controller,
        "blockOwnerDeletion": False,
    }


async def create_missing(client: KubeClient, collection: str, manifest: Json) -> bool:
    """Create the object unless it exists; whether it was created. A read first, not a create
    answered 409: a pass replayed after a crash then writes nothing it need not (every write
    costs the API server, and a reconcile that always writes before it gets anywhere can be
    stopped at that write forever)."""
    try:
        await client.get(f"{collection}/{manifest['metadata']['name']}")
    except NotFoundError:
        try:
            await client.create(collection, manifest)
        except ConflictError:
            return False
        return True
    return False


async def delete_present(client: KubeClient, path: str) -> None:
    """Delete the object unless it is gone or already being deleted (read first, as above)."""
    try:
        found = await client.get(path)
    except NotFoundError:
        return
    if found["metadata"].get("deletionTimestamp"):
        return
    try:
        await client.delete(path, preconditions={"uid": found["metadata"]["uid"]})
    except (NotFoundError, ConflictError):
        return
