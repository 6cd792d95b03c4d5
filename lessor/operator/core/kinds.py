"""The resource types the operator reads and writes, and the cache indexes its reconcilers look
up by. lessor's own are derived from their models in lessor.resources, never spelt again."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lessor.operator.runtime.client import ResourceType
from lessor.protocol.json_object import Json
from lessor.protocol.phases import LeasePhases
from lessor.resources.access_policy import AccessPolicy
from lessor.resources.base import GROUP, VERSION, Resource
from lessor.resources.cluster import ClusterInstance, ClusterLease, ClusterPool
from lessor.resources.diagnostics_bundle import DiagnosticsBundle
from lessor.resources.sandbox import SandboxExecution, SandboxLease, SandboxPool


def resource_type(model: type[Resource[Any, Any]]) -> ResourceType:
    return ResourceType(GROUP, VERSION, model.crd.plural, model.kind_name())


POOLS = resource_type(ClusterPool)
INSTANCES = resource_type(ClusterInstance)
LEASES = resource_type(ClusterLease)
DIAGNOSTICS_BUNDLES = resource_type(DiagnosticsBundle)
SANDBOX_POOLS = resource_type(SandboxPool)
SANDBOX_LEASES = resource_type(SandboxLease)
EXECUTIONS = resource_type(SandboxExecution)
ACCESS_POLICIES = resource_type(AccessPolicy)

SECRETS = ResourceType("", "v1", "secrets", "Secret")
PODS = ResourceType("", "v1", "pods", "Pod")
SERVICES = ResourceType("", "v1", "services", "Service")

# agent-sandbox (lessor.agentsandbox.compat says which versions)
EXTENSIONS = "extensions.agents.x-k8s.io"
SANDBOXES = ResourceType("agents.x-k8s.io", "v1beta1", "sandboxes", "Sandbox")
CLAIMS = ResourceType(EXTENSIONS, "v1beta1", "sandboxclaims", "SandboxClaim")
TEMPLATES = ResourceType(EXTENSIONS, "v1beta1", "sandboxtemplates", "SandboxTemplate")
WARM_POOLS = ResourceType(EXTENSIONS, "v1beta1", "sandboxwarmpools", "SandboxWarmPool")

# What the shared caches hold of a kind, where not every object: the ClusterLeases that are not
# finished. A day of ended leases (100,000 CI jobs' worth) is read by no reconciler; keeping it
# cost memory and a list of all of it at every start (issue 45).
# lessor.operator.cluster.lease_retention deletes them when their retention ends.
CACHED: dict[ResourceType, str] = {LEASES: ClusterLease.phases.unfinished_selector()}

BY_POOL = "by-pool"
QUEUE_OF_POOL = "queue-of-pool"  # a lease in its pool's queue (LeasePhases.queued)
BY_CLAIM = "by-claim"
INSTANCE_FINALIZER = "lessor.dev/teardown"


# The index functions read the raw object: the store calls them on every watch event, before
# any model is asked for, and each reads one required field.


def pool_key(obj: Json) -> str:
    """`namespace/pool` of an instance or lease, the key of the pool that owns it."""
    return f"{obj['metadata'].get('namespace')}/{obj.get('spec', {}).get('pool')}"


def index_by_pool(obj: Json) -> Iterable[str]:
    return [pool_key(obj)]


def index_queue_of_pool(obj: Json) -> Iterable[str]:
    """The pool whose queue the lease is in, if it is: a pool's pass and a ready instance read
    only the queue, not every lease of the pool (issue 48: validating them all made the drain
    of 10,000 leases about 10 s longer, bench/README.md)."""
    return [pool_key(obj)] if queued(obj) else []


def queued(lease: Json) -> bool:
    """LeasePhases.queued of a raw lease, for what reads every lease at every event or scrape."""
    return LeasePhases.queued(
        lease.get("status", {}).get("phase"),
        deleting=bool(lease["metadata"].get("deletionTimestamp")),
        cancelled=bool(lease.get("spec", {}).get("cancelled")),
    )


def index_by_claim(obj: Json) -> Iterable[str]:
    claim = obj.get("spec", {}).get("claimRef")
    return [claim["uid"]] if claim else []
