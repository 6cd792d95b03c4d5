"""The Secret `lease-<name>-kubeconfig`, owned by its lease: the kubeconfig GET /v1/leases/:id
serves the lease's owner, holding the lease's own credential
(lessor.operator.backends.lease_credentials), never the cluster's admin one.

Its annotation records the expiry that credential was issued for. A bind replayed after a crash
binds at a later instant, so with a later expiry, and an extension moves the expiry: each then
replaces the Secret's kubeconfig with one issued for the new expiry (a stale one would die before
its lease). A write that finds the credential of its expiry there already changes nothing, and a
replacement carries the resourceVersion it read, so of two writers one gets a 409 and tries again.
The lease reconciler writes the Secret before the lease's status, so an expiry readable in the
status is always one the Secret's credential lasts until.
"""

from __future__ import annotations

import base64
import datetime

from lessor.operator.core.kinds import SECRETS
from lessor.operator.core.writes import owner_reference
from lessor.operator.runtime.client import ConflictError, KubeClient, NotFoundError
from lessor.protocol.json_object import Json
from lessor.protocol.timestamps import timestamp
from lessor.resources import labels as keys

EXPIRES = "lessor.dev/credential-expires-at"


def secret_name(lease_name: str) -> str:
    return f"lease-{lease_name}-kubeconfig"


def _manifest(lease: Json, kubeconfig: str, expires_at: datetime.datetime) -> Json:
    name = lease["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secret_name(name),
            "namespace": lease["metadata"]["namespace"],
            "labels": {keys.LEASE: name},
            "annotations": {EXPIRES: timestamp(expires_at)},
            "ownerReferences": [owner_reference(lease)],
        },
        "type": "Opaque",
        "data": {"kubeconfig": base64.b64encode(kubeconfig.encode()).decode()},
    }


def issued_until(secret: Json | None) -> str | None:
    """The expiry (as `timestamp` spells it) the Secret's credential was issued for."""
    return ((secret or {}).get("metadata", {}).get("annotations") or {}).get(EXPIRES)


async def read(client: KubeClient, lease: Json) -> Json | None:
    path = SECRETS.path(lease["metadata"]["namespace"], secret_name(lease["metadata"]["name"]))
    try:
        return await client.get(path)
    except NotFoundError:
        return None


async def publish(
    client: KubeClient,
    lease: Json,
    kubeconfig: str,
    expires_at: datetime.datetime,
    *,
    current: Json | None = None,
) -> None:
    """Hold `kubeconfig`, issued until `expires_at`. `current`: the Secret as the caller read it
    (an extension does); without it, the Secret is created, and read only when it exists (at a
    bind it is missing but after a crash, and a read first cost a round trip on the path a
    waiting client measures)."""
    manifest = _manifest(lease, kubeconfig, expires_at)
    namespace = lease["metadata"]["namespace"]
    if current is None:
        try:
            await client.create(SECRETS.path(namespace), manifest)
            return
        except ConflictError:
            current = await read(client, lease)
    if current is None:  # deleted since the 409: the retry creates it
        name = secret_name(lease["metadata"]["name"])
        raise ConflictError(409, "Conflict", f"Secret {name} was deleted while written")
    if issued_until(current) == timestamp(expires_at):
        return
    manifest["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    await client.replace(SECRETS.path(namespace, manifest["metadata"]["name"]), manifest)
