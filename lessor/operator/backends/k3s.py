"""The `k3s` backend: a k3s server with its agent, in a namespace of its own in the host cluster.

The clusters live in the host cluster itself, so the operator can run anywhere and scale with the
host, and each has a node that runs pods. The objects are those `k3s_manifests` renders; the
rest (namespace, readiness through its Service, the kubeconfig its sidecar publishes, teardown
by the namespace) is lessor.operator.backends.pod_cluster's.
"""

from __future__ import annotations

import secrets

from lessor.operator.backends import k3s_manifests as manifests
from lessor.operator.backends.base import BackendError, InstanceRef
from lessor.operator.backends.owned import Manifest
from lessor.operator.backends.pod_cluster import Layout, PodClusterBackend
from lessor.operator.runtime.client import KubeClient
from lessor.resources.cluster import Backend, K3sBackendConfig


class K3sBackend(PodClusterBackend):
    kind = "k3s"
    pod_security = manifests.POD_SECURITY

    def __init__(self, client: KubeClient, backend: Backend, refusal: str | None = None) -> None:
        # A pool without a `k3s` block gets the block's defaults, declared in the CRD's model.
        self.settings = backend.k3s or K3sBackendConfig()
        self.placement = backend.placement
        super().__init__(client, self.settings.exposure, backend.network, backend.quota)
        # Why this operator provisions no k3s cluster (lessor.operator.backends.registry).
        self.refusal = refusal

    async def provision(self, instance: InstanceRef) -> None:
        if self.refusal is not None:
            raise BackendError(self.refusal)
        await super().provision(instance)

    def api_port(self) -> int:
        return manifests.PORT

    def layout(self, instance: InstanceRef, namespace: str) -> Layout:
        return Layout(
            statefulset=manifests.object_name(instance),
            pod=manifests.pod_name(instance),
            service=manifests.object_name(instance),
            service_port=manifests.PORT,
            kubeconfig_secret=manifests.kubeconfig_secret_name(instance),
            kubeconfig_key=manifests.KUBECONFIG_KEY,
            server_name=manifests.service_host(instance, namespace),
        )

    def render(self, instance: InstanceRef, namespace: str) -> list[Manifest]:
        token = secrets.token_urlsafe(32)
        return manifests.render(instance, self.settings, self.placement, token, namespace)
