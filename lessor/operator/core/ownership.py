"""Which lessor object a child belongs to, also across namespaces.

Agent-sandbox objects (templates, warm pools, claims) may live in a namespace of their own (the
operator's `--sandbox-namespace`), apart from the pools and leases that own them, so that the API
server's pod rights reach only tenant pods. Kubernetes forbids owner references across
namespaces (the garbage collector treats one as pointing at nothing and deletes the child), so
the owner's uid is also kept in an annotation: it fences adoption (a stranger's object of the
same name is never taken for ours) wherever the child lives, and the owner's finalizer, not the
garbage collector, removes a child in another namespace.
"""

from __future__ import annotations

from typing import Any

from lessor.operator.core.writes import owner_reference
from lessor.protocol.json_object import Json

OWNER_UID = "lessor.dev/owner-uid"


def owned_metadata(owner: Json, namespace: str) -> dict[str, Any]:
    """The annotation, and the owner reference where Kubernetes allows one, for a child of
    `owner` made in `namespace`."""
    metadata: dict[str, Any] = {"annotations": {OWNER_UID: owner["metadata"]["uid"]}}
    if owner["metadata"].get("namespace") == namespace:
        metadata["ownerReferences"] = [owner_reference(owner)]
    return metadata


def owned_by(child: Json, owner: Json) -> bool:
    uid = owner["metadata"]["uid"]
    metadata = child["metadata"]
    if (metadata.get("annotations") or {}).get(OWNER_UID) == uid:
        return True
    return any(o.get("uid") == uid for o in metadata.get("ownerReferences") or [])
