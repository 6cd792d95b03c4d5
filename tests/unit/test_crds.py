"""The checked-in CRDs are exactly what the models generate, and every schema is structural."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from lessor.resources.__main__ import main
from lessor.resources.crdgen import drift, render_all

CRDS = Path(__file__).resolve().parents[2] / "crds"
CHART_CRDS = Path(__file__).resolve().parents[2] / "charts" / "lessor" / "crds"


def test_checked_in_crds_match_the_models() -> None:
    assert drift(CRDS) == [], "run: python -m lessor.resources write crds --chart charts/lessor"


def test_the_helm_charts_crds_are_the_same_files() -> None:
    """Helm installs a chart's crds/ as they are: a Helm install and a kustomize install must
    define the same kinds, byte for byte."""
    assert drift(CHART_CRDS, kustomization=False) == [], (
        "run: python -m lessor.resources write crds --chart charts/lessor"
    )
    assert sorted(p.name for p in CHART_CRDS.iterdir()) == sorted(
        p.name for p in CRDS.glob("*.yaml")
    )
    for path in CRDS.glob("*.yaml"):
        assert (CHART_CRDS / path.name).read_bytes() == path.read_bytes()


def test_check_command_reports_a_stale_chart_copy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chart = tmp_path / "chart"
    assert main(["write", str(tmp_path / "crds"), "--chart", str(chart)]) == 0
    assert not (chart / "crds" / "Kustomization").exists()
    (chart / "crds" / "lessor.dev_sandboxpools.yaml").unlink()
    assert main(["check", str(tmp_path / "crds"), "--chart", str(chart)]) == 1
    errors = capsys.readouterr().err
    assert "chart/crds/lessor.dev_sandboxpools.yaml: missing" in errors
    assert f"write crds --chart {chart}" in errors


def test_check_command_reports_a_hand_edit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["write", str(tmp_path)]) == 0
    edited = tmp_path / "lessor.dev_clusterpools.yaml"
    edited.write_text(edited.read_text().replace("warmTarget", "warmTargets"))
    (tmp_path / "lessor.dev_extra.yaml").write_text("{}")
    assert main(["check", str(tmp_path)]) == 1
    errors = capsys.readouterr().err
    assert "lessor.dev_clusterpools.yaml: differs" in errors
    assert "lessor.dev_extra.yaml: no model generates it" in errors


def walk(node: dict[str, Any], path: str) -> list[str]:
    problems = []
    if "$ref" in node or "anyOf" in node or "allOf" in node or "title" in node:
        problems.append(f"{path}: not structural ({sorted(node)})")
    if "type" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        problems.append(f"{path}: no type")
    for name, child in node.get("properties", {}).items():
        problems += walk(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        problems += walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        problems += walk(node["additionalProperties"], f"{path}{{}}")
    return problems


@pytest.mark.parametrize("name", sorted(n for n in render_all() if n.endswith(".yaml")))
def test_schemas_are_structural_with_status_subresource(name: str) -> None:
    crd = yaml.safe_load(render_all()[name])
    [version] = crd["spec"]["versions"]
    assert version["subresources"] == {"status": {}}
    assert version["served"] and version["storage"]
    schema = version["schema"]["openAPIV3Schema"]
    assert walk(schema, "") == []
    assert {"spec", "status"} <= set(schema["properties"])
    assert crd["spec"]["names"]["categories"] == ["lessor"]
    assert crd["spec"]["names"]["shortNames"]
    columns = {c["name"] for c in version.get("additionalPrinterColumns", [])}
    assert "Age" in columns
