"""The ClusterPool reconciler: keeps `warmTarget` instances ready and reports the pool's counts.

Created instances take a moment to appear in the cache, and a reconcile in that moment would see
too few and create more. So, like controller-runtime's "expectations", the names this process
created are counted as creating until the cache shows them (or a minute passes).
"""

from __future__ import annotations

import logging
import time

from lessor.operator.context import Context
from lessor.operator.kinds import (
    BY_POOL,
    INSTANCES,
    LEASES,
    POOL_LABEL,
    POOLS,
    index_by_pool,
    pool_key,
)
from lessor.operator.runtime.client import KubeClient
from lessor.operator.runtime.controller import Controller, Result
from lessor.operator.runtime.events import EventRecorder
from lessor.operator.runtime.informer import Informer
from lessor.operator.writes import delete_fenced, owner_reference, write_status
from lessor.protocol.json_object import Json
from lessor.resources.cluster import ClusterLease, ClusterPool, ClusterPoolStatus

log = logging.getLogger(__name__)

MAX_CREATES_PER_PASS = 5
EXPECTATION_TIMEOUT = 60.0


def count_instances(instances: list[Json]) -> dict[str, int]:
    counts = dict.fromkeys(
        ("ready", "leased", "creating", "recycling", "unhealthy", "quarantined"), 0
    )
    for instance in instances:
        phase = instance.get("status", {}).get("phase")
        if phase == "Quarantined":
            counts["quarantined"] += 1
        elif instance["metadata"].get("deletionTimestamp") or phase == "Recycling":
            counts["recycling"] += 1
        elif instance.get("spec", {}).get("claimRef"):
            counts["leased"] += 1
        elif phase == "Ready":
            counts["ready"] += 1
        elif phase == "Unhealthy":
            counts["unhealthy"] += 1
        else:
            counts["creating"] += 1
    return counts


def setup(context: Context) -> Controller:
    """A pool is reconciled when it changes and when any of its instances or leases does (its
    counts and queue depth are theirs)."""
    pools = context.informer(POOLS)
    instances = context.informer(INSTANCES, {BY_POOL: index_by_pool})
    leases = context.informer(LEASES, {BY_POOL: index_by_pool})
    reconciler = PoolReconciler(
        context.client, pools=pools, instances=instances, leases=leases, events=context.events
    )
    return (
        context.controller("clusterpool", reconciler.reconcile)
        .watch(pools)
        .watch(instances, lambda instance: [pool_key(instance)])
        .watch(leases, lambda lease: [pool_key(lease)])
    )


class PoolReconciler:
    def __init__(
        self,
        client: KubeClient,
        *,
        pools: Informer,
        instances: Informer,
        leases: Informer,
        events: EventRecorder,
    ) -> None:
        self.client = client
        self.pools = pools
        self.instances = instances
        self.leases = leases
        self.events = events
        self._expected: dict[str, dict[str, float]] = {}

    def _pending_expectations(self, key: str, seen: set[str]) -> int:
        expected = self._expected.get(key, {})
        now = time.monotonic()
        for name in [
            n for n, at in expected.items() if n in seen or now - at > EXPECTATION_TIMEOUT
        ]:
            del expected[name]
        return len(expected)

    async def reconcile(self, key: str) -> Result:
        obj = self.pools.store.get(key)
        if obj is None:
            self._expected.pop(key, None)
            return Result()
        pool = ClusterPool.model_validate(obj)
        instances = self.instances.store.by_index(BY_POOL, key)
        counts = count_instances(instances)
        counts["creating"] += self._pending_expectations(
            key, {i["metadata"]["name"] for i in instances}
        )
        for instance in instances:
            # An unhealthy cluster is replaced, not repaired: tear it down, the deficit refills.
            # Never under a lease: its lease reports it, and it goes when the lease ends.
            phase = instance.get("status", {}).get("phase")
            if (
                phase == "Unhealthy"
                and not instance["spec"].get("claimRef")
                and not instance["metadata"].get("deletionTimestamp")
            ):
                await delete_fenced(self.client, INSTANCES, instance)
        pending = [
            lease
            for lease in self.leases.store.by_index(BY_POOL, key)
            if ClusterLease.phases.waiting(lease.get("status", {}).get("phase"))
        ]
        deficit = pool.spec.warm_target - counts["ready"] - counts["creating"]
        if pool.spec.max_instances is not None:
            deficit = min(deficit, pool.spec.max_instances - sum(counts.values()))
        for _ in range(max(0, min(deficit, MAX_CREATES_PER_PASS))):
            created = await self._create_instance(obj, pool)
            self._expected.setdefault(key, {})[created] = time.monotonic()
            counts["creating"] += 1
        degraded = counts["unhealthy"] or counts["quarantined"]
        serving = counts["ready"] + counts["leased"] + counts["creating"]
        status = (pool.status or ClusterPoolStatus()).model_copy(
            update={
                **counts,
                "queue_depth": len(pending),
                "observed_generation": pool.metadata.generation,
                "phase": (
                    "Unavailable"
                    if not serving and pool.spec.warm_target
                    else ("Degraded" if degraded else "Healthy")
                ),
            }
        )
        await write_status(self.client, POOLS, obj, status)
        more = deficit > MAX_CREATES_PER_PASS
        return Result(requeue_after=1.0 if more else None)

    async def _create_instance(self, pool_obj: Json, pool: ClusterPool) -> str:
        name = pool.metadata.name or ""
        namespace = pool.metadata.namespace or ""
        body = {
            "apiVersion": INSTANCES.api_version,
            "kind": INSTANCES.kind,
            "metadata": {
                "generateName": f"{name}-",
                "namespace": namespace,
                "labels": {POOL_LABEL: name},
                "ownerReferences": [owner_reference(pool_obj)],
            },
            "spec": {
                "pool": name,
                "backend": pool.spec.backend.model_dump(by_alias=True, exclude_none=True),
            },
        }
        created = await self.client.create(INSTANCES.path(namespace), body)
        instance_name: str = created["metadata"]["name"]
        log.info("pool %s/%s: created instance %s", namespace, name, instance_name)
        return instance_name
