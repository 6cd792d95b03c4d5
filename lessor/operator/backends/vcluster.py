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
from lessor.resources.cluster import Backend, VclusterBackendConfig


class VclusterBackend(PodClusterBackend):
    kind = "vcluster"

    def __init__(self, client: KubeClient, backend: Backend) -> None:
        # A pool without a `vcluster` block gets the block's defaults, declared in the CRD's model.
        self.settings = backend.vcluster or VclusterBackendConfig()
        self.placement = backend.placement
        super().__init__(client, self.settings.exposure, backend.network, backend.quota)
        self.pod_security = self.settings.pod_security

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
        return manifests.render(instance, self.settings, self.placement, namespace)
