"""A namespace of the host cluster for each cluster that runs pods of its own (k3s, vcluster).

Why a namespace each: those clusters' pods need more than Pod Security `restricted` (k3s runs a
kubelet; a vcluster's tenants' pods are synced into its host namespace, whatever they ask for),
while lessor-system, where lessor itself runs, must stay `restricted`. A namespace per cluster
also makes teardown whole and its verification simple: deleting the namespace deletes every object
in it, and the namespace is gone only once they all are.

Rights, least first (manifests/instance-namespaces): the operator may create namespaces, and
delete, read and list them (the list for lessor.operator.cluster.namespace_orphans); it may create
RoleBindings and `bind` the one ClusterRole `lessor-instance-objects`. It binds that ClusterRole
to itself in each namespace it made (nothing else), so its rights over objects hold there and in
no other namespace. The
ValidatingAdmissionPolicy shipped beside it confines the operator's namespace deletions and
RoleBindings to namespaces labelled as instance namespaces, so the cluster-wide verbs cannot
reach kube-system or a tenant's namespace.

A namespace cannot be owned by a namespaced ClusterInstance (owner references do not cross
scopes), and its objects must not name one either: the garbage collector would look for the owner
in the object's own namespace, not find it, and delete the object. The instance's finalizer is
what removes the namespace.
"""

from __future__ import annotations

import asyncio

from lessor.operator.backends.base import BackendError, InstanceRef, TeardownReport
from lessor.operator.backends.owned import labels
from lessor.operator.core.writes import create_missing
from lessor.operator.runtime.client import ApiError, ConflictError, KubeClient, NotFoundError
from lessor.resources import labels as keys

NAMESPACE_LABEL = "lessor.dev/instance-namespace"
OBJECTS_ROLE = "lessor-instance-objects"
BINDING = "lessor-operator"
POD_SECURITY = "pod-security.kubernetes.io/"
BINDING_WAIT_TRIES = 50


def namespace_name(instance: InstanceRef) -> str:
    """`lessor-<instance>-<uid prefix>`, a DNS label: unique across pool namespaces and reuse."""
    return f"lessor-{instance.name[:46]}-{instance.uid[:8]}"


def namespace_manifest(instance: InstanceRef, pod_security: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": namespace_name(instance),
            "labels": {
                **labels(instance),
                NAMESPACE_LABEL: "true",
                f"{POD_SECURITY}enforce": pod_security,
                f"{POD_SECURITY}warn": pod_security,
            },
            "annotations": {keys.INSTANCE: f"{instance.namespace}/{instance.name}"},
        },
    }


class InstanceNamespaces:
    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self._username: str | None = None

    async def _operator(self) -> str:
        """The operator's own user name, as the API server authenticates it (a ServiceAccount's
        `system:serviceaccount:<ns>:<name>` in a pod): the subject of the RoleBindings it makes
        for itself."""
        if self._username is None:
            review = await self.client.create(
                "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
            )
            self._username = str(review["status"]["userInfo"]["username"])
        return self._username

    async def ensure(self, instance: InstanceRef, pod_security: str) -> str:
        """The instance's namespace, made (with the operator's RoleBinding in it) if missing."""
        name = namespace_name(instance)
        try:
            await create_missing(
                self.client, "/api/v1/namespaces", namespace_manifest(instance, pod_security)
            )
            existing = await self.client.get(f"/api/v1/namespaces/{name}")
        except ApiError as error:
            raise BackendError(
                f"creating namespace {name} failed: {error} (the operator needs "
                "manifests/instance-namespaces)"
            ) from error
        owner = existing["metadata"].get("labels", {}).get(keys.INSTANCE_UID)
        if owner != instance.uid:
            raise BackendError(f"namespace {name} exists and is not this instance's")
        if existing["metadata"].get("deletionTimestamp"):
            raise BackendError(f"namespace {name} is being deleted")
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": BINDING, "namespace": name, "labels": labels(instance)},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": OBJECTS_ROLE,
            },
            "subjects": [
                {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "User",
                    "name": await self._operator(),
                }
            ],
        }
        collection = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{name}/rolebindings"
        try:
            # Readable only once it exists: it is what grants the read (a 403 says "not yet").
            await self.client.get(f"{collection}/{BINDING}")
        except ApiError as missing:
            if missing.status not in (403, 404):
                raise BackendError(f"reading {BINDING} in {name}: {missing}") from missing
            try:
                await self.client.create(collection, binding)
            except ConflictError:
                pass
            except ApiError as error:
                raise BackendError(f"binding {OBJECTS_ROLE} in {name} failed: {error}") from error
            await self._until_effective(f"{collection}/{BINDING}")
        return name

    async def _until_effective(self, binding: str) -> None:
        """A new RoleBinding reaches the API server's authorizer a moment after it is stored;
        the objects that follow need it. Reading the binding needs it too: wait for that (a
        few seconds at most, else the reconcile is retried)."""
        for _ in range(BINDING_WAIT_TRIES):
            try:
                await self.client.get(binding)
            except ApiError as error:
                if error.status != 403:
                    raise BackendError(f"reading {binding}: {error}") from error
                await asyncio.sleep(0.2)
                continue
            return
        raise BackendError(f"{binding} does not take effect yet")

    async def delete(self, instance: InstanceRef) -> None:
        """Delete the namespace, named and fenced by its uid (a namespace made under the same
        name by someone else in between is never deleted); a missing one is not an error."""
        name = namespace_name(instance)
        try:
            namespace = await self.client.get(f"/api/v1/namespaces/{name}")
            if namespace["metadata"].get("labels", {}).get(keys.INSTANCE_UID) != instance.uid:
                raise BackendError(f"namespace {name} is not this instance's; not deleting it")
            if namespace["metadata"].get("deletionTimestamp"):
                return  # being deleted: deleting it again would be a write for nothing
            await self.client.delete(
                f"/api/v1/namespaces/{name}", preconditions={"uid": namespace["metadata"]["uid"]}
            )
        except NotFoundError:
            return
        except ApiError as error:
            raise BackendError(f"deleting namespace {name} failed: {error}") from error

    async def verify(self, instance: InstanceRef) -> TeardownReport:
        """Verified when the namespace is gone: the namespace controller removes it only after
        every object in it (pods included) is deleted."""
        name = namespace_name(instance)
        try:
            namespace = await self.client.get(f"/api/v1/namespaces/{name}")
        except NotFoundError:
            return TeardownReport(
                verified=True, evidence=[f"namespace {name} and everything in it are gone"]
            )
        except ApiError as error:
            return TeardownReport(verified=False, evidence=[f"namespace {name}: {error}"])
        status = namespace.get("status", {})
        found = [
            f"{c.get('type')}: {c.get('message', '')}"
            for c in status.get("conditions", [])
            if c.get("status") == "True"
        ]
        return TeardownReport(
            verified=False,
            evidence=[f"namespace {name} still exists ({status.get('phase', '?')})", *found],
        )
