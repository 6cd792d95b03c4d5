"""The `apiserver` backend: kube-apiserver and etcd as a pod of the host cluster, reached from
outside it through a NodePort.

A cluster without nodes, like `local`, but living in the host cluster: it needs nothing on the
operator's host, survives the operator's pod, and its kubeconfig works wherever the host's nodes
are reachable (a CI runner beside a kind cluster, a laptop on the nodes' network). The objects are
those `apiserver_manifests` renders; teardown deletes each by name (the operator's Role grants
no `deletecollection`) and verification looks for each by name and for any pod by the instance's
labels.
"""

from __future__ import annotations

import asyncio
import base64

from lessor.operator.backends import apiserver_manifests as manifests
from lessor.operator.backends import exposure, lease_credentials
from lessor.operator.backends.base import (
    BackendError,
    InstanceRef,
    LeaseRef,
    Readiness,
    TeardownReport,
)
from lessor.operator.backends.owned import label_selector, labelled_names
from lessor.operator.core.writes import create_missing, delete_present
from lessor.operator.runtime.client import ApiError, KubeClient, NotFoundError
from lessor.protocol.kubeconfig import kubeconfig
from lessor.resources.cluster import ApiserverBackendConfig, Backend

_PATHS = {
    "Secret": "api/v1/namespaces/{ns}/secrets",
    "Service": "api/v1/namespaces/{ns}/services",
    "StatefulSet": "apis/apps/v1/namespaces/{ns}/statefulsets",
    "Pod": "api/v1/namespaces/{ns}/pods",
}
# Teardown order: the StatefulSet first, so that nothing recreates the pod deleted after it.
_TEARDOWN = ("StatefulSet", "Pod", "Service", "Secret")
# A cluster made before lessor kept the CA's key: never handed out (its pool replaces it once
# it is Unhealthy), since no lease credential can be issued for it.
UNSIGNABLE = "made by an older lessor that kept no CA key: no lease credential can be issued"


