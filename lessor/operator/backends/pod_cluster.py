"""What the backends whose clusters run as a pod in a namespace of their own share (k3s, vcluster).

Each cluster is a one-replica StatefulSet in its own namespace
(lessor.operator.backends.instance_namespace), reached through a NodePort or LoadBalancer Service
or a TLSRoute on a shared Gateway (lessor.operator.backends.exposure), whose admin kubeconfig the
cluster itself writes into a Secret of that namespace
(lessor.operator.backends.published_kubeconfig). Provisioning makes the namespace and creates the
rendered objects; readiness is the StatefulSet's ready replica, the
published kubeconfig and a TLS handshake through its Service verified against the cluster's
CA; a lease's credential is a certificate the cluster signs (lease_credentials); teardown deletes
the namespace and is verified when it is gone. A backend says only what its objects are and
where its kubeconfig is.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from lessor.operator.backends import exposure, isolation, lease_credentials, published_kubeconfig
from lessor.operator.backends.base import (
    BackendError,
    InstanceRef,
    LeaseRef,
    Readiness,
    TeardownReport,
)
from lessor.operator.backends.instance_namespace import InstanceNamespaces, namespace_name
from lessor.operator.backends.owned import Manifest
from lessor.operator.core.writes import create_missing
from lessor.operator.runtime.client import ApiError, KubeClient, NotFoundError
from lessor.resources.cluster import Exposure, Network, Quota

_COLLECTIONS = {
    "NetworkPolicy": "apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
    "ResourceQuota": "api/v1/namespaces/{ns}/resourcequotas",
    "LimitRange": "api/v1/namespaces/{ns}/limitranges",
    "Secret": "api/v1/namespaces/{ns}/secrets",
    "ServiceAccount": "api/v1/namespaces/{ns}/serviceaccounts",
    "RoleBinding": "apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    "Service": "api/v1/namespaces/{ns}/services",
    "StatefulSet": "apis/apps/v1/namespaces/{ns}/statefulsets",
    "TLSRoute": exposure.TLS_ROUTES,
}


@dataclass(frozen=True)
class Layout:
    """Where one cluster's parts are, in its namespace."""

    statefulset: str
    pod: str
    service: str
    service_port: int
    kubeconfig_secret: str
    kubeconfig_key: str
    # The name the cluster's certificate is issued for, whatever address reaches it.
    server_name: str


