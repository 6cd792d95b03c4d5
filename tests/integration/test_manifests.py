"""What `kubectl apply -k manifests/overlays/...` installs, checked by the real API server:
every object of both overlays and every example passes a server-side dry run, and the API
server's ServiceAccount, bound as the manifests bind it, cannot write any status."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from lessor.controlplane.kubectl import Cluster

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
NAMESPACE = "lessor-system"
APISERVER = f"system:serviceaccount:{NAMESPACE}:lessor-apiserver"
OPERATOR = f"system:serviceaccount:{NAMESPACE}:lessor-operator"


def render(cluster: Cluster, overlay: str) -> list[dict[str, object]]:
    text = cluster.kubectl("kustomize", str(MANIFESTS / "overlays" / overlay)).stdout
    return [document for document in yaml.safe_load_all(text) if document]


@pytest.fixture(scope="module")
def installed_rbac(control_plane: Cluster) -> Cluster:
    """The CRDs, the namespace and the two components' RBAC, applied for real (can-i needs
    them); the Deployments are not, so nothing runs."""
    control_plane.kubectl("apply", "-k", str(ROOT / "crds"))
    objects = [
        document
        for document in render(control_plane, "dev")
        if document["kind"] in ("Namespace", "ServiceAccount", "Role", "RoleBinding")
    ]
    control_plane.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    )
    return control_plane


@pytest.mark.parametrize("overlay", ["dev", "production-like"])
def test_every_object_of_an_overlay_passes_a_server_side_dry_run(
    installed_rbac: Cluster, overlay: str
) -> None:
    objects = render(installed_rbac, overlay)
    kinds = {document["kind"] for document in objects}
    assert {"Deployment", "Service", "PodDisruptionBudget", "ConfigMap", "Role"} <= kinds
    assert sum(document["kind"] == "CustomResourceDefinition" for document in objects) == 7
    result = installed_rbac.kubectl(
        "apply", "--dry-run=server", "-f", "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}),
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("(server dry run)") == len(objects)
    for document in objects:
        if document["kind"] == "Deployment":
            pod = document["spec"]["template"]["spec"]  # type: ignore[index]
            [container] = pod["containers"]
            assert container["securityContext"]["readOnlyRootFilesystem"] is True
            assert pod["securityContext"]["runAsNonRoot"] is True
            assert "livenessProbe" in container and "readinessProbe" in container


@pytest.mark.parametrize("example", sorted(p.name for p in (MANIFESTS / "examples").glob("*.yaml")))
def test_every_example_passes_a_server_side_dry_run(installed_rbac: Cluster, example: str) -> None:
    result = installed_rbac.kubectl(
        "apply", "--dry-run=server", "-f", str(MANIFESTS / "examples" / example), check=False
    )
    assert result.returncode == 0, result.stderr


def can(cluster: Cluster, who: str, verb: str, resource: str, subresource: str = "") -> bool:
    extra = [f"--subresource={subresource}"] if subresource else []
    result = cluster.kubectl(
        "auth", "can-i", verb, resource, *extra, f"--as={who}", "-n", NAMESPACE, check=False
    )
    return result.stdout.strip() == "yes"


def test_the_api_servers_account_cannot_write_any_status(installed_rbac: Cluster) -> None:
    crds = json.loads(installed_rbac.kubectl("get", "crd", "-o", "json").stdout)["items"]
    plurals = [
        f"{crd['spec']['names']['plural']}.{crd['spec']['group']}"
        for crd in crds
        if crd["spec"]["group"] == "lessor.dev"
    ]
    assert len(plurals) == 7
    for resource in [*plurals, "pods", "deployments.apps", "namespaces"]:
        for verb in ("patch", "update", "create"):
            assert not can(installed_rbac, APISERVER, verb, resource, "status"), (verb, resource)
    listed = installed_rbac.kubectl(
        "auth", "can-i", "--list", f"--as={APISERVER}", "-n", NAMESPACE
    ).stdout
    assert "/status" not in listed
    # What it needs, it has; the operator owns the status it cannot touch.
    assert can(installed_rbac, APISERVER, "create", "clusterleases.lessor.dev")
    assert can(installed_rbac, APISERVER, "patch", "clusterleases.lessor.dev")
    assert not can(installed_rbac, APISERVER, "delete", "clusterleases.lessor.dev")
    assert not can(installed_rbac, APISERVER, "patch", "clusterpools.lessor.dev")
    assert not can(installed_rbac, APISERVER, "list", "secrets")
    assert can(installed_rbac, OPERATOR, "patch", "clusterleases.lessor.dev", "status")
    assert can(installed_rbac, OPERATOR, "update", "leases.coordination.k8s.io")
    assert not can(installed_rbac, OPERATOR, "create", "clusterroles.rbac.authorization.k8s.io")


def test_the_ingress_exposes_the_api_and_not_the_metrics(control_plane: Cluster) -> None:
    """Issue 18, item 8: what the production-like overlay puts behind its public Ingress is
    /v1/... and the probes' /healthz, never /metrics (which anyone could then read, and make
    series of)."""
    [ingress] = [d for d in render(control_plane, "production-like") if d["kind"] == "Ingress"]
    paths = [p for rule in ingress["spec"]["rules"] for p in rule["http"]["paths"]]  # type: ignore[index]
    exposed = {(p["path"], p["pathType"]) for p in paths}
    assert ("/", "Prefix") not in exposed and all(path != "/metrics" for path, _ in exposed)
    assert ("/v1", "Prefix") in exposed
