"""Pool gauges, computed at scrape time from the informer caches.

Why at scrape time: a gauge set by a reconciler is as stale as that pool's last reconcile, and
one a reconciler forgets to reset (a pool deleted, a leadership lost mid-update) stays wrong for
ever; counting the caches when Prometheus asks is never stale beyond the watch, cannot count
anything twice, and a deleted pool's series disappears with it. The collector runs in the
manager's event loop (its /metrics handler), the thread the caches are written in, so it reads
them consistently without a lock.

Only the leader exports them. Every replica keeps the same caches, but the leader's are the
ones its decisions are made from, and one exporter means `sum by (pool)` over all operator pods
is the pool's count rather than a multiple of it; a standby that wins the election has warm
caches, so the series carry on from the new leader at the next scrape. While no replica leads,
these series are absent and `lessor_leader` says why (the LessorOperatorLeaderAbsent alert).

Labels are bounded: `kind` (cluster, sandbox), the pool's namespace and name (pools are an
administrator's objects), `state` from a fixed set.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import REGISTRY, Collector

from lessor.operator.core.kinds import queued
from lessor.operator.core.typed import Cached, Typed
from lessor.protocol.json_object import Json
from lessor.protocol.phases import LeasePhases
from lessor.protocol.timestamps import utcnow
from lessor.resources.cluster import ClusterLease, ClusterPool
from lessor.resources.sandbox import SandboxLease, SandboxPool

L = TypeVar("L", ClusterLease, SandboxLease)
P = TypeVar("P", ClusterPool, SandboxPool)


@dataclass(frozen=True)
class PoolRow:
    """One pool's numbers at this instant."""

    namespace: str
    pool: str
    warm_target: int
    instances: dict[str, int]
    waiting: list[datetime.datetime | None]
    """When each lease in the pool's queue was created."""
    conditions: dict[str, str] = dataclasses.field(default_factory=dict)
    """The status of each of the pool's conditions, by type: True, False or Unknown."""


Source = Callable[[], Iterable[PoolRow]]


def waiting_leases(leases: Iterable[Cached[L]]) -> list[Cached[L]]:
    """Leases in their pool's queue: not yet given anything, not cancelled, not being deleted."""
    return [
        lease
        for lease in leases
        if LeasePhases.queued(
            lease.model.status.phase if lease.model.status else None,
            deleting=lease.deleting,
            cancelled=isinstance(lease.model, SandboxLease) and lease.model.spec.cancelled,
        )
    ]


def waiting_since(leases: Iterable[Json]) -> list[datetime.datetime | None]:
    """When each lease in the pool's queue (kinds.queued) was made. Read raw: a
    scrape reads every cached lease, and a model of each would be validated again at every
    scrape (the typed caches keep only a hot set, lessor.operator.core.typed): 10,000 leases at
    about 65 microseconds each is 0.65 s of CPU a scrape."""
    return [_created(lease) for lease in leases if queued(lease)]


def _created(lease: Json) -> datetime.datetime | None:
    stamp = lease["metadata"].get("creationTimestamp")
    return datetime.datetime.fromisoformat(stamp) if stamp else None


def _oldest_seconds(waiting: list[datetime.datetime | None], now: datetime.datetime) -> float:
    stamps = [stamp for stamp in waiting if stamp is not None]
    return max(0.0, (now - min(stamps)).total_seconds()) if stamps else 0.0


class PoolGauges(Collector):
    """The collector; each pool reconciler's setup gives it a source of rows for its kind."""

    def __init__(self) -> None:
        self._sources: dict[str, Source] = {}
        self._leading: Callable[[], bool] = lambda: False

    def watch(self, kind: str, source: Source, leading: Callable[[], bool]) -> None:
        """Export `kind`'s pools from `source` while `leading()` (replaces an earlier one:
        one operator a process)."""
        self._sources[kind] = source
        self._leading = leading

    def collect(self) -> Iterator[Metric]:
        labels = ["kind", "namespace", "pool"]
        instances = GaugeMetricFamily(
            "lessor_pool_instances",
            "A pool's clusters or sandboxes by state: ready (free), leased, creating, "
            "recycling, unhealthy, quarantined (teardown not verified; capacity withheld).",
            labels=[*labels, "state"],
        )
        queue = GaugeMetricFamily(
            "lessor_pool_queue_depth", "Leases waiting for this pool (Pending).", labels=labels
        )
        oldest = GaugeMetricFamily(
            "lessor_pool_queue_oldest_seconds",
            "Age of the pool's oldest waiting lease (0 with none): how long its queue has "
            "been starved.",
            labels=labels,
        )
        warm = GaugeMetricFamily(
            "lessor_pool_warm_target",
            "Instances the pool keeps ready now (its warm target, or the autoscaler's).",
            labels=labels,
        )
        condition = GaugeMetricFamily(
            "lessor_pool_status_condition",
            "1 for the status (true, false, unknown) each condition of the pool has, 0 for the "
            "others: BackendHealthy, DiagnosticsReady, Warm and the rest (docs/operations.md).",
            labels=[*labels, "condition", "status"],
        )
        if self._leading():
            now = utcnow()
            for kind, source in sorted(self._sources.items()):
                for row in source():
                    key = [kind, row.namespace, row.pool]
                    for state, count in row.instances.items():
                        instances.add_metric([*key, state], count)
                    queue.add_metric(key, len(row.waiting))
                    oldest.add_metric(key, _oldest_seconds(row.waiting, now))
                    warm.add_metric(key, row.warm_target)
                    for type_, status in sorted(row.conditions.items()):
                        for value in ("True", "False", "Unknown"):
                            labelled = [*key, type_, value.lower()]
                            condition.add_metric(labelled, 1.0 if status == value else 0.0)
        yield from (instances, queue, oldest, warm, condition)


GAUGES = PoolGauges()
REGISTRY.register(GAUGES)


def by_pool(pools: Typed[P], rows: Callable[[Cached[P], str], PoolRow]) -> Source:
    """A source that makes one row per pool in the cache, keyed as the caches index by pool."""

    def source() -> Iterator[PoolRow]:
        for pool in pools.list():
            row = rows(pool, pool.key)
            found = pool.model.status.conditions if pool.model.status else []
            conditions: dict[str, str] = {c.type: c.status for c in found}
            yield dataclasses.replace(row, conditions=conditions)

    return source
