"""Writes of intent that apply only to the version of an object they were computed from."""

from __future__ import annotations

from typing import Any

from kubernetes.client.exceptions import ApiException

from lessor.apiserver.http.bodies import Json
from lessor.apiserver.http.errors import HttpConflictError
from lessor.apiserver.state.kube import Kube


def fenced_patch(kube: Kube, plural: str, obj: Json, operations: list[Json]) -> Json:
    """A JSON patch led by `test` operations on the object's uid and resourceVersion, so a
    concurrent change (or a successor of the same name) makes it a 409 `conflict_retryable`
    instead of an update of something the caller never saw."""
    metadata = obj["metadata"]
    fence = [
        {"op": "test", "path": "/metadata/uid", "value": metadata["uid"]},
        {"op": "test", "path": "/metadata/resourceVersion", "value": metadata["resourceVersion"]},
    ]
    try:
        return kube.json_patch(plural, metadata["name"], [*fence, *operations])
    except ApiException as error:
        # A failed `test` is a 422 from the API server; a changed object, a 409.
        if error.status in (409, 422):
            raise HttpConflictError("it changed meanwhile", reason="conflict_retryable") from error
        raise


def append_operation(path: str, items: list[Any], value: Json) -> Json:
    """The JSON-patch operation adding `value` to the list at `path`, which `items` shows as
    read: `/-` appends to a list that exists; a missing one is created with the value."""
    if items:
        return {"op": "add", "path": f"{path}/-", "value": value}
    return {"op": "add", "path": path, "value": [value]}
