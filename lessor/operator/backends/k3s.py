"""The `k3s` backend: a k3s server StatefulSet, Service and Secrets in the host cluster.

This is the production path: the clusters live in the host cluster itself, so the operator can run
anywhere and scale with the host. The operator creates the objects rendered by `k3s_manifests`,
watches the StatefulSet become ready and the sidecar publish the kubeconfig Secret, and at teardown
deletes everything by label and then verifies, by listing each kind again, that nothing remains.
"""

from __future__ import annotations

import base64
import secrets

from lessor.operator.backends import k3s_manifests as manifests
from lessor.operator.backends.base import BackendError, InstanceRef, Readiness, TeardownReport
from lessor.operator.backends.owned import label_selector, labelled_names
from lessor.operator.runtime.client import ApiError, ConflictError, KubeClient, NotFoundError

# (api path prefix, plural) of every kind a k3s cluster consists of, in teardown order.
_KINDS: tuple[tuple[str, str], ...] = (
    ("apis/apps/v1", "statefulsets"),
    ("api/v1", "services"),
    ("apis/rbac.authorization.k8s.io/v1", "rolebindings"),
    ("apis/rbac.authorization.k8s.io/v1", "roles"),
    ("api/v1", "serviceaccounts"),
    ("api/v1", "secrets"),
    ("api/v1", "persistentvolumeclaims"),
    ("api/v1", "pods"),
)
_PLURALS = {
    "Secret": "secrets",
    "ServiceAccount": "serviceaccounts",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "Service": "services",
    "StatefulSet": "statefulsets",
}


def _prefix(api_version: str) -> str:
    return "api/v1" if api_version == "v1" else f"apis/{api_version}"


class K3sBackend:
    def __init__(self, client: KubeClient, config: manifests.K3sConfig) -> None:
        self.client = client
        self.config = config

    async def provision(self, instance: InstanceRef) -> None:
        # Creates are atomic: on replay, objects that already exist answer 409 and are kept. The
        # token is only used if its Secret does not exist yet, so a replay never changes it.
        for manifest in manifests.render(instance, self.config, secrets.token_urlsafe(32)):
            plural = _PLURALS[manifest["kind"]]
            path = f"/{_prefix(manifest['apiVersion'])}/namespaces/{instance.namespace}/{plural}"
            try:
                await self.client.create(path, manifest)
            except ConflictError:
                continue
            except ApiError as error:
                name = manifest["metadata"]["name"]
                raise BackendError(f"creating {manifest['kind']} {name} failed: {error}") from error

    async def readiness(self, instance: InstanceRef) -> Readiness:
        ns = instance.namespace
        name = manifests.object_name(instance)
        details = {"service": f"{name}.{ns}.svc:6443"}
        try:
            statefulset = await self.client.get(
                f"/apis/apps/v1/namespaces/{ns}/statefulsets/{name}"
            )
        except NotFoundError:
            return Readiness(False, "StatefulSet missing", details)
        except ApiError as error:
            return Readiness(False, f"StatefulSet unreadable: {error}", details)
        if int(statefulset.get("status", {}).get("readyReplicas", 0)) < 1:
            return Readiness(False, "k3s server not ready", details)
        if await self._published_kubeconfig(instance) is None:
            return Readiness(False, "kubeconfig not published yet", details)
        return Readiness(True, "k3s server ready, kubeconfig published", details)

    async def _published_kubeconfig(self, instance: InstanceRef) -> str | None:
        secret_name = manifests.kubeconfig_secret_name(instance)
        try:
            secret = await self.client.get(
                f"/api/v1/namespaces/{instance.namespace}/secrets/{secret_name}"
            )
        except ApiError:
            return None
        encoded = secret.get("data", {}).get(manifests.KUBECONFIG_KEY)
        return base64.b64decode(encoded).decode() if encoded else None

    async def kubeconfig(self, instance: InstanceRef) -> str:
        kubeconfig = await self._published_kubeconfig(instance)
        if kubeconfig is None:
            raise BackendError(f"kubeconfig of {instance.name} is not published")
        return kubeconfig

    async def teardown(self, instance: InstanceRef) -> None:
        selector = {"labelSelector": label_selector(instance)}
        for prefix, plural in _KINDS:
            path = f"/{prefix}/namespaces/{instance.namespace}/{plural}"
            try:
                await self.client.request("DELETE", path, params=selector)
            except NotFoundError:
                continue
            except ApiError as error:
                raise BackendError(
                    f"deleting {plural} of {instance.name} failed: {error}"
                ) from error

    async def verify_teardown(self, instance: InstanceRef) -> TeardownReport:
        """List every kind by the instance's labels: verified only when each list is empty."""
        selector = label_selector(instance)
        evidence: list[str] = []
        remaining: list[str] = []
        for prefix, plural in _KINDS:
            path = f"/{prefix}/namespaces/{instance.namespace}/{plural}"
            try:
                names = await labelled_names(self.client, path, instance)
            except ApiError as error:
                remaining.append(f"{plural}: could not list ({error})")
                continue
            if names:
                remaining.append(f"{plural}: {', '.join(names)}")
            else:
                evidence.append(f"no {plural} labelled {selector}")
        if remaining:
            return TeardownReport(verified=False, evidence=remaining)
        return TeardownReport(verified=True, evidence=evidence)
