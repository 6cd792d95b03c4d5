"""The resource types the operator watches, and the cache indexes its reconcilers look up by."""

from __future__ import annotations

from collections.abc import Iterable

from lessor.operator.runtime.client import JSON, ResourceType
from lessor.resources.base import GROUP, VERSION

POOLS = ResourceType(GROUP, VERSION, "clusterpools", "ClusterPool")
INSTANCES = ResourceType(GROUP, VERSION, "clusterinstances", "ClusterInstance")
LEASES = ResourceType(GROUP, VERSION, "clusterleases", "ClusterLease")
SECRETS = ResourceType("", "v1", "secrets", "Secret")

BY_POOL = "by-pool"
BY_CLAIM = "by-claim"
POOL_LABEL = "lessor.dev/pool"
INSTANCE_FINALIZER = "lessor.dev/teardown"
LEASE_FINALIZER = "lessor.dev/release"


def pool_key(obj: JSON) -> str:
    """`namespace/pool` of an instance or lease, the key of the pool that owns it."""
    return f"{obj['metadata'].get('namespace')}/{obj.get('spec', {}).get('pool')}"


def index_by_pool(obj: JSON) -> Iterable[str]:
    return [pool_key(obj)]


def index_by_claim(obj: JSON) -> Iterable[str]:
    claim = obj.get("spec", {}).get("claimRef")
    return [claim["uid"]] if claim else []
