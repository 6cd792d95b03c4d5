"""Writes of intent that apply only to the version of an object they were computed from, and
the one way the API retries them when another writer got there first."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from kubernetes.client.exceptions import ApiException

from lessor.apiserver.http.errors import HttpConflictError
from lessor.apiserver.state.kube import Kube
from lessor.protocol.backoff import Backoff
from lessor.protocol.json_object import Json
from lessor.resources.base import Resource, json_pointer

T = TypeVar("T")


class FenceConflictError(HttpConflictError):
    """A fenced write lost a race: the object changed since it was read. Retryable, unlike the
    other 409s (a phase, a spent budget), which re-reading does not change."""

    def __init__(self) -> None:
        super().__init__("it changed meanwhile", reason="conflict_retryable")


def fenced_patch(kube: Kube, obj: Resource[Any, Any], operations: list[Json]) -> Json:
    """A JSON patch of `obj` (as read: it names the version) led by `test` operations on its uid
    and resourceVersion, so a concurrent change (or a successor of the same name) makes it a 409
    `conflict_retryable` instead of an update of something the caller never saw. The object as
    stored after the patch is returned."""
    kind, metadata = type(obj), obj.metadata
    if metadata.name is None or metadata.uid is None or metadata.resource_version is None:
        raise ValueError(f"a {obj.kind} not read from kube-apiserver has no version to fence")
    fence = [
        {"op": "test", "path": json_pointer("metadata", "uid", model=kind), "value": metadata.uid},
        {"op": "test", "path": json_pointer("metadata", "resource_version", model=kind),
         "value": metadata.resource_version},
    ]  # fmt: skip
    try:
        return kube.json_patch(kind.crd.plural, metadata.name, [*fence, *operations])
    except ApiException as error:
        # A failed `test` is a 422 from the API server; a changed object, a 409.
        if error.status in (409, 422):
            raise FenceConflictError from error
        raise


def retry_on_conflict(
    attempt: Callable[[], T], *, doing: str, attempts: int = 3, backoff: Backoff | None = None
) -> T:
    """`attempt()` (which reads the object afresh, checks it, and makes one fenced write) until
    its write is not refused as stale, at most `attempts` times; then a 409
    `conflict_retryable` saying what was being done (client-go's `RetryOnConflict`). Any other
    error, a 409 of another reason included, ends it at once."""
    for n in range(attempts):
        try:
            return attempt()
        except FenceConflictError:
            if backoff is not None and n + 1 < attempts:
                time.sleep(backoff.delay(n))
    raise HttpConflictError(f"the lease changed while {doing}; retry", reason="conflict_retryable")


def append_operation(path: str, items: list[Any], value: Json) -> Json:
    """The JSON-patch operation adding `value` to the list at `path`, which `items` shows as
    read: `/-` appends to a list that exists; a missing one is created with the value."""
    if items:
        return {"op": "add", "path": f"{path}/-", "value": value}
    return {"op": "add", "path": path, "value": [value]}
