"""The Helm chart (charts/lessor) installs what the kustomize install does.

`helm template` of the chart is compared with `kubectl kustomize` of the manifests it mirrors,
object by object (kind, namespace, name) and field by field: its defaults with manifests/base
and the components both overlays add (sandboxes, instance-namespaces, apiserver-admission), its
toggles with the components they stand for, and the values files in charts/lessor/ci with the
overlays they reproduce. So a change to manifests/ that the chart does not follow (or the
reverse) fails here. Helm is built from its Go module into the cache
(lessor/controlplane/helm.py); kubectl is the local control plane's. No cluster is needed: the
kind e2e installs the chart for real.
"""

from __future__ import annotations

import difflib
import json
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

from lessor.controlplane.binaries import ensure_binaries
from lessor.controlplane.helm import ensure_helm

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "lessor"
MANIFESTS = ROOT / "manifests"
NAMESPACE = "lessor-system"
# What both overlays install besides the base; the chart installs them by default.
COMPONENTS = ("base", "sandboxes", "instance-namespaces", "apiserver-admission")
# Labels Helm charts put on every object by convention (which release and chart made it);
# kustomize has no release, so the kustomize install carries none of them. Not compared.
HELM_LABELS = (
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
)

Object = dict[str, Any]
Key = tuple[str, str, str]


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@pytest.fixture(scope="module")
def helm() -> Path:
    return ensure_helm(_progress)


@pytest.fixture(scope="module")
def kubectl() -> Path:
    return ensure_binaries(_progress) / "kubectl"


def run(*argv: str | Path) -> str:
    result = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, f"{' '.join(map(str, argv))}:\n{result.stderr}"
    return result.stdout


def documents(text: str) -> list[Object]:
    return [document for document in yaml.safe_load_all(text) if document]


def kustomize(kubectl: Path, *directories: str) -> list[Object]:
    """`kubectl kustomize` of each directory under manifests/, concatenated: the components are
    independent kustomizations (each names its own namespaces), as the overlays list them."""
    return [
        document
        for directory in directories
        for document in documents(run(kubectl, "kustomize", MANIFESTS / directory))
    ]


def template(helm: Path, *args: str | Path, tests: bool = False) -> list[Object]:
    """The chart rendered as `helm install` would apply it, its crds/ included, released into
    lessor-system and making that namespace, as manifests/base does (the chart's defaults take
    the release's namespace as it is); with `tests`, also the `helm test` Pod, which only
    `helm test` creates."""
    skip = [] if tests else ["--skip-tests"]
    rendered = run(
        helm,
        "template",
        "lessor",
        CHART,
        "--namespace",
        NAMESPACE,
        "--set=createNamespace=true",
        "--include-crds",
        *skip,
        *args,
    )
    return documents(rendered)


def normalised(document: Object) -> Object:
    """The object with what differs by construction, not by content, taken out."""
    document = json.loads(json.dumps(document))
    metadata = document["metadata"]
    labels = metadata.get("labels", {})
    for label in HELM_LABELS:
        labels.pop(label, None)
    if document["kind"] == "CustomResourceDefinition":
        # Helm applies crds/ untemplated, byte for byte the files of crds/ (tests/unit/
        # test_crds.py), so it cannot add the label kustomize's `labels` transformer adds.
        labels.pop("app.kubernetes.io/part-of", None)
    if not labels:
        metadata.pop("labels", None)
    if document["kind"] == "ConfigMap" and document["metadata"]["name"] == "lessor-config":
        # The same settings: the chart writes config.yaml with toYaml (keys sorted, no
        # comments), the base keeps it as written; both components parse it as YAML.
        data = document["data"]
        data["config.yaml"] = yaml.safe_load(data["config.yaml"])
    if document["kind"] == "Deployment":
        pod = document["spec"]["template"]["metadata"]
        # The chart rolls the pods when `helm upgrade` changes config.yaml (a checksum of it
        # on the pod template); kustomize users restart them (docs/operations.md).
        annotations = pod.get("annotations", {})
        annotations.pop("checksum/config", None)
        if not annotations:
            pod.pop("annotations", None)
        for container in document["spec"]["template"]["spec"]["containers"]:
            # The chart names its pull policy (Helm charts' convention); the base leaves it to
            # Kubernetes, whose default for an image not tagged `latest` is IfNotPresent.
            image = container["image"]
            default = "Always" if image.endswith(":latest") or ":" not in image else "IfNotPresent"
            if container.get("imagePullPolicy") == default:
                del container["imagePullPolicy"]
    return document


def by_key(objects: Iterable[Object]) -> dict[Key, Object]:
    keyed: dict[Key, Object] = {}
    for document in objects:
        metadata = document["metadata"]
        key = (document["kind"], metadata.get("namespace", ""), metadata["name"])
        assert key not in keyed, f"{key} rendered twice"
        keyed[key] = normalised(document)
    return keyed


def assert_same_objects(helm_objects: list[Object], kustomize_objects: list[Object]) -> None:
    chart, manifests = by_key(helm_objects), by_key(kustomize_objects)
    assert sorted(chart) == sorted(manifests), (
        f"only in the chart: {sorted(set(chart) - set(manifests))}; "
        f"only in manifests/: {sorted(set(manifests) - set(chart))}"
    )
    for key, expected in manifests.items():
        if chart[key] != expected:
            diff = difflib.unified_diff(
                yaml.safe_dump(expected).splitlines(),
                yaml.safe_dump(chart[key]).splitlines(),
                "manifests/",
                "charts/lessor",
                lineterm="",
            )
            pytest.fail(f"{key} differs between manifests/ and the chart:\n" + "\n".join(diff))


