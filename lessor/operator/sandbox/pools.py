"""The SandboxPool reconciler: each SandboxPool becomes an agent-sandbox SandboxTemplate (the
administrator's pod template) and a SandboxWarmPool of `warm` sandboxes made from it, in the
sandbox namespace; the pool's status reports the warm pool's ready count and references both
objects by uid. The pool's finalizer removes both when the pool is deleted (an owner reference
cannot cross namespaces; lessor.operator.core.ownership), each fenced by its uid.

Nothing is written to agent-sandbox's APIs until the read-only compatibility check passes (the
same check the API server runs; lessor.agentsandbox.compat). While it fails, the pool is
`Unavailable` with the reason in its `AgentSandboxCompatible` condition, and it is rechecked
every ten seconds (every minute once it passes). Writes are server-side applies under the field
manager `lessor`: idempotent, so a reconcile replayed after a crash converges without reading
first.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from lessor.operator.core import pool_gauges
from lessor.operator.core.compatibility import RECHECK_FAILING_SECONDS, CompatibilityCache
from lessor.operator.core.conditions import with_condition
from lessor.operator.core.kinds import SANDBOX_POOLS, TEMPLATES, WARM_POOLS
from lessor.operator.core.ownership import owned_by, owned_metadata
from lessor.operator.core.pool_gauges import PoolRow
from lessor.operator.core.typed import Cached, Typed
from lessor.operator.core.writes import (
    add_finalizer,
    delete_fenced,
    remove_finalizer,
    write_status,
)
from lessor.operator.runtime.client import KubeClient, NotFoundError, ResourceType
from lessor.operator.runtime.controller import Controller, Result
from lessor.operator.runtime.informer import Informer
from lessor.operator.wiring.context import Context
from lessor.protocol.json_object import Json
from lessor.resources import labels
from lessor.resources.base import Condition, ObjectRef
from lessor.resources.sandbox import (
    SandboxLease,
    SandboxLeaseStatus,
    SandboxPool,
    SandboxPoolStatus,
)

log = logging.getLogger(__name__)

FINALIZER = "lessor.dev/sandbox-pool-cleanup"
REFRESH_SECONDS = 10.0


def child_name(pool: str) -> str:
    return f"lessor-{pool}"[:63]


def _compatible(pool: SandboxPool, ok: bool, reason: str) -> list[Condition]:
    """The pool's AgentSandboxCompatible condition set, the verdict's reason its message."""
    return with_condition(
        pool.status.conditions if pool.status else [],
        "AgentSandboxCompatible",
        ok,
        "Compatible" if ok else "Incompatible",
        reason,
        generation=pool.metadata.generation,
    )


BY_SANDBOX_POOL = "by-sandbox-pool"


def index_by_sandbox_pool(obj: Json) -> list[str]:
    """`namespace/pool` of a SandboxLease: read raw, as every index function is (it runs on each
    watch event, before any model is asked for; the key is a required string)."""
    return [f"{obj['metadata'].get('namespace')}/{obj.get('spec', {}).get('pool')}"]


def _held(key: str, leases: Typed[SandboxLease]) -> list[Cached[SandboxLease]]:
    return [
        lease for lease in leases.by_index(BY_SANDBOX_POOL, key) if not lease.model.spec.cancelled
    ]


LeaseState = tuple[str | None, bool]  # its phase, whether a pod is recorded


@dataclass
class LeaseCounts:
    """What a pool's leases hold, by state: leased (placed or being placed), recycling (being
    cleaned up), unhealthy (Ready, but the pod is being replaced: no pod recorded), quarantined
    (cleanup uncertain: withheld)."""

    leased: int = 0
    recycling: int = 0
    unhealthy: int = 0
    quarantined: int = 0

    @classmethod
    def of(cls, states: Iterable[LeaseState]) -> LeaseCounts:
        counts = cls()
        for phase, has_pod in states:
            counts.leased += phase in SandboxLease.phases.placed
            counts.recycling += phase == "Releasing"
            counts.unhealthy += phase == SandboxLease.phases.usable and not has_pod
            counts.quarantined += phase == "Quarantined"
        return counts


def _states(held: list[Cached[SandboxLease]]) -> list[LeaseState]:
    statuses = [lease.model.status or SandboxLeaseStatus() for lease in held]
    return [(status.phase, status.pod is not None) for status in statuses]


def gauge_row(pool: Cached[SandboxPool], key: str, leases: Informer) -> PoolRow:
    """The pool's gauges (lessor.operator.core.pool_gauges): what its leases hold, from the lease
    cache, read raw (pool_gauges.waiting_since says why); ready and creating as the pool's status
    last said (agent-sandbox's warm pool counts, refreshed every REFRESH_SECONDS: they are not
    cached here)."""
    held = [
        lease
        for lease in leases.store.by_index(BY_SANDBOX_POOL, key)
        if not lease.get("spec", {}).get("cancelled")
    ]
    states = [
        ((lease.get("status") or {}).get("phase"), bool((lease.get("status") or {}).get("pod")))
        for lease in held
    ]
    status = pool.model.status or SandboxPoolStatus()
    return PoolRow(
        namespace=pool.model.metadata.namespace or "",
        pool=pool.name,
        warm_target=pool.model.spec.warm,
        instances={
            "ready": status.ready,
            "creating": status.creating,
            **dataclasses.asdict(LeaseCounts.of(states)),
        },
        waiting=pool_gauges.waiting_since(held),
    )


def setup(context: Context) -> Controller:
    """A pool is reconciled when it changes and when any of its leases does (its counts)."""
    pools = context.cache(SandboxPool)
    leases = context.cache(SandboxLease, {BY_SANDBOX_POOL: index_by_sandbox_pool})
    reconciler = SandboxPoolReconciler(
        context.client,
        pools=pools,
        leases=leases,
        compatibility=context.compatibility,
        sandboxes=context.settings.sandbox_namespace,
    )
    pool_gauges.GAUGES.watch(
        "sandbox",
        pool_gauges.by_pool(pools, lambda pool, key: gauge_row(pool, key, leases.informer)),
        lambda: context.manager.leading,
    )
    return (
        context.controller(SandboxPool)
        .for_(pools, reconciler.reconcile)
        .watch(leases.informer, index_by_sandbox_pool)
    )


class SandboxPoolReconciler:
    def __init__(
        self,
        client: KubeClient,
        *,
        pools: Typed[SandboxPool],
        leases: Typed[SandboxLease],
        compatibility: CompatibilityCache,
        sandboxes: str,
    ) -> None:
        self.client = client
        self.pools = pools
        self.leases = leases
        self.compatibility = compatibility
        self.sandboxes = sandboxes

    def _count(self, key: str, status: SandboxPoolStatus) -> None:
        """The pool's leases, counted into its status."""
        held = _held(key, self.leases)
        counts = LeaseCounts.of(_states(held))
        status.leased, status.recycling = counts.leased, counts.recycling
        status.unhealthy, status.quarantined = counts.unhealthy, counts.quarantined
        status.queue_depth = len(pool_gauges.waiting_leases(held))

    async def reconcile(self, key: str, cached: Cached[SandboxPool] | None) -> Result:
        if cached is None:
            return Result()
        if cached.deleting:
            return await self._remove_children(cached.raw)
        obj = await add_finalizer(self.client, SANDBOX_POOLS, cached.raw, FINALIZER)
        pool = self.pools.decode(obj).model
        status = (pool.status or SandboxPoolStatus()).model_copy(deep=True)
        status.observed_generation = pool.metadata.generation
        self._count(key, status)
        verdict = await self.compatibility.verdict()
        if not verdict.ok:
            status.phase = "Unavailable"
            status.conditions = _compatible(pool, False, verdict.reason)
            await write_status(self.client, SANDBOX_POOLS, obj, status)
            return Result(requeue_after=RECHECK_FAILING_SECONDS)
        template, warm_pool = await asyncio.gather(
            self._apply(TEMPLATES, obj, {"podTemplate": pool.spec.template}),
            self._apply(WARM_POOLS, obj, {
                "replicas": pool.spec.warm,
                "sandboxTemplateRef": {"name": child_name(obj["metadata"]["name"])},
            }),
        )  # fmt: skip
        # agent-sandbox's SandboxWarmPool: a foreign kind, read as kube-apiserver answered it
        made = warm_pool.get("status", {})
        ready = int(made.get("readyReplicas") or 0)
        status.phase = "Healthy" if ready >= pool.spec.warm else "Degraded"
        status.ready, status.creating = ready, max(0, int(made.get("replicas") or 0) - ready)
        status.template_ref, status.warm_pool_ref = _reference(template), _reference(warm_pool)
        status.conditions = _compatible(pool, True, verdict.reason)
        await write_status(self.client, SANDBOX_POOLS, obj, status)
        return Result(requeue_after=REFRESH_SECONDS)

    async def _remove_children(self, obj: Json) -> Result:
        """Delete the pool's template and warm pool (agent-sandbox removes the warm sandboxes),
        then let the pool go. Only children this pool made are deleted, by uid."""
        name = child_name(obj["metadata"]["name"])
        for kind in (WARM_POOLS, TEMPLATES):
            try:
                child = await self.client.get(kind.path(self.sandboxes, name))
            except NotFoundError:
                continue
            if owned_by(child, obj) and not child["metadata"].get("deletionTimestamp"):
                await delete_fenced(self.client, kind, child)
        await remove_finalizer(self.client, SANDBOX_POOLS, obj, FINALIZER)
        return Result()

    async def _apply(self, kind: ResourceType, owner: Json, spec: Json) -> Json:
        namespace, pool = self.sandboxes, owner["metadata"]["name"]
        name = child_name(pool)
        body = {
            "apiVersion": kind.api_version,
            "kind": kind.kind,
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {labels.SANDBOX_POOL: pool},
                **owned_metadata(owner, namespace),
            },
            "spec": spec,
        }
        return await self.client.request(
            "PATCH",
            kind.path(namespace, name),
            body=body,
            params={"fieldManager": "lessor", "force": "true"},
            content_type="application/apply-patch+yaml",
        )


def _reference(obj: Json) -> ObjectRef:
    metadata = obj["metadata"]
    return ObjectRef(name=metadata["name"], uid=metadata["uid"], namespace=metadata["namespace"])
