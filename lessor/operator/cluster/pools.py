"""The ClusterPool reconciler: keeps `warmTarget` instances ready and reports the pool's counts.

Created instances take a moment to appear in the cache, and a reconcile in that moment would see
too few and create more. So, like controller-runtime's "expectations", the names this process
created are counted as creating until the cache shows them (or a minute passes).

A pool that cannot make a working cluster says why in its condition `BackendHealthy` rather than
churning in silence: a backend this operator does not serve creates nothing
(`BackendUnavailable`), and new clusters that fail to start in a row (`StartFailing`: a bad
image, a cluster its clients cannot reach) are replaced after a pause that doubles with each
failure, up to `MAX_START_BACKOFF`; the next cluster that starts resets both.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from lessor.operator.backends.registry import unavailable
from lessor.operator.cluster import autoscale, cluster_metrics, rollout
from lessor.operator.core import pool_gauges
from lessor.operator.core.conditions import find, with_condition
from lessor.operator.core.kinds import (
    BY_POOL,
    INSTANCES,
    POOLS,
    QUEUE_OF_POOL,
    index_by_pool,
    index_queue_of_pool,
    pool_key,
)
from lessor.operator.core.pool_gauges import PoolRow
from lessor.operator.core.typed import Cached, Typed
from lessor.operator.core.writes import (
    delete_fenced,
    outgoing_status,
    owner_reference,
    replace_status,
)
from lessor.operator.diagnostics.store_checks import RECHECK, RETRY, StoreChecks
from lessor.operator.runtime.client import ConflictError, KubeClient, NotFoundError
from lessor.operator.runtime.controller import Controller, Result
from lessor.operator.runtime.events import EventRecorder
from lessor.operator.runtime.informer import Informer
from lessor.operator.wiring.context import Context
from lessor.protocol.json_object import Json
from lessor.protocol.timestamps import now_seconds, utcnow
from lessor.resources import labels
from lessor.resources.base import UP_TO_DATE, Condition
from lessor.resources.cluster import (
    ClusterInstance,
    ClusterInstanceStatus,
    ClusterLease,
    ClusterPool,
    ClusterPoolStatus,
)

log = logging.getLogger(__name__)

MAX_CREATES_PER_PASS = 5
# A pool's counts follow its instances and leases within this many seconds: a burst of binds
# is one status write instead of one per bind (issue 19; the profile counted 3.3 per lease).
SETTLE = 0.25
EXPECTATION_TIMEOUT = 60.0
BACKEND_HEALTHY = "BackendHealthy"
DIAGNOSTICS_READY = "DiagnosticsReady"
START_BACKOFF = datetime.timedelta(seconds=10)
# What an instance copies of its pool when it is made (lessor.operator.cluster.rollout.template).
TEMPLATE = {"backend", "addons", "readiness_gates"}
MAX_START_BACKOFF = datetime.timedelta(minutes=10)
# A status change that is the queue depth alone is written at most this often per pool: every
# create and bind of a busy pool changes it, and each write is a request to kube-apiserver and
# a watch event to every watcher (a fifth of a request per create, issue 45). The gauge
# `lessor_pool_queue_depth` is exact at every pass; the status may lag by this much.
QUEUE_DEPTH_PERIOD = 1.0


def start_backoff(failures: int) -> datetime.timedelta:
    """The pause before the next new cluster after `failures` failed to start in a row."""
    return min(START_BACKOFF * (1 << min(max(failures - 1, 0), 16)), MAX_START_BACKOFF)


@dataclass
class InstanceCounts:
    """A pool's instances by state, as its status and its gauges count them."""

    ready: int = 0
    leased: int = 0
    creating: int = 0
    recycling: int = 0
    unhealthy: int = 0
    quarantined: int = 0

    def total(self) -> int:
        return sum(dataclasses.astuple(self))

    def write_to(self, status: ClusterPoolStatus) -> None:
        status.ready, status.leased, status.creating = self.ready, self.leased, self.creating
        status.recycling, status.unhealthy = self.recycling, self.unhealthy
        status.quarantined = self.quarantined


InstanceState = tuple[str | None, bool, bool]  # its phase, whether claimed, whether deleting


