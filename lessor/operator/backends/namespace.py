"""A backend whose "cluster" is a namespace of the host cluster: for tests and benchmarks only.

An instance costs one Namespace, a ServiceAccount with its token Secret and a RoleBinding to the
`admin` ClusterRole, so hundreds fit on a laptop where `local` (300 MiB each) or `k3s` clusters
would not; it is what the burst benchmark binds 200 leases against. The kubeconfig is real (the
host's API server, the token of that ServiceAccount, the namespace as context) but a namespace is
no isolation boundary, so the operator serves this backend only with `--test-backends`.
"""

from __future__ import annotations

import base64
from pathlib import Path

from lessor.operator.backends.base import (
    BackendError,
    InstanceRef,
    LeaseRef,
    Readiness,
    TeardownReport,
)
from lessor.operator.core.writes import create_missing, delete_present
from lessor.operator.runtime.client import ApiError, KubeClient, NotFoundError
from lessor.protocol.kubeconfig import kubeconfig
from lessor.resources import labels as keys

ACCOUNT = "tenant"
TOKEN_SECRET = "tenant-token"  # noqa: S105 - a Secret's name
NAMESPACE_DISABLED = (
    "the namespace backend is for tests: this operator serves it only with --test-backends"
)


def namespace_of(instance: InstanceRef) -> str:
    return f"lessor-ns-{instance.name}"[:63].rstrip("-")


class NamespaceBackend:
    def __init__(self, client: KubeClient, enabled: bool) -> None:
        self.client = client
        self.enabled = enabled

    def _objects(self, instance: InstanceRef) -> list[tuple[str, dict[str, object]]]:
        namespace = namespace_of(instance)
        labels = {keys.INSTANCE_UID: instance.uid}
        return [
            (
                "/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": namespace, "labels": labels}},
            ),
            (
                f"/api/v1/namespaces/{namespace}/serviceaccounts",
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": ACCOUNT}},
            ),
            (
                f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "RoleBinding",
                    "metadata": {"name": f"{ACCOUNT}-admin"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                "name": "admin"},
                    "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT,
                                  "namespace": namespace}],
                },
            ),
            (
                f"/api/v1/namespaces/{namespace}/secrets",
                {"apiVersion": "v1", "kind": "Secret",
                 "type": "kubernetes.io/service-account-token",
                 "metadata": {"name": TOKEN_SECRET,
                              "annotations": {"kubernetes.io/service-account.name": ACCOUNT}}},
            ),
        ]  # fmt: skip

    async def provision(self, instance: InstanceRef) -> None:
        if not self.enabled:
            raise BackendError(NAMESPACE_DISABLED)
        for path, body in self._objects(instance):
            try:
                await create_missing(self.client, path, body)  # a replay creates what is missing
            except ApiError as error:
                raise BackendError(f"creating {body['kind']} failed: {error}") from error

    async def readiness(self, instance: InstanceRef) -> Readiness:
        namespace = namespace_of(instance)
        details = {"namespace": namespace}
        try:
            found = await self.client.get(f"/api/v1/namespaces/{namespace}")
            await self.client.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/{ACCOUNT}")
            await self.client.get(
                f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings/"
                f"{ACCOUNT}-admin"
            )
        except ApiError as error:
            return Readiness(False, f"not provisioned yet ({error.reason})", details)
        if found.get("status", {}).get("phase") != "Active":
            return Readiness(False, "namespace not Active", details)
        try:
            if await self._token(namespace) is None:
                return Readiness(False, "token not issued yet", details)
        except BackendError as error:
            return Readiness(False, str(error), details)
        return Readiness(True, "namespace ready", details)

    async def _token(self, namespace: str) -> str | None:
        """The ServiceAccount's token, from the Secret the token controller fills in: a read,
        where a TokenRequest would be a write on every kubeconfig."""
        try:
            secret = await self.client.get(f"/api/v1/namespaces/{namespace}/secrets/{TOKEN_SECRET}")
        except ApiError as error:
            raise BackendError(f"token of {namespace}: {error}") from error
        encoded = secret.get("data", {}).get("token")
        return base64.b64decode(encoded).decode() if encoded else None

    async def kubeconfig(self, instance: InstanceRef) -> str:
        namespace = namespace_of(instance)
        token = await self._token(namespace)
        if token is None:
            raise BackendError(f"the token of {namespace} is not issued yet")
        auth = self.client.api.auth
        ca = None
        if auth.server_ca_file:
            ca = base64.b64encode(Path(auth.server_ca_file).read_bytes()).decode()
        credentials = {"token": token}
        return kubeconfig(
            namespace, auth.server, ACCOUNT, credentials, ca_data=ca, namespace=namespace
        )

    async def lease_kubeconfig(self, instance: InstanceRef, admin: str, lease: LeaseRef) -> str:
        """The namespace's own token, as published: a test backend, whose "cluster" is a
        namespace of the host and no boundary, has no credential of a lease's own."""
        return admin

    async def teardown(self, instance: InstanceRef) -> None:
        try:
            await delete_present(self.client, f"/api/v1/namespaces/{namespace_of(instance)}")
        except ApiError as error:
            raise BackendError(f"deleting namespace failed: {error}") from error

    async def verify_teardown(self, instance: InstanceRef) -> TeardownReport:
        namespace = namespace_of(instance)
        try:
            found = await self.client.get(f"/api/v1/namespaces/{namespace}")
        except NotFoundError:
            return TeardownReport(True, [f"namespace {namespace} is gone"])
        except ApiError as error:
            return TeardownReport(False, [f"namespace {namespace}: could not read ({error})"])
        phase = found.get("status", {}).get("phase", "?")
        return TeardownReport(False, [f"namespace {namespace} still exists ({phase})"])