class PodClusterBackend:
    kind = "cluster"
    pod_security = "restricted"

    def __init__(
        self, client: KubeClient, reached: Exposure, network: Network, quota: Quota
    ) -> None:
        self.client = client
        # The address clients reach the cluster at; None: the node's or the load balancer's.
        self.host = reached.host
        # Exposure through a Gateway instead of the Service's own address.
        self.route = exposure.route(reached)
        self.network = network
        self.quota = quota
        self.namespaces = InstanceNamespaces(client)

    def api_port(self) -> int:
        """The port the cluster's own pod serves its API on (what the exposure reaches)."""
        raise NotImplementedError

    def layout(self, instance: InstanceRef, namespace: str) -> Layout:
        raise NotImplementedError

    def render(self, instance: InstanceRef, namespace: str) -> list[Manifest]:
        """Every object of the cluster in `namespace`, in creation order; secrets made here are
        used only if their object does not exist yet, so a replay never changes them."""
        raise NotImplementedError

    async def provision(self, instance: InstanceRef) -> None:
        # What exists is kept: a replay creates only what is missing.
        namespace = await self.namespaces.ensure(instance, self.pod_security)
        # Isolation first: no pod of the cluster runs a moment without it.
        manifests = [
            *isolation.network_policies(
                instance,
                namespace,
                self.network,
                self.api_port(),
                await isolation.host_api(self.client),
            ),
            *isolation.quota(instance, namespace, self.quota),
            *self.render(instance, namespace),
        ]
        if self.route is not None:
            layout = self.layout(instance, namespace)
            hostname = self.route.hostname(namespace)
            manifests.append(
                self.route.manifest(layout.service, namespace, hostname, layout.service_port)
            )
        for manifest in manifests:
            path = "/" + _COLLECTIONS[manifest["kind"]].format(ns=namespace)
            try:
                await create_missing(self.client, path, manifest)
            except ApiError as error:
                name = manifest["metadata"]["name"]
                raise BackendError(f"creating {manifest['kind']} {name} failed: {error}") from error

    async def readiness(self, instance: InstanceRef) -> Readiness:
        namespace = namespace_name(instance)
        layout = self.layout(instance, namespace)
        details = {"namespace": namespace, "service": f"{layout.service}.{namespace}.svc"}
        try:
            unready = await self._unready(layout, namespace, details)
        except NotFoundError as error:
            unready = f"not provisioned yet ({error.reason})"
        except ApiError as error:
            unready = f"unreadable: {error}"
        if unready:
            return Readiness(False, unready, details)
        return Readiness(True, f"{self.kind} ready, reachable from outside", details)

    async def _unready(self, layout: Layout, namespace: str, details: dict[str, str]) -> str | None:
        """Why the cluster cannot be handed out yet, or None."""
        statefulset = await self.client.get(
            f"/apis/apps/v1/namespaces/{namespace}/statefulsets/{layout.statefulset}"
        )
        if int(statefulset.get("status", {}).get("readyReplicas", 0)) < 1:
            return f"{self.kind} not ready"
        published = await self._published(layout, namespace)
        if published is None:
            return "kubeconfig not published yet"
        endpoint = await self._endpoint(layout, namespace)
        if isinstance(endpoint, str):
            return endpoint
        details["endpoint"] = f"{endpoint[0]}:{endpoint[1]}"
        ca = published_kubeconfig.ca_pem(published)
        server_name = self._server_name(layout, namespace)
        if not await asyncio.to_thread(exposure.answers_through, *endpoint, ca, server_name):
            through = f" through its Gateway as {server_name}" if self.route else ""
            return f"{self.kind} not reachable from outside{through} yet"
        return None

    def _server_name(self, layout: Layout, namespace: str) -> str:
        """The name a client asks for and checks the certificate against."""
        if self.route is not None:
            return self.route.hostname(namespace)
        return self.host or layout.server_name

    async def _endpoint(self, layout: Layout, namespace: str) -> tuple[str, int] | str:
        if self.route is not None:
            return self.host or self.route.hostname(namespace), self.route.port
        return await exposure.endpoint(
            self.client, namespace, layout.service, layout.pod, self.host
        )

    async def _published(
        self, layout: Layout, namespace: str
    ) -> published_kubeconfig.Kubeconfig | None:
        return await published_kubeconfig.read(
            self.client, namespace, layout.kubeconfig_secret, layout.kubeconfig_key
        )

    async def kubeconfig(self, instance: InstanceRef) -> str:
        namespace = namespace_name(instance)
        layout = self.layout(instance, namespace)
        try:
            published = await self._published(layout, namespace)
            endpoint = await self._endpoint(layout, namespace)
        except ApiError as error:
            raise BackendError(f"kubeconfig of {instance.name}: {error}") from error
        if published is None or isinstance(endpoint, str):
            raise BackendError(f"kubeconfig of {instance.name} is not available yet")
        server_name = self._server_name(layout, namespace)
        return published_kubeconfig.pointed_at(
            published,
            exposure.server_url(*endpoint),
            None if endpoint[0] == server_name else server_name,
        )

    async def lease_kubeconfig(self, instance: InstanceRef, admin: str, lease: LeaseRef) -> str:
        """Signed by the cluster's own controller-manager: its CA stays in its pod."""
        return await lease_credentials.signed_by_the_cluster(admin, lease)

    async def teardown(self, instance: InstanceRef) -> None:
        await self.namespaces.delete(instance)

    async def verify_teardown(self, instance: InstanceRef) -> TeardownReport:
        return await self.namespaces.verify(instance)
