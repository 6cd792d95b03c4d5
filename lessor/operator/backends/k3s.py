"""The `k3s` backend: a k3s server with its agent, in a namespace of its own in the host cluster.

The clusters live in the host cluster itself, so the operator can run anywhere and scale with the
host, and each has a node that runs pods. The operator makes the cluster's namespace
(lessor.operator.backends.instance_namespace), creates the objects `k3s_manifests` renders in it,
waits for the StatefulSet, the kubeconfig the sidecar publishes and the node port to answer, and
hands out that kubeconfig pointed at the node port. Teardown deletes the namespace; it is verified
when the namespace is gone, which the namespace controller allows only once everything in it is.
"""

from __future__ import annotations

import asyncio
import base64
import secrets

import yaml

from lessor.operator.backends import k3s_manifests as manifests
from lessor.operator.backends import node_port
from lessor.operator.backends.base import BackendError, InstanceRef, Readiness, TeardownReport
from lessor.operator.backends.instance_namespace import InstanceNamespaces, namespace_name
from lessor.operator.runtime.client import ApiError, ConflictError, KubeClient, NotFoundError

_PLURALS = {
    "Secret": "api/v1/namespaces/{ns}/secrets",
    "ServiceAccount": "api/v1/namespaces/{ns}/serviceaccounts",
    "RoleBinding": "apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    "Service": "api/v1/namespaces/{ns}/services",
    "StatefulSet": "apis/apps/v1/namespaces/{ns}/statefulsets",
}
KUBECONFIG_LIMIT = 64 * 1024


class K3sBackend:
    def __init__(self, client: KubeClient, config: manifests.K3sConfig) -> None:
        self.client = client
        self.config = config
        self.namespaces = InstanceNamespaces(client)

    async def provision(self, instance: InstanceRef) -> None:
        # Creates are atomic: on replay, objects that already exist answer 409 and are kept. The
        # token is only used if its Secret does not exist yet, so a replay never changes it.
        namespace = await self.namespaces.ensure(instance, manifests.POD_SECURITY)
        token = secrets.token_urlsafe(32)
        for manifest in manifests.render(instance, self.config, token, namespace):
            path = "/" + _PLURALS[manifest["kind"]].format(ns=namespace)
            try:
                await self.client.create(path, manifest)
            except ConflictError:
                continue
            except ApiError as error:
                name = manifest["metadata"]["name"]
                raise BackendError(f"creating {manifest['kind']} {name} failed: {error}") from error

    async def readiness(self, instance: InstanceRef) -> Readiness:
        namespace = namespace_name(instance)
        details = {
            "namespace": namespace,
            "service": f"{manifests.service_host(instance, namespace)}:{manifests.PORT}",
        }
        try:
            unready = await self._unready(instance, namespace, details)
        except NotFoundError as error:
            unready = f"not provisioned yet ({error.reason})"
        except ApiError as error:
            unready = f"unreadable: {error}"
        if unready:
            return Readiness(False, unready, details)
        return Readiness(True, "k3s ready through its node port", details)

    async def _unready(
        self, instance: InstanceRef, namespace: str, details: dict[str, str]
    ) -> str | None:
        name = manifests.object_name(instance)
        statefulset = await self.client.get(
            f"/apis/apps/v1/namespaces/{namespace}/statefulsets/{name}"
        )
        if int(statefulset.get("status", {}).get("readyReplicas", 0)) < 1:
            return "k3s server not ready"
        published = await self._published(instance, namespace)
        if published is None:
            return "kubeconfig not published yet"
        endpoint = await self._endpoint(instance, namespace)
        if isinstance(endpoint, str):
            return endpoint
        details["endpoint"] = f"{endpoint[0]}:{endpoint[1]}"
        ca = base64.b64decode(str(_cluster_entry(published).get("certificate-authority-data", "")))
        server_name = self.config.host or manifests.service_host(instance, namespace)
        if not await asyncio.to_thread(
            node_port.answers_through, *endpoint, ca.decode(errors="replace"), server_name
        ):
            return "k3s not reachable through its node port yet"
        return None

    async def _endpoint(self, instance: InstanceRef, namespace: str) -> tuple[str, int] | str:
        return await node_port.endpoint(
            self.client,
            namespace,
            manifests.object_name(instance),
            manifests.pod_name(instance),
            self.config.host,
        )

    async def _published(self, instance: InstanceRef, namespace: str) -> dict[str, object] | None:
        """The kubeconfig k3s wrote, as the sidecar published it; None until it has. What the
        pod wrote is the cluster's, not lessor's: bounded and checked before it is used."""
        secret_name = manifests.kubeconfig_secret_name(instance)
        try:
            secret = await self.client.get(f"/api/v1/namespaces/{namespace}/secrets/{secret_name}")
        except NotFoundError:
            return None
        encoded = secret.get("data", {}).get(manifests.KUBECONFIG_KEY, "")
        if not encoded:
            return None
        if len(encoded) > KUBECONFIG_LIMIT:
            raise BackendError(f"the kubeconfig published by {instance.name} is too large")
        try:
            document = yaml.safe_load(base64.b64decode(encoded))
        except (ValueError, yaml.YAMLError) as error:
            raise BackendError(
                f"the kubeconfig published by {instance.name} is not YAML"
            ) from error
        if not isinstance(document, dict) or not _cluster_entry(document):
            raise BackendError(f"the kubeconfig published by {instance.name} names no cluster")
        return document

    async def kubeconfig(self, instance: InstanceRef) -> str:
        namespace = namespace_name(instance)
        try:
            published = await self._published(instance, namespace)
            endpoint = await self._endpoint(instance, namespace)
        except ApiError as error:
            raise BackendError(f"kubeconfig of {instance.name}: {error}") from error
        if published is None or isinstance(endpoint, str):
            raise BackendError(f"kubeconfig of {instance.name} is not available yet")
        cluster = _cluster_entry(published)
        cluster["server"] = node_port.server_url(*endpoint)
        if endpoint[0] != self.config.host:
            cluster["tls-server-name"] = manifests.service_host(instance, namespace)
        return yaml.safe_dump(published, sort_keys=False)

    async def teardown(self, instance: InstanceRef) -> None:
        await self.namespaces.delete(instance)

    async def verify_teardown(self, instance: InstanceRef) -> TeardownReport:
        return await self.namespaces.verify(instance)


def _cluster_entry(kubeconfig: dict[str, object]) -> dict[str, object]:
    """The `cluster` entry of a one-cluster kubeconfig (k3s writes one), {} if it has none."""
    clusters = kubeconfig.get("clusters")
    if not isinstance(clusters, list) or len(clusters) != 1 or not isinstance(clusters[0], dict):
        return {}
    entry = clusters[0].get("cluster")
    return entry if isinstance(entry, dict) else {}
