"""Which backend serves an instance, from the `backend` block copied into its spec."""

from __future__ import annotations

from lessor.operator.backends.apiserver import ApiserverBackend
from lessor.operator.backends.apiserver_manifests import ApiserverConfig
from lessor.operator.backends.base import ClusterBackend
from lessor.operator.backends.exposure import Route
from lessor.operator.backends.k3s import K3sBackend
from lessor.operator.backends.k3s_manifests import K3sConfig
from lessor.operator.backends.namespace import NAMESPACE_DISABLED, NamespaceBackend
from lessor.operator.backends.vcluster import VclusterBackend
from lessor.operator.backends.vcluster_manifests import VclusterConfig
from lessor.operator.runtime.client import KubeClient
from lessor.resources.cluster import Backend, Exposure


class Backends:
    def __init__(
        self, client: KubeClient, local: ClusterBackend, test_backends: bool = False
    ) -> None:
        self.client = client
        self.local = local
        self.namespace = NamespaceBackend(client, enabled=test_backends)

    def for_spec(self, backend: Backend) -> ClusterBackend:
        if backend.type == "local":
            return self.local
        if backend.type == "namespace":
            return self.namespace
        if backend.type == "apiserver":
            return ApiserverBackend(self.client, apiserver_config(backend))
        if backend.type == "vcluster":
            return VclusterBackend(self.client, vcluster_config(backend))
        return K3sBackend(self.client, k3s_config(backend))


def unavailable(backend: Backend, test_backends: bool) -> str | None:
    """Why this operator cannot serve the backend at all, known before any cluster is tried."""
    if backend.type == "namespace" and not test_backends:
        return NAMESPACE_DISABLED
    return None


def apiserver_config(backend: Backend) -> ApiserverConfig:
    settings = backend.apiserver
    if settings is None:
        return ApiserverConfig()
    return ApiserverConfig(
        image=settings.image,
        etcd_image=settings.etcd_image,
        cpu=settings.cpu,
        memory=settings.memory,
        host=settings.exposure.host,
        service_type=settings.exposure.type,
    )


def k3s_config(backend: Backend) -> K3sConfig:
    settings = backend.k3s
    if settings is None:
        return K3sConfig()
    return K3sConfig(
        image=settings.image,
        storage_size=settings.storage_size,
        storage_class=settings.storage_class,
        persistent=settings.persistent,
        cpu=settings.cpu,
        memory=settings.memory,
        host=settings.exposure.host,
        service_type=_service_type(settings.exposure),
        route=route(settings.exposure),
    )


def vcluster_config(backend: Backend) -> VclusterConfig:
    settings = backend.vcluster
    if settings is None:
        return VclusterConfig()
    return VclusterConfig(
        image=settings.image,
        kubernetes_image=settings.kubernetes_image,
        coredns_image=settings.coredns_image,
        cpu=settings.cpu,
        memory=settings.memory,
        pod_security=settings.pod_security,
        host=settings.exposure.host,
        service_type=_service_type(settings.exposure),
        route=route(settings.exposure),
    )


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
