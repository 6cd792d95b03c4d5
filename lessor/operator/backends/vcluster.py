"""The `vcluster` backend: a virtual cluster whose pods run on the host cluster's nodes, in a
namespace of its own.

What most CI users lease: a full Kubernetes API of their own (admin inside, CRDs, namespaces)
whose workloads run on real nodes, at the cost of one pod. The objects are those
`vcluster_manifests` renders; the syncer writes the virtual cluster's admin kubeconfig into the
Secret `vc-<name>`, which the operator hands out pointed at its Service. The rest (namespace,
readiness, teardown by the namespace) is lessor.operator.backends.pod_cluster's.
"""

from __future__ import annotations

from lessor.operator.backends import vcluster_manifests as manifests
from lessor.operator.backends.base import InstanceRef
from lessor.operator.backends.owned import Manifest
from lessor.operator.backends.pod_cluster import Layout, PodClusterBackend
from lessor.operator.runtime.client import KubeClient


class VclusterBackend(PodClusterBackend):
    kind = "vcluster"

    def __init__(self, client: KubeClient, config: manifests.VclusterConfig) -> None:
        super().__init__(client, config.host, config.route, config.network, config.quota)
        self.config = config
        self.pod_security = config.pod_security

    def api_port(self) -> int:
        return manifests.PORT

    def layout(self, instance: InstanceRef, namespace: str) -> Layout:
        name = manifests.vcluster_name(instance)
        return Layout(
            statefulset=name,
            pod=manifests.pod_name(instance),
            service=name,
            service_port=manifests.SERVICE_PORT,
            kubeconfig_secret=manifests.kubeconfig_secret_name(instance),
            kubeconfig_key="config",
            # The Service's DNS name, in vcluster's serving certificate through extraSANs.
            server_name=f"{name}.{namespace}.svc",
        )

    def render(self, instance: InstanceRef, namespace: str) -> list[Manifest]:
        return manifests.render(instance, self.config, namespace)