class ApiserverBackend:
    def __init__(self, client: KubeClient, backend: Backend) -> None:
        self.client = client
        # A pool without an `apiserver` block gets the block's defaults, declared in the CRD's
        # model.
        self.settings = backend.apiserver or ApiserverBackendConfig()
        self.placement = backend.placement
        # The address clients reach the cluster at; None: the node's or the load balancer's.
        self.host = self.settings.exposure.host

    def _path(self, kind: str, instance: InstanceRef, name: str | None = None) -> str:
        collection = "/" + _PATHS[kind].format(ns=instance.namespace)
        return f"{collection}/{name}" if name else collection

    def _name(self, kind: str, instance: InstanceRef) -> str:
        if kind == "Secret":
            return manifests.pki_secret_name(instance)
        if kind == "Pod":
            return manifests.pod_name(instance)
        return manifests.object_name(instance)

    async def provision(self, instance: InstanceRef) -> None:
        # Creates are atomic: on replay, what exists answers 409 and is kept, the Secret with the
        # keys made the first time included (the fresh ones made now are discarded unused).
        pki = manifests.make_pki(instance, self.settings)
        for manifest in manifests.render(instance, self.settings, self.placement, pki):
            try:
                await create_missing(self.client, self._path(manifest["kind"], instance), manifest)
            except ApiError as error:
                name = manifest["metadata"]["name"]
                raise BackendError(f"creating {manifest['kind']} {name} failed: {error}") from error

    async def _endpoint(self, instance: InstanceRef) -> tuple[str, int] | str:
        return await exposure.endpoint(
            self.client,
            instance.namespace,
            manifests.object_name(instance),
            manifests.pod_name(instance),
            self.host,
        )

    async def readiness(self, instance: InstanceRef) -> Readiness:
        details = {"service": f"{manifests.service_host(instance)}:{manifests.PORT}"}
        try:
            unready = await self._unready(instance, details)
        except NotFoundError as error:
            unready = f"not provisioned yet ({error.reason})"
        except ApiError as error:
            unready = f"unreadable: {error}"
        if unready:
            return Readiness(False, unready, details)
        return Readiness(True, "kube-apiserver ready, reachable from outside", details)

    async def _unready(self, instance: InstanceRef, details: dict[str, str]) -> str | None:
        """Why the cluster cannot be handed out yet, or None."""
        name = manifests.object_name(instance)
        statefulset = await self.client.get(self._path("StatefulSet", instance, name))
        if int(statefulset.get("status", {}).get("readyReplicas", 0)) < 1:
            return "kube-apiserver not ready"
        endpoint = await self._endpoint(instance)
        if isinstance(endpoint, str):
            return endpoint
        details["endpoint"] = f"{endpoint[0]}:{endpoint[1]}"
        secret = await self.client.get(
            self._path("Secret", instance, manifests.pki_secret_name(instance))
        )
        if manifests.CA_KEY not in secret.get("data", {}):
            return UNSIGNABLE
        ca = base64.b64decode(secret.get("data", {}).get("ca.crt", "")).decode()
        server_name = self.host or manifests.service_host(instance)
        if not await asyncio.to_thread(exposure.answers_through, *endpoint, ca, server_name):
            return "kube-apiserver not reachable from outside yet"
        return None

    async def kubeconfig(self, instance: InstanceRef) -> str:
        try:
            secret = await self.client.get(
                self._path("Secret", instance, manifests.pki_secret_name(instance))
            )
            endpoint = await self._endpoint(instance)
        except ApiError as error:
            raise BackendError(f"kubeconfig of {instance.name}: {error}") from error
        if isinstance(endpoint, str):
            raise BackendError(f"kubeconfig of {instance.name}: {endpoint}")
        data = secret.get("data", {})
        missing = {"admin.crt", "admin.key", "ca.crt"} - set(data)
        if missing:
            raise BackendError(f"kubeconfig of {instance.name}: its Secret lacks {sorted(missing)}")
        host, port = endpoint
        return kubeconfig(
            instance.name,
            exposure.server_url(host, port),
            manifests.ADMIN_USER,
            {"client-certificate-data": data["admin.crt"], "client-key-data": data["admin.key"]},
            ca_data=data["ca.crt"],
            server_name=None if host == self.host else manifests.service_host(instance),
        )

    async def lease_kubeconfig(self, instance: InstanceRef, admin: str, lease: LeaseRef) -> str:
        """Signed with the cluster's CA, whose key the PKI Secret keeps (unmounted)."""
        try:
            secret = await self.client.get(
                self._path("Secret", instance, manifests.pki_secret_name(instance))
            )
        except ApiError as error:
            raise BackendError(f"the CA of {instance.name}: {error}") from error
        data = secret.get("data", {})
        if manifests.CA_KEY not in data:
            raise BackendError(f"{instance.name}: {UNSIGNABLE}")
        return await lease_credentials.signed_by_lessor(
            admin, base64.b64decode(data["ca.crt"]), base64.b64decode(data[manifests.CA_KEY]), lease
        )

    async def teardown(self, instance: InstanceRef) -> None:
        for kind in _TEARDOWN:
            try:
                await delete_present(
                    self.client, self._path(kind, instance, self._name(kind, instance))
                )
            except ApiError as error:
                raise BackendError(f"deleting {kind} of {instance.name} failed: {error}") from error

    async def verify_teardown(self, instance: InstanceRef) -> TeardownReport:
        """Each object by name, and every pod by the instance's labels (a stray the StatefulSet
        made under another name): verified only when none is found."""
        evidence: list[str] = []
        remaining: list[str] = []
        for kind in _TEARDOWN:
            name = self._name(kind, instance)
            try:
                await self.client.get(self._path(kind, instance, name))
            except NotFoundError:
                evidence.append(f"{kind} {name} is gone")
                continue
            except ApiError as error:
                remaining.append(f"{kind} {name}: could not read ({error})")
                continue
            remaining.append(f"{kind} {name} still exists")
        selector = label_selector(instance)
        try:
            pods = await labelled_names(self.client, self._path("Pod", instance), instance)
        except ApiError as error:
            remaining.append(f"pods labelled {selector}: could not list ({error})")
        else:
            if pods:
                remaining.append(f"pods labelled {selector}: {', '.join(pods)}")
            else:
                evidence.append(f"no pod labelled {selector}")
        if remaining:
            return TeardownReport(verified=False, evidence=remaining)
        return TeardownReport(verified=True, evidence=evidence)
