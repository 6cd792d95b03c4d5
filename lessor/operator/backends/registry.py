"""Which backend serves an instance, from the `backend` block copied into its spec."""

from __future__ import annotations

from lessor.operator.backends.apiserver import ApiserverBackend
from lessor.operator.backends.apiserver_manifests import ApiserverConfig
from lessor.operator.backends.base import ClusterBackend
from lessor.operator.backends.exposure import Reach, Route
from lessor.operator.backends.k3s import K3sBackend
from lessor.operator.backends.k3s_manifests import K3sConfig
from lessor.operator.backends.namespace import NAMESPACE_DISABLED, NamespaceBackend
from lessor.operator.backends.vcluster import VclusterBackend
from lessor.operator.backends.vcluster_manifests import VclusterConfig
from lessor.operator.runtime.client import KubeClient
from lessor.resources.cluster import (
    Backend,
    Exposure,
    K3sBackendConfig,
    VclusterBackendConfig,
)


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
            return ApiserverBackend(self.client, apiserver_config(backend))
        if backend.type == "vcluster":
            return VclusterBackend(self.client, vcluster_config(backend))
        # A cluster made while it was allowed is still torn down; nothing new is provisioned.
        refusal = unavailable(backend, test_backends=False, privileged=self.privileged)
        return K3sBackend(self.client, k3s_config(backend), refusal)


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


def apiserver_config(backend: Backend) -> ApiserverConfig:
    settings = backend.apiserver
    if settings is None:
        return ApiserverConfig(placement=backend.placement)
    return ApiserverConfig(
        image=settings.image,
        etcd_image=settings.etcd_image,
        cpu=settings.cpu,
        memory=settings.memory,
        memory_limit=settings.memory_limit,
        etcd_quota=settings.etcd_quota,
        placement=backend.placement,
        host=settings.exposure.host,
        service_type=settings.exposure.type,
        reach=reach(settings.exposure),
    )


def k3s_config(backend: Backend) -> K3sConfig:
    settings = backend.k3s or K3sBackendConfig()
    return K3sConfig(
        image=settings.image,
        storage_size=settings.storage_size,
        storage_class=settings.storage_class,
        persistent=settings.persistent,
        cpu=settings.cpu,
        memory=settings.memory,
        memory_limit=settings.memory_limit,
        host=settings.exposure.host,
        service_type=_service_type(settings.exposure),
        reach=reach(settings.exposure),
        route=route(settings.exposure),
        network=backend.network,
        placement=backend.placement,
        quota=backend.quota,
    )


def vcluster_config(backend: Backend) -> VclusterConfig:
    settings = backend.vcluster or VclusterBackendConfig()
    return VclusterConfig(
        image=settings.image,
        kubernetes_image=settings.kubernetes_image,
        coredns_image=settings.coredns_image,
        cpu=settings.cpu,
        memory=settings.memory,
        memory_limit=settings.memory_limit,
        pod_security=settings.pod_security,
        host=settings.exposure.host,
        service_type=_service_type(settings.exposure),
        reach=reach(settings.exposure),
        route=route(settings.exposure),
        network=backend.network,
        placement=backend.placement,
        quota=backend.quota,
    )


def reach(exposure: Exposure) -> Reach:
    return Reach(tuple(exposure.source_ranges), dict(exposure.annotations))


def route(exposure: Exposure) -> Route | None:
    if exposure.gateway is None or exposure.domain is None:
        return None
    gateway = exposure.gateway
    return Route(
        gateway.name, gateway.namespace, gateway.section_name, exposure.domain, exposure.port
    )


def _service_type(exposure: Exposure) -> str:
    """Behind a Gateway the Service need not be reachable from outside by itself."""
    return "ClusterIP" if exposure.type == "TLSRoute" else exposure.type
