"""The CRDs explain themselves: `kubectl explain` shows a description for every field, and every
`conditions` list is keyed by type, as metav1.Condition lists are (issue 47).

Generated from the models, not read from crds/, so that a field added without a description
fails here, whatever the checked-in files say."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from lessor.resources.catalog import RESOURCES
from lessor.resources.crdgen import crd_of

Schema = dict[str, Any]


def properties(node: Schema, path: str) -> Iterator[tuple[str, Schema]]:
    """Every property below `node`, by its path, through objects, list items and map values."""
    for name, child in node.get("properties", {}).items():
        yield f"{path}.{name}", child
        yield from properties(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from properties(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from properties(node["additionalProperties"], f"{path}{{}}")


def schema(resource: type[Any]) -> Schema:
    [version] = crd_of(resource)["spec"]["versions"]
    root: Schema = version["schema"]["openAPIV3Schema"]
    return root


KINDS = {resource.kind_name(): resource for resource in RESOURCES}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_property_has_a_description(kind: str) -> None:
    """All but the object's `metadata`, of which kube-apiserver refuses a CRD that says more
    than its type: it publishes ObjectMeta's schema, and so its description, in its place."""
    root = schema(KINDS[kind])
    undescribed = [
        path
        for path, child in properties(root, kind)
        if not str(child.get("description", "")).strip() and path != f"{kind}.metadata"
    ]
    assert undescribed == [], "give these fields a description in lessor/resources"
    assert root["description"].strip(), "`kubectl explain <kind>` says what the kind is"
    assert root["properties"]["metadata"] == {"type": "object"}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_conditions_are_a_list_keyed_by_type(kind: str) -> None:
    found = [
        (path, child)
        for path, child in properties(schema(KINDS[kind]), kind)
        if path.rsplit(".", 1)[-1] == "conditions"
    ]
    for path, conditions in found:
        assert conditions["type"] == "array", path
        assert conditions.get("x-kubernetes-list-type") == "map", path
        assert conditions.get("x-kubernetes-list-map-keys") == ["type"], path
        assert "type" in conditions["items"]["required"], f"{path}: a map key must be required"
    # Every kind with a status of its own has conditions; DiagnosticsBundle's is empty.
    assert [path for path, _ in found] == (
        [] if kind == "DiagnosticsBundle" else [f"{kind}.status.conditions"]
    )
