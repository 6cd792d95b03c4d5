"""What the `vcluster` backend asks the host cluster to run, checked without a cluster: the
vcluster pod passes Pod Security `restricted`, everything is in the cluster's own namespace and
owned by nothing there, and the configuration says what vcluster must see (it fills in no
defaults). vcluster itself reads the configuration, and the whole runs, in kind
(e2e/test_vcluster.py)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from lessor.operator.backends import vcluster_manifests as manifests
from lessor.operator.backends.base import InstanceRef
from lessor.operator.backends.instance_namespace import namespace_name
from lessor.operator.backends.vcluster import VclusterBackend
from lessor.resources.cluster import Backend, Exposure, Placement, VclusterBackendConfig

INSTANCE = InstanceRef(namespace="lessor-system", name="ci-x7k2p", uid="0f1e2d3c-aaaa")
OWN = namespace_name(INSTANCE)


def rendered(settings: VclusterBackendConfig | None = None) -> list[dict[str, Any]]:
    return manifests.render(INSTANCE, settings or VclusterBackendConfig(), Placement(), OWN)


def by_kind(kind: str, settings: VclusterBackendConfig | None = None) -> dict[str, Any]:
    [found] = [m for m in rendered(settings) if m["kind"] == kind]
    return found


def test_the_vcluster_pod_passes_pod_security_restricted() -> None:
    pod = by_kind("StatefulSet")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in pod["containers"] + pod["initContainers"]:
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
    assert all("hostPath" not in volume for volume in pod["volumes"])


def test_every_object_is_in_the_clusters_namespace_and_owned_by_nothing_there() -> None:
    for manifest in rendered():
        assert manifest["metadata"]["namespace"] == OWN
        assert "ownerReferences" not in manifest["metadata"]
    service = by_kind("Service")
    assert service["metadata"]["name"] == manifests.vcluster_name(INSTANCE), "vcluster needs it"
    assert service["spec"]["type"] == "NodePort"
    labels = by_kind("StatefulSet")["spec"]["template"]["metadata"]["labels"]
    assert labels["app"] == "vcluster" and labels["release"] == manifests.vcluster_name(INSTANCE)


def test_the_configuration_turns_on_what_vcluster_needs_and_nothing_that_needs_more() -> None:
    secret = by_kind("Secret", VclusterBackendConfig(exposure=Exposure(host="nodes.example.com")))
    config = yaml.safe_load(secret["stringData"]["config.yaml"])
    assert config["controlPlane"]["distro"]["k8s"]["enabled"] is True
    assert config["controlPlane"]["backingStore"]["database"]["embedded"]["enabled"] is True
    assert config["sync"]["toHost"]["pods"]["enabled"] is True
    assert config["controlPlane"]["coredns"]["enabled"] is True, "pods sync only with kube-dns"
    assert config["telemetry"]["enabled"] is False
    assert config["sync"]["toHost"]["pods"]["rewriteHosts"]["enabled"] is False
    assert config["rbac"]["enableVolumeSnapshotRules"]["enabled"] is False
    assert "nodes.example.com" in config["controlPlane"]["proxy"]["extraSANs"]
    binding = by_kind("RoleBinding")
    assert binding["roleRef"]["kind"] == "ClusterRole" and binding["roleRef"]["name"] == (
        manifests.ROLE
    )


def test_the_pool_spec_reaches_the_backend_and_a_foreign_block_is_refused() -> None:
    spec = Backend.model_validate(
        {"type": "vcluster", "vcluster": {"podSecurity": "restricted", "image": "mine:1"}}
    )
    backend = VclusterBackend(None, spec)  # type: ignore[arg-type]
    [pod] = [m for m in backend.render(INSTANCE, OWN) if m["kind"] == "StatefulSet"]
    [syncer] = pod["spec"]["template"]["spec"]["containers"]
    assert (backend.pod_security, syncer["image"]) == ("restricted", "mine:1")
    with pytest.raises(ValidationError, match=r"backend\.k3s is set but backend\.type is not k3s"):
        Backend.model_validate({"type": "vcluster", "k3s": {}})
