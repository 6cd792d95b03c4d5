"""The SandboxPool reconciler: each SandboxPool becomes an agent-sandbox SandboxTemplate (the
administrator's pod template) and a SandboxWarmPool of `warm` sandboxes made from it, in the
sandbox namespace; the pool's status reports the warm pool's ready count and references both
objects by uid. The pool's finalizer removes both when the pool is deleted (an owner reference
cannot cross namespaces; lessor.operator.ownership), each fenced by its uid.

Nothing is written to agent-sandbox's APIs until the read-only compatibility check passes (the
same check the API server runs; lessor.agentsandbox.compat). While it fails, the pool is
`Unavailable` with the reason in its `AgentSandboxCompatible` condition, and it is rechecked
every ten seconds (every minute once it passes). Writes are server-side applies under the field
manager `lessor`: idempotent, so a reconcile replayed after a crash converges without reading
first.
"""

from __future__ import annotations

import asyncio
import logging

from lessor.operator import pool_gauges
from lessor.operator.compatibility import RECHECK_FAILING_SECONDS, CompatibilityCache
from lessor.operator.conditions import with_condition
from lessor.operator.context import Context
from lessor.operator.kinds import SANDBOX_LEASES, SANDBOX_POOLS, TEMPLATES, WARM_POOLS
from lessor.operator.ownership import owned_by, owned_metadata
from lessor.operator.pool_gauges import PoolRow, waiting_leases
from lessor.operator.runtime.client import KubeClient, NotFoundError, ResourceType
from lessor.operator.runtime.controller import Controller, Result
from lessor.operator.runtime.informer import Informer
from lessor.operator.writes import (
    add_finalizer,
    delete_fenced,
    remove_finalizer,
    write_status,
)
from lessor.protocol.json_object import Json
from lessor.resources.base import Condition, ObjectRef
from lessor.resources.sandbox import SandboxLease, SandboxPool, SandboxPoolStatus

log = logging.getLogger(__name__)

POOL_LABEL = "lessor.dev/sandbox-pool"
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
    return [f"{obj['metadata'].get('namespace')}/{obj.get('spec', {}).get('pool')}"]


def _held(key: str, leases: Informer) -> list[Json]:
    return [
        lease
        for lease in leases.store.by_index(BY_SANDBOX_POOL, key)
        if not lease.get("spec", {}).get("cancelled")
    ]


def lease_counts(held: list[Json]) -> dict[str, int]:
    """What the pool's leases hold, by state: leased (placed or being placed), recycling (being
    cleaned up), unhealthy (Ready, but the pod is being replaced: no pod recorded), quarantined
    (cleanup uncertain: withheld)."""
    phases = [(lease.get("status") or {}).get("phase") for lease in held]
    return {
        "leased": sum(phase in ("Provisioning", "Ready") for phase in phases),
        "recycling": phases.count("Releasing"),
        "unhealthy": sum(
            (lease.get("status") or {}).get("phase") == "Ready"
            and not (lease.get("status") or {}).get("pod")
            for lease in held
        ),
        "quarantined": phases.count("Quarantined"),
    }


def gauge_row(pool: Json, key: str, leases: Informer) -> PoolRow:
    """The pool's gauges (lessor.operator.pool_gauges): what its leases hold, from the lease
    cache; ready and creating as the pool's status last said (agent-sandbox's warm pool counts,
    refreshed every REFRESH_SECONDS: they are not cached here)."""
    held = _held(key, leases)
    status = pool.get("status", {})
    return PoolRow(
        namespace=pool["metadata"].get("namespace", ""),
        pool=pool["metadata"]["name"],
        warm_target=int(pool.get("spec", {}).get("warm", 0)),
        instances={
            "ready": int(status.get("ready", 0)),
            "creating": int(status.get("creating", 0)),
            **lease_counts(held),
        },
        waiting=waiting_leases(held, SandboxLease.phases),
    )


def setup(context: Context) -> Controller:
    """A pool is reconciled when it changes and when any of its leases does (its counts)."""
    pools = context.informer(SANDBOX_POOLS)
    leases = context.informer(SANDBOX_LEASES, {BY_SANDBOX_POOL: index_by_sandbox_pool})
    reconciler = SandboxPoolReconciler(
        context.client,
        pools=pools,
        leases=leases,
        compatibility=context.compatibility,
        sandboxes=context.settings.sandbox_namespace,
    )
    pool_gauges.GAUGES.watch(
        "sandbox",
        pool_gauges.by_pool(pools, lambda pool, key: gauge_row(pool, key, leases)),
        lambda: context.manager.leading,
    )
    return (
        context.controller("sandboxpool", reconciler.reconcile)
        .watch(pools)
        .watch(leases, index_by_sandbox_pool)
    )


class SandboxPoolReconciler:
    def __init__(
        self,
        client: KubeClient,
        *,
        pools: Informer,
        leases: Informer,
        compatibility: CompatibilityCache,
        sandboxes: str,
    ) -> None:
        self.client = client
        self.pools = pools
        self.leases = leases
        self.compatibility = compatibility
        self.sandboxes = sandboxes

    def _counts(self, key: str) -> dict[str, int]:
        held = _held(key, self.leases)
        queue = len(waiting_leases(held, SandboxLease.phases))
        return {**lease_counts(held), "queue_depth": queue}

    async def reconcile(self, key: str) -> Result:
        obj = self.pools.store.get(key)
        if obj is None:
            return Result()
        if obj["metadata"].get("deletionTimestamp"):
            return await self._remove_children(obj)
        obj = await add_finalizer(self.client, SANDBOX_POOLS, obj, FINALIZER)
        pool = SandboxPool.model_validate(obj)
        status = (pool.status or SandboxPoolStatus()).model_copy(
            update={"observed_generation": pool.metadata.generation, **self._counts(key)}
        )
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
        made = warm_pool.get("status", {})
        ready = int(made.get("readyReplicas") or 0)
        status = status.model_copy(
            update={
                "phase": "Healthy" if ready >= pool.spec.warm else "Degraded",
                "ready": ready,
                "creating": max(0, int(made.get("replicas") or 0) - ready),
                "template_ref": _reference(template),
                "warm_pool_ref": _reference(warm_pool),
                "conditions": _compatible(pool, True, verdict.reason),
            }
        )
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
                "labels": {POOL_LABEL: pool},
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
