"""An addon's manifests are checked before anything is applied, and a pool's addons and gates
are refused at the boundary when malformed (the CRD says the same; test_crds holds them equal)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from lessor.operator.addons.manifests import ManifestError, describe, parse
from lessor.resources.cluster import ClusterPoolSpec


def test_documents_are_applied_in_the_order_written_and_empty_ones_skipped() -> None:
    objects = parse(
        "---\napiVersion: v1\nkind: Namespace\nmetadata: {name: ci}\n---\n---\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: ci}\n"
    )
    assert [describe(o) for o in objects] == ["Namespace ci", "ConfigMap ci/c"]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("kind: [", "not YAML"),
        ("- a\n- b\n", "document 1 is not an object"),
        ("apiVersion: v1\nmetadata: {name: x}\n", "document 1 has no kind"),
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n", "document 1 has no metadata.name"),
        ("apiVersion: v1\nkind: List\nmetadata: {name: x}\nitems: []\n", "is a List"),
    ],
)
def test_a_manifest_that_cannot_be_applied_as_written_is_a_lasting_error(
    text: str, said: str
) -> None:
    with pytest.raises(ManifestError, match=said) as raised:
        parse(text)
    assert raised.value.lasting


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ({"addons": [{"name": "a"}]}, "one of manifests, configMapRef or chart"),
        (
            {"addons": [{"name": "a", "manifests": "x", "configMapRef": {"name": "c"}}]},
            "one of manifests, configMapRef or chart",
        ),
        (
            {"addons": [{"name": "a", "manifests": "x"}, {"name": "a", "manifests": "y"}]},
            "unique",
        ),
        ({"readinessGates": {"deploymentsAvailable": ["no-namespace"]}}, "pattern"),
        ({"readinessGates": {"crdsEstablished": ["Widgets"]}}, "pattern"),
    ],
)
def test_malformed_addons_and_gates_are_refused(spec: dict[str, object], said: str) -> None:
    with pytest.raises(ValidationError, match=said):
        ClusterPoolSpec.model_validate({"backend": {"type": "local"}, **spec})