def count_instances(instances: list[Cached[ClusterInstance]]) -> InstanceCounts:
    return _tally(
        (i.model.status.phase if i.model.status else None, i.model.spec.claim_ref is not None,
         i.deleting)
        for i in instances
    )  # fmt: skip


def _tally(states: Iterable[InstanceState]) -> InstanceCounts:
    counts = InstanceCounts()
    for phase, claimed, deleting in states:
        if phase == "Quarantined":
            counts.quarantined += 1
        elif deleting or phase == "Recycling":
            counts.recycling += 1
        elif claimed:
            counts.leased += 1
        elif phase == "Ready":
            counts.ready += 1
        elif phase == "Unhealthy":
            counts.unhealthy += 1
        else:
            counts.creating += 1
    return counts


def gauge_row(
    pool: Cached[ClusterPool], key: str, instances: Informer, leases: Informer
) -> PoolRow:
    """The pool's gauges (lessor.operator.core.pool_gauges): its instances by state and its queue,
    as the caches have them; the instances and leases read raw, as waiting_since says why."""
    states = (
        (i.get("status", {}).get("phase"), bool(i.get("spec", {}).get("claimRef")),
         bool(i["metadata"].get("deletionTimestamp")))
        for i in instances.store.by_index(BY_POOL, key)
    )  # fmt: skip
    return PoolRow(
        namespace=pool.model.metadata.namespace or "",
        pool=pool.name,
        warm_target=pool.model.warm_now(),
        instances=dataclasses.asdict(_tally(states)),
        waiting=pool_gauges.waiting_since(leases.store.by_index(QUEUE_OF_POOL, key)),
    )


def setup(context: Context) -> Controller:
    """A pool is reconciled when it changes and when any of its instances or leases does (its
    counts and queue depth are theirs)."""
    pools = context.cache(ClusterPool)
    instances = context.cache(ClusterInstance, {BY_POOL: index_by_pool})
    leases = context.cache(
        ClusterLease, {BY_POOL: index_by_pool, QUEUE_OF_POOL: index_queue_of_pool}
    )
    controller = context.controller(ClusterPool)
    reconciler = PoolReconciler(
        context.client,
        instances=instances,
        leases=leases,
        events=context.events,
        test_backends=context.settings.test_backends,
        privileged=context.settings.allow_privileged_backends,
        store_checks=StoreChecks(context.client, controller.enqueue),
    )
    pool_gauges.GAUGES.watch(
        "cluster",
        pool_gauges.by_pool(
            pools, lambda pool, key: gauge_row(pool, key, instances.informer, leases.informer)
        ),
        lambda: context.manager.leading,
    )
    return (
        controller.for_(pools, reconciler.reconcile)
        .watch(instances.informer, lambda instance: [pool_key(instance)], settle=SETTLE)
        .watch(leases.informer, lambda lease: [pool_key(lease)], settle=SETTLE)
    )


def _summarize(
    pool: ClusterPool, status: ClusterPoolStatus, outdated: int, backend: Condition | None
) -> None:
    """The pool's UpToDate condition, its template's hash and its phase, from the counts
    already in `status` (the pass's outcome)."""
    status.conditions = with_condition(
        status.conditions, UP_TO_DATE, not outdated, "UpToDate" if not outdated else "Rolling",
        f"{outdated} warm instance(s) of an older template being replaced"
        if outdated else "every warm instance is of the current template",
        generation=pool.metadata.generation,
    )  # fmt: skip
    status.outdated = outdated
    status.template_hash = rollout.template_hash(pool.spec)
    status.observed_generation = pool.metadata.generation
    failing = backend is not None and backend.status == "False"
    serving = status.ready + status.leased + status.creating
    if not serving and status.target:
        status.phase = "Unavailable"
    else:
        degraded = status.unhealthy or status.quarantined or failing
        status.phase = "Degraded" if degraded else "Healthy"


