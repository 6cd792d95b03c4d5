"""What the `k3s` backend asks the host cluster to run, checked without a cluster: everything in
the cluster's own namespace and nothing owned across namespaces, a node (the agent), a privileged
container only where the agent needs one, and the name clients reach it by in its certificate.
The objects' admission and RBAC run on a real API server in
tests/integration/test_backend_k3s.py."""

from __future__ import annotations

from typing import Any

from lessor.operator.backends import k3s_manifests as manifests
from lessor.operator.backends.base import InstanceRef
from lessor.operator.backends.instance_namespace import namespace_name
from lessor.operator.backends.k3s import K3sBackend
from lessor.resources.cluster import Backend, Exposure, K3sBackendConfig, Placement

INSTANCE = InstanceRef(namespace="lessor-system", name="ci-x7k2p", uid="0f1e2d3c-aaaa")
OWN = namespace_name(INSTANCE)


def rendered(settings: K3sBackendConfig | None = None) -> dict[str, dict[str, Any]]:
    objects = manifests.render(INSTANCE, settings or K3sBackendConfig(), Placement(), "token", OWN)
    return {m["kind"]: m for m in objects}


def test_every_object_is_in_the_clusters_namespace_and_owned_by_nothing_there() -> None:
    for manifest in rendered().values():
        assert manifest["metadata"]["namespace"] == OWN != INSTANCE.namespace
        # An owner in another namespace reads as a missing owner to the garbage collector.
        assert "ownerReferences" not in manifest["metadata"]
    assert OWN.startswith("lessor-ci-x7k2p-") and len(OWN) <= 63


def test_a_node_privileged_only_for_the_agent_and_a_sidecar_without_rights() -> None:
    pod = rendered()["StatefulSet"]["spec"]["template"]["spec"]
    k3s, publisher = pod["containers"]
    assert "--disable-agent" not in k3s["args"]
    assert k3s["securityContext"] == {"privileged": True}
    context = publisher["securityContext"]
    assert context["runAsNonRoot"] is True and context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]} and context["readOnlyRootFilesystem"]
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    # The publisher reads the kubeconfig through the shared group, not as root.
    assert "--write-kubeconfig-mode=0640" in k3s["args"]
    assert pod["securityContext"]["fsGroup"] == manifests.SHARED_GROUP


def test_the_certificate_names_the_service_and_the_exposure_host() -> None:
    default = rendered()["StatefulSet"]["spec"]["template"]["spec"]
    sans = {a for a in default["containers"][0]["args"] if a.startswith("--tls-san=")}
    assert sans == {
        f"--tls-san={manifests.service_host(INSTANCE, OWN)}",
        f"--tls-san={manifests.object_name(INSTANCE)}",
    }
    exposed = rendered(K3sBackendConfig(exposure=Exposure(host="nodes.example.com")))["StatefulSet"]
    assert (
        "--tls-san=nodes.example.com"
        in exposed["spec"]["template"]["spec"]["containers"][0]["args"]
    )
    assert rendered()["Service"]["spec"]["type"] == "NodePort"


def test_the_publisher_may_write_secrets_of_its_namespace_through_the_shipped_role() -> None:
    binding = rendered()["RoleBinding"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": manifests.PUBLISHER_ROLE,
    }
    assert "Role" not in rendered(), "no Role: the operator binds, never grants"


def test_the_pool_spec_reaches_the_backend() -> None:
    spec = Backend.model_validate(
        {"type": "k3s", "k3s": {"persistent": False, "exposure": {"host": "10.1.2.3"}}}
    )
    backend = K3sBackend(None, spec)  # type: ignore[arg-type]
    statefulset = {m["kind"]: m for m in backend.render(INSTANCE, OWN)}["StatefulSet"]
    assert backend.host == "10.1.2.3"
    assert "--tls-san=10.1.2.3" in statefulset["spec"]["template"]["spec"]["containers"][0]["args"]
    assert statefulset["spec"]["volumeClaimTemplates"] == [], "not persistent: an emptyDir"
