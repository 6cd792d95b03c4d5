"""Which backend serves an instance, from the `backend` block copied into its spec."""

from __future__ import annotations

from lessor.operator.backends.apiserver import ApiserverBackend
from lessor.operator.backends.base import ClusterBackend
from lessor.operator.backends.k3s import K3sBackend
from lessor.operator.backends.namespace import NAMESPACE_DISABLED, NamespaceBackend
from lessor.operator.backends.vcluster import VclusterBackend
from lessor.operator.runtime.client import KubeClient
from lessor.resources.cluster import Backend


class Backends:
    def __init__(
        self,
        client: KubeClient,
        local: ClusterBackend,
        test_backends: bool = False,
        privileged: bool = False,
    ) -> None:
        self.client = client
        self.local = local
        self.namespace = NamespaceBackend(client, enabled=test_backends)
        self.privileged = privileged

    def for_spec(self, backend: Backend) -> ClusterBackend:
        if backend.type == "local":
            return self.local
        if backend.type == "namespace":
            return self.namespace
        if backend.type == "apiserver":
            return ApiserverBackend(self.client, backend)
        if backend.type == "vcluster":
            return VclusterBackend(self.client, backend)
        # A cluster made while it was allowed is still torn down; nothing new is provisioned.
        refusal = unavailable(backend, test_backends=False, privileged=self.privileged)
        return K3sBackend(self.client, backend, refusal)


PRIVILEGED = ("k3s",)
PRIVILEGED_DISABLED = (
    "the k3s backend makes its tenants root on their node: this operator serves it only with "
    "--allow-privileged-backends (config operator.allowPrivilegedBackends)"
)
UNPINNED = (
    "a k3s pool's tenants are root on their node: name nodes of its own in "
    "backend.placement.nodeSelector (and tolerations for their taint), or set "
    "backend.placement.sharedNodes: true"
)


def unavailable(backend: Backend, test_backends: bool, privileged: bool = False) -> str | None:
    """Why this operator cannot serve the backend at all, known before any cluster is tried."""
    if backend.type == "namespace" and not test_backends:
        return NAMESPACE_DISABLED
    if backend.type in PRIVILEGED:
        if not privileged:
            return PRIVILEGED_DISABLED
        if not backend.placement.node_selector and not backend.placement.shared_nodes:
            return UNPINNED
    return None