class PoolReconciler:
    def __init__(
        self,
        client: KubeClient,
        *,
        instances: Typed[ClusterInstance],
        leases: Typed[ClusterLease],
        events: EventRecorder,
        test_backends: bool = False,
        privileged: bool = False,
        store_checks: StoreChecks,
    ) -> None:
        self.test_backends = test_backends
        self.privileged = privileged
        self.store_checks = store_checks
        self.client = client
        self.instances = instances
        self.leases = leases
        self.events = events
        self._expected: dict[str, dict[str, float]] = {}
        self._written_at: dict[str, float] = {}  # pool key -> monotonic time of its last write

    def _pending_expectations(self, key: str, seen: set[str]) -> int:
        expected = self._expected.get(key, {})
        now = time.monotonic()
        for name in [
            n for n, at in expected.items() if n in seen or now - at > EXPECTATION_TIMEOUT
        ]:
            del expected[name]
        return len(expected)

    async def reconcile(self, key: str, cached: Cached[ClusterPool] | None) -> Result:
        if cached is None:
            self._expected.pop(key, None)
            self._written_at.pop(key, None)
            self.store_checks.forget(key)
            return Result()
        obj, pool = cached.raw, cached.model
        instances = self.instances.by_index(BY_POOL, key)
        expected = self._pending_expectations(key, {i.name for i in instances})
        counts = count_instances(instances)
        counts.creating += expected
        status = (pool.status or ClusterPoolStatus()).model_copy(deep=True)
        before = find(status.conditions, BACKEND_HEALTHY)
        failed = await self._replace_unhealthy(instances)
        problem = unavailable(pool.spec.backend, self.test_backends, self.privileged)
        self._assess(pool, status, instances, failed, problem)
        store_before = find(status.conditions, DIAGNOSTICS_READY)
        self._assess_store(key, pool, status)
        backend_health = find(status.conditions, BACKEND_HEALTHY)
        # Counted raw from the queue's index: a pass reads no lease but an autoscaled pool's.
        waiting = len(self.leases.informer.store.by_index(QUEUE_OF_POOL, key))
        pause = (status.retry_at - utcnow()).total_seconds() if status.retry_at else 0.0
        scaled = None
        if pool.spec.policy.mode == "autoscale":
            leases = [lease.model for lease in self.leases.by_index(BY_POOL, key)]
            scaled = autoscale.decide(
                pool.spec.policy, status.autoscale, leases, waiting, now_seconds()
            )
        target_before = status.target
        warm = scaled.status.target if scaled else pool.spec.warm_target
        decided = rollout.plan(
            pool.spec, instances, expected=expected, occupied=counts.total(),
            waiting=waiting, warm=warm, can_create=not problem and pause <= 0,
        )  # fmt: skip
        counts.creating += await self._act(key, cached, decided, warm)
        up_to_date = find(status.conditions, UP_TO_DATE)  # before this pass, for its Event
        counts.write_to(status)
        status.queue_depth, status.target = waiting, warm
        status.autoscale = scaled.status if scaled else None
        _summarize(pool, status, decided.outdated, backend_health)
        obj, deferred = await self._write(key, obj, status)
        await self._report(obj, before, backend_health, failed)
        store_after = find(status.conditions, DIAGNOSTICS_READY)
        await self._report_turn(obj, store_before, store_after, "Diagnostics")
        if up_to_date is not None or decided.outdated:  # not at a pool's creation
            await self._report_turn(
                obj, up_to_date, find(status.conditions, UP_TO_DATE), "Template"
            )
        if scaled and target_before is not None and scaled.status.target != target_before:
            rose = scaled.status.target > target_before
            await self.events.record(
                obj, "Normal", "ScaledUp" if rose else "ScaledDown",
                f"{target_before} to {scaled.status.target} warm: {scaled.status.reason}",
            )  # fmt: skip
        due = [self._recheck(pool, status, pause, decided.create, scaled), deferred]
        return Result(requeue_after=min((t for t in due if t is not None), default=None))

    async def _act(
        self, key: str, pool: Cached[ClusterPool], decided: rollout.Plan, warm: int
    ) -> int:
        """Create what the plan asks for (at most MAX_CREATES_PER_PASS; the rest at the next
        pass) and retire what it gives up; the number created."""
        created = 0
        for _ in range(min(decided.create, MAX_CREATES_PER_PASS)):
            name = await self._create_instance(pool.raw, pool.model)
            self._expected.setdefault(key, {})[name] = time.monotonic()
            created += 1
        current = rollout.template(pool.model.spec)
        for instance in decided.retire:
            outdated = rollout.outdated(instance.model, current)
            why = "replaced by one of the current template" if outdated else f"beyond {warm} warm"
            await self._retire(instance, why)
        return created

    async def _write(
        self, key: str, obj: Json, status: ClusterPoolStatus
    ) -> tuple[Json, float | None]:
        """The pool as stored once `status` is written, and None; or, for a change of the queue
        depth alone that comes too soon, the pool as it was and the seconds until its write."""
        wanted = outgoing_status(obj, status)
        # Compared as JSON, as write_status compares: what is stored against what would be sent.
        deferred = self._defer_queue_depth(key, obj.get("status") or {}, wanted)
        if deferred is not None:
            return obj, deferred
        written = await replace_status(self.client, POOLS, obj, wanted)
        if written is not obj:
            self._written_at[key] = time.monotonic()
        return written, None

    def _defer_queue_depth(self, key: str, stored: Json, wanted: Json) -> float | None:
        """Seconds until `wanted` may replace `stored`, when all it changes is the queue depth
        and the pool's status was written less than QUEUE_DEPTH_PERIOD ago; None: write it now."""
        depth_alone = {**wanted, "queueDepth": 0} == {**stored, "queueDepth": 0}
        last = self._written_at.get(key)
        same_depth = wanted.get("queueDepth", 0) == stored.get("queueDepth", 0)
        if not depth_alone or same_depth or last is None:
            return None
        wait = last + QUEUE_DEPTH_PERIOD - time.monotonic()
        return wait if wait > 0 else None

    @staticmethod
    def _recheck(
        pool: ClusterPool,
        status: ClusterPoolStatus,
        pause: float,
        deficit: int,
        scaled: autoscale.Decision | None,
    ) -> float | None:
        """When to look again without an event: after a start-failure pause, at once while more
        clusters are due than one pass makes, when the bucket check is due, and when time alone
        changes the autoscaler's target."""
        due = []
        if pause > 0:
            due.append(pause)
        if deficit > MAX_CREATES_PER_PASS:
            due.append(1.0)
        if pool.spec.diagnostics is not None:
            store = find(status.conditions, DIAGNOSTICS_READY)
            due.append(RECHECK if store and store.status == "True" else RETRY)
        if scaled is not None:
            due.append(scaled.recheck_after)
        return min(due) if due else None

    def _assess_store(self, key: str, pool: ClusterPool, status: ClusterPoolStatus) -> None:
        """Set `DiagnosticsReady` from the last check of the pool's bucket (none without
        diagnostics; unchanged until the first check of new settings ends)."""
        settings = pool.spec.diagnostics
        if settings is None:
            status.conditions = [c for c in status.conditions if c.type != DIAGNOSTICS_READY]
            return
        verdict = self.store_checks.verdict(key, pool.metadata.namespace or "", settings)
        if verdict is not None:
            status.conditions = with_condition(
                status.conditions, DIAGNOSTICS_READY, verdict.ok, verdict.reason, verdict.message,
                generation=pool.metadata.generation,
            )  # fmt: skip

    async def _report_turn(
        self, obj: Json, before: Condition | None, after: Condition | None, prefix: str = ""
    ) -> None:
        """An Event `<prefix><reason>` when a condition appears or turns (status or reason)."""
        if after is None or (
            before is not None and (before.status, before.reason) == (after.status, after.reason)
        ):
            return
        kind = "Normal" if after.status == "True" else "Warning"
        await self.events.record(obj, kind, f"{prefix}{after.reason}", after.message)

    async def _replace_unhealthy(
        self, instances: list[Cached[ClusterInstance]]
    ) -> list[ClusterInstance]:
        """Tear down the unclaimed Unhealthy instances (replaced, not repaired: the deficit
        refills); those that never became ready are returned, as failed starts. Never one under
        a lease: its lease reports it, and it goes when the lease ends."""
        failed = []
        for cached in instances:
            instance = cached.model
            status = instance.status or ClusterInstanceStatus()
            if (
                status.phase == "Unhealthy"
                and instance.spec.claim_ref is None
                and not cached.deleting
            ):
                await delete_fenced(self.client, INSTANCES, cached.raw)
                started = status.ready_at is not None
                cluster_metrics.REPLACED.labels(
                    instance.metadata.namespace or "",
                    instance.spec.pool,
                    "unhealthy" if started else "failed_to_start",
                ).inc()
                if not started:
                    failed.append(instance)
        return failed

    def _assess(
        self,
        pool: ClusterPool,
        status: ClusterPoolStatus,
        instances: list[Cached[ClusterInstance]],
        failed: list[ClusterInstance],
        problem: str | None,
    ) -> None:
        """Set `BackendHealthy`, the start failures in a row and the pause they cost."""
        cluster_metrics.pool_seen(pool)
        generation = pool.metadata.generation
        if problem:
            status.conditions = with_condition(
                status.conditions, BACKEND_HEALTHY, False, "BackendUnavailable", problem,
                generation=generation,
            )  # fmt: skip
            return
        previous = find(status.conditions, BACKEND_HEALTHY)
        if previous is not None and previous.reason == "BackendUnavailable":
            # Served now (the operator was restarted with what it lacked): nothing known yet.
            status.conditions = [c for c in status.conditions if c is not previous]
            previous = None
        since = previous.last_transition_time if previous and previous.status == "False" else None
        if failed:
            status.start_failures += len(failed)
            status.retry_at = now_seconds() + start_backoff(status.start_failures)
            last = failed[-1]
            message = (
                f"{status.start_failures} new cluster(s) in a row failed to start; the last,"
                f" {last.metadata.name}: {last.status.message if last.status else ''};"
                f" the next is started after {status.retry_at.isoformat()}"
            )
            status.conditions = with_condition(
                status.conditions, BACKEND_HEALTHY, False, "StartFailing", message,
                generation=generation,
            )  # fmt: skip
            return
        started = [
            i.model.status.ready_at
            for i in instances
            if i.model.status and i.model.status.ready_at and not i.deleting
        ]
        if started and (since is None or max(started) > since):
            status.start_failures, status.retry_at = 0, None
            status.conditions = with_condition(
                status.conditions, BACKEND_HEALTHY, True, "ClustersStart",
                "new clusters start and pass their health checks", generation=generation,
            )  # fmt: skip

    async def _report(
        self,
        obj: Json,
        before: Condition | None,
        after: Condition | None,
        failed: list[ClusterInstance],
    ) -> None:
        """Events for what the status now says: failed starts, and each turn of `BackendHealthy`."""
        if after is not None and failed:
            await self.events.record(obj, "Warning", "ClusterFailedToStart", after.message)
        else:
            await self._report_turn(obj, before, after)

    async def _retire(self, cached: Cached[ClusterInstance], why: str) -> None:
        """Delete a warm instance the pool no longer needs (of an older template, or beyond its
        target), unless it changed since it was read: a lease may have claimed it (the claim is
        a write of the instance), and a claimed instance is never taken away."""
        instance = cached.raw
        metadata = instance["metadata"]
        path = INSTANCES.path(metadata["namespace"], metadata["name"])
        fence = {"uid": metadata["uid"], "resourceVersion": metadata["resourceVersion"]}
        with contextlib.suppress(NotFoundError, ConflictError):
            await self.client.delete(path, preconditions=fence)
            await self.events.record(instance, "Normal", "Retired", why)

    async def _create_instance(self, pool_obj: Json, pool: ClusterPool) -> str:
        name = pool.metadata.name or ""
        namespace = pool.metadata.namespace or ""
        body = {
            "apiVersion": INSTANCES.api_version,
            "kind": INSTANCES.kind,
            "metadata": {
                "generateName": f"{name}-",
                "namespace": namespace,
                "labels": {labels.POOL: name},
                "ownerReferences": [owner_reference(pool_obj)],
            },
            "spec": {
                "pool": name,
                **pool.spec.model_dump(by_alias=True, exclude_none=True, include=TEMPLATE),
            },
        }
        created = await self.client.create(INSTANCES.path(namespace), body)
        instance_name: str = created["metadata"]["name"]
        log.info("pool %s/%s: created instance %s", namespace, name, instance_name)
        return instance_name
