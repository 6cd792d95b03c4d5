"""How the reflector applies watch events to its store, including the 410 that forces a relist.

A real 410 could not be provoked against kube-apiserver 1.35: its watch cache serves watches from
old resourceVersions out of its window, and paginated lists from a cache snapshot, even after
etcd is compacted. The events below are shaped exactly as the API server writes them.
"""

from __future__ import annotations

from typing import Any

import pytest

from lessor.operator.runtime.client import ApiError, GoneError, ResourceType
from lessor.operator.runtime.reflector import Reflector
from lessor.operator.runtime.store import Store

CONFIGMAPS = ResourceType("", "v1", "configmaps", "ConfigMap")


def event(kind: str, name: str, version: str) -> dict[str, Any]:
    metadata = {"name": name, "namespace": "ns", "resourceVersion": version}
    return {"type": kind, "object": {"metadata": metadata}}


def reflector() -> Reflector:
    return Reflector(None, CONFIGMAPS, Store())  # type: ignore[arg-type]


def test_events_update_the_store_and_the_resource_version() -> None:
    r = reflector()
    r._handle(event("ADDED", "a", "10"))
    r._handle(event("MODIFIED", "a", "11"))
    r._handle(event("ADDED", "b", "12"))
    r._handle(event("DELETED", "a", "13"))
    assert [o["metadata"]["name"] for o in r.store.list()] == ["b"]
    assert r.store.get("ns/b")["kind"] == "ConfigMap"  # type: ignore[index]
    assert r.resource_version == "13"


def test_a_bookmark_moves_the_resource_version_without_touching_the_store() -> None:
    r = reflector()
    r._handle(event("BOOKMARK", "", "99"))
    assert r.resource_version == "99"
    assert r.store.list() == []


def test_an_expired_error_event_is_gone_and_others_are_errors() -> None:
    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired"}
    with pytest.raises(GoneError):
        reflector()._handle({"type": "ERROR", "object": {**status, "code": 410}})
    with pytest.raises(ApiError) as caught:
        reflector()._handle({"type": "ERROR", "object": {**status, "code": 500}})
    assert not isinstance(caught.value, GoneError)