def test_default_values_render_what_both_overlays_take_from_manifests(
    helm: Path, kubectl: Path
) -> None:
    chart = template(helm)
    manifests = kustomize(kubectl, *COMPONENTS)
    assert len(manifests) > 30
    assert_same_objects(chart, manifests)


@pytest.mark.parametrize(
    ("values", "components"),
    [
        (
            [
                "sandboxes.enabled=false",
                "instanceNamespaces.enabled=false",
                "apiserverAdmission.enabled=false",
            ],
            ["base"],
        ),
        (["localBackend.enabled=true"], [*COMPONENTS, "local-backend"]),
        (
            [
                "monitoring.podMonitors.enabled=true",
                "monitoring.prometheusRule.enabled=true",
                "monitoring.dashboard.enabled=true",
            ],
            [*COMPONENTS, "monitoring"],
        ),
    ],
    ids=["base-alone", "with-local-backend", "with-monitoring"],
)
def test_each_toggle_stands_for_its_kustomize_component(
    helm: Path, kubectl: Path, values: list[str], components: list[str]
) -> None:
    chart = template(helm, *(f"--set={value}" for value in values))
    assert_same_objects(chart, kustomize(kubectl, *components))


def test_the_charts_monitoring_files_are_those_of_manifests_monitoring() -> None:
    """Helm reads no file outside the chart, so the chart carries copies of manifests/monitoring
    (PodMonitors, alerts, dashboard), rendered untemplated; they must not drift."""
    source, copy = MANIFESTS / "monitoring", CHART / "files" / "monitoring"

    def files(root: Path) -> dict[str, str]:
        return {
            str(path.relative_to(root)): path.read_text()
            for path in sorted(root.rglob("*"))
            if path.is_file() and path.name != "kustomization.yaml"
        }

    assert files(copy) == files(source), (
        "copy manifests/monitoring into charts/lessor/files/monitoring (all but "
        "kustomization.yaml), and render any new file in charts/lessor/templates/monitoring.yaml"
    )


@pytest.mark.parametrize("overlay", ["dev", "production-like"])
def test_an_overlays_values_file_renders_that_overlay(
    helm: Path, kubectl: Path, overlay: str
) -> None:
    chart = template(helm, "--values", CHART / "ci" / f"{overlay}-values.yaml")
    assert_same_objects(chart, kustomize(kubectl, f"overlays/{overlay}"))


def test_access_policies_from_values_are_the_examples_objects(
    helm: Path, kubectl: Path, tmp_path: Path
) -> None:
    examples = [
        documents((MANIFESTS / "examples" / f"accesspolicy-{name}.yaml").read_text())[-1]
        for name in ("ci-issuer", "company-oidc", "ssh-keys")
    ]
    values = tmp_path / "policies.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "accessPolicies": [
                    {"name": p["metadata"]["name"], "spec": p["spec"]} for p in examples
                ]
            }
        )
    )
    policies = [d for d in template(helm, "--values", values) if d["kind"] == "AccessPolicy"]
    assert [normalised(p) for p in policies] == [
        {**p, "metadata": {**p["metadata"], "labels": {"app.kubernetes.io/part-of": "lessor"}}}
        for p in examples
    ]
    # None by default: nobody is let in until an administrator says who.
    assert not [d for d in template(helm) if d["kind"] == "AccessPolicy"]


def test_the_namespace_value_moves_every_object_and_every_reference(helm: Path) -> None:
    chart = template(helm, "--set=namespace=platform-leases")
    # The one thing lessor reads in `default`: the host API server's EndpointSlice.
    host_api = [d for d in chart if d["metadata"]["name"] == "lessor-operator-host-api"]
    assert {(d["kind"], d["metadata"]["namespace"]) for d in host_api} == {
        ("Role", "default"),
        ("RoleBinding", "default"),
    }
    namespaced = [d for d in chart if "namespace" in d["metadata"] and d not in host_api]
    assert {d["metadata"]["namespace"] for d in namespaced} == {
        "platform-leases",
        "lessor-sandboxes",
    }
    subjects = [s for d in chart for s in d.get("subjects", [])]
    assert subjects and {s["namespace"] for s in subjects} == {"platform-leases"}
    [config] = [d for d in chart if d["kind"] == "ConfigMap"]
    assert yaml.safe_load(config["data"]["config.yaml"])["namespace"] == "platform-leases"


def test_a_config_change_rolls_both_deployments_and_nothing_else_does(helm: Path) -> None:
    def checksums(*args: str) -> dict[str, str]:
        return {
            d["metadata"]["name"]: d["spec"]["template"]["metadata"]["annotations"][
                "checksum/config"
            ]
            for d in template(helm, *args)
            if d["kind"] == "Deployment"
        }

    before = checksums()
    assert len(before) == 2
    changed = checksums("--set=config.agentSandbox.mode=external")
    assert all(changed[name] != before[name] for name in before)
    assert checksums("--set=apiserver.replicas=3") == before


@pytest.mark.parametrize("values", [None, "dev", "production-like"])
def test_helm_lint_finds_nothing(helm: Path, values: str | None) -> None:
    extra = ["--values", str(CHART / "ci" / f"{values}-values.yaml")] if values else []
    output = run(helm, "lint", "--strict", CHART, *extra)
    assert "1 chart(s) linted, 0 chart(s) failed" in output
    assert "[WARNING]" not in output and "[ERROR]" not in output
