"""The ClusterLease reconciler: queueing, fenced binding, expiry, extension and release.

Binding takes two writes that cannot be one transaction: the instance's `spec.claimRef` (the
reservation, fenced by the instance's uid and resourceVersion, so only one lease can win an
instance), then the lease's status. A crash between them is completed on replay: the lease finds
the instance that already names it (an index by claim uid) and finishes binding; it never claims
a second one. Every later transition is likewise recomputed from what is stored, so replaying a
reconcile after a kill -9 at any point does the rest of the work and nothing twice.

Phases (spec 3.1): Pending (queued, with a 1-based queuePosition in FIFO order of creation) ->
Bound (kubeconfig published, expiresAt set) -> Recycling (released or expired; the instance is
being torn down) -> Released or Expired once teardown is verified, or Quarantined when it is not.

The kubeconfig published at Bound is the lease's own: the backend issues a certificate valid until
expiresAt, using the cluster's admin kubeconfig (the instance's Secret), which stays in lessor's
namespace; an extension issues another until the new expiry (lessor.operator.lease_kubeconfigs).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import logging
from collections.abc import Callable
from typing import Literal

from lessor.operator import lease_kubeconfigs, lease_metrics, lease_traces
from lessor.operator.backends.base import BackendError, InstanceRef, LeaseRef
from lessor.operator.backends.registry import Backends
from lessor.operator.claims_in_flight import ClaimsInFlight
from lessor.operator.conditions import find, with_condition
from lessor.operator.context import Context
from lessor.operator.diagnostics import records as diagnostics_records
from lessor.operator.diagnostics.captures import Captures
from lessor.operator.kinds import (
    BY_CLAIM,
    BY_POOL,
    INSTANCES,
    LEASES,
    POOLS,
    SECRETS,
    index_by_claim,
    index_by_pool,
    pool_key,
)
from lessor.operator.runtime.client import ApiError, KubeClient
from lessor.operator.runtime.controller import Controller, Result, spec_changed
from lessor.operator.runtime.events import EventRecorder
from lessor.operator.runtime.informer import Informer
from lessor.operator.runtime.store import key_of
from lessor.operator.writes import (
    add_finalizer,
    delete_fenced,
    delete_present,
    patch_fenced,
    remove_finalizer,
    write_status,
)
from lessor.operator.writes_in_flight import WritesInFlight
from lessor.protocol.durations import format_duration, parse_duration
from lessor.protocol.json_object import Json
from lessor.protocol.timestamps import now_seconds, timestamp, utcnow
from lessor.resources.base import READY, ObjectRef
from lessor.resources.cluster import (
    CLUSTER_HEALTHY,
    LEASE_FINALIZER,
    Backend,
    ClusterLease,
    ClusterLeaseStatus,
    ClusterPool,
    Diagnostics,
)

log = logging.getLogger(__name__)


def _created(obj: Json) -> tuple[str, str]:
    return (obj["metadata"].get("creationTimestamp", ""), obj["metadata"]["name"])


def _status(lease: ClusterLease) -> ClusterLeaseStatus:
    """A copy of the lease's status to change and write (the lease keeps what was read)."""
    return lease.status.model_copy() if lease.status else ClusterLeaseStatus()


def _is_free(instance: Json) -> bool:
    """Ready, unclaimed, not being deleted, and not failing its health check right now."""
    status = instance.get("status", {})
    return (
        status.get("phase") == "Ready"
        and not instance.get("spec", {}).get("claimRef")
        and not instance["metadata"].get("deletionTimestamp")
        and not any(
            c.get("type") == "Healthy" and c.get("status") == "False"
            for c in status.get("conditions", [])
        )
    )


def setup(context: Context) -> Controller:
    """A lease is reconciled when it changes; when its pool changes (it may now exist, or have
    another TTL); and when an instance changes: the lease that claims it (binding, teardown),
    and the pending leases of its pool (a ready instance may take the head of the queue)."""
    pools = context.informer(POOLS)
    instances = context.informer(INSTANCES, {BY_POOL: index_by_pool, BY_CLAIM: index_by_claim})
    leases = context.informer(LEASES, {BY_POOL: index_by_pool})
    reconciler = LeaseReconciler(
        context.client,
        pools=pools,
        instances=instances,
        leases=leases,
        backends=context.backends,
        events=context.events,
        enqueue=lambda key: controller.enqueue(key),  # noqa: PLW0108 - bound late
        captures=Captures(context.client, context.events, lambda key: controller.enqueue(key)),  # noqa: PLW0108
    )
    controller = context.controller("clusterlease", reconciler.reconcile)

    def of_pool(pool: Json) -> list[str]:
        return [key_of(lease) for lease in leases.store.by_index(BY_POOL, key_of(pool))]

    def of_instance(instance: Json) -> list[str]:
        keys = []
        claim = instance.get("spec", {}).get("claimRef")
        if claim:
            keys.append(f"{instance['metadata'].get('namespace')}/{claim['name']}")
        return keys + [
            key_of(lease)
            for lease in leases.store.by_index(BY_POOL, pool_key(instance))
            if ClusterLease.phases.waiting(lease.get("status", {}).get("phase"))
        ]

    # A lease reads its pool's spec (existence, TTL, diagnostics), never its status: a pool's
    # status turns at every lease's change, and mapping each turn to every lease of the pool
    # reconciled N leases per create into a pool N deep (issue 19, profile of creates).
    return (
        controller.watch(leases)
        .watch(pools, of_pool, when=spec_changed)
        .watch(instances, of_instance)
    )


class LeaseReconciler:
    def __init__(
        self,
        client: KubeClient,
        *,
        pools: Informer,
        instances: Informer,
        leases: Informer,
        backends: Backends,
        events: EventRecorder,
        enqueue: Callable[[str], None],
        captures: Captures,
    ) -> None:
        self.client = client
        self.backends = backends
        self.captures = captures
        self.pools = pools
        self.instances = instances
        self.claims = ClaimsInFlight(instances)
        self.writes = WritesInFlight()
        self.leases = leases
        self.events = events
        self._enqueue_key = enqueue

    def queue_of(self, pool_key: str) -> list[Json]:
        """Pending leases of a pool without a reserved instance, oldest first (FIFO)."""
        in_flight = self.claims.leases()
        waiting = [
            lease
            for lease in self.leases.store.by_index(BY_POOL, pool_key)
            if ClusterLease.phases.waiting(lease.get("status", {}).get("phase"))
            and not lease["metadata"].get("deletionTimestamp")
            and lease["metadata"]["uid"] not in in_flight
            and not self.instances.store.by_index(BY_CLAIM, lease["metadata"]["uid"])
        ]
        return sorted(waiting, key=_created)

    async def reconcile(self, key: str) -> Result:
        obj = self.leases.store.get(key)
        # A version this process replaced is skipped: the watch event of its write comes next.
        if self.writes.stale(key, obj) or obj is None:
            return Result()
        lease = ClusterLease.model_validate(obj)
        phase = lease.status.phase if lease.status else None
        deleting = lease.metadata.deletion_timestamp is not None
        if phase in ClusterLease.phases.finished:
            # Seen only where the cache holds finished leases too (a CRD without the
            # selectable field): the retention sweep deletes them (lease_retention).
            if LEASE_FINALIZER in (lease.metadata.finalizers or []):
                await diagnostics_records.keep(self.client, lease)
                await remove_finalizer(self.client, LEASES, obj, LEASE_FINALIZER)
            return Result()
        if not deleting:
            written = await add_finalizer(self.client, LEASES, obj, LEASE_FINALIZER)
            self.writes.wrote(key, obj, written)
            obj = written
        release = lease.spec.release_requested or deleting
        if ClusterLease.phases.waiting(phase):
            return await self._pending(obj, lease, release)
        if phase == "Bound":
            return await self._bound(obj, lease, release)
        return await self._ending(obj, lease)

    # -- Pending ----------------------------------------------------------------------------

    async def _pending(self, obj: Json, lease: ClusterLease, release: bool) -> Result:
        namespace = lease.metadata.namespace or ""
        pool_key = f"{namespace}/{lease.spec.pool}"
        claimed = self.instances.store.by_index(BY_CLAIM, lease.metadata.uid or "")
        if not claimed and (in_flight := self.claims.instance_of(lease.metadata.uid or "")):
            claimed = [in_flight]
        status = _status(lease)
        if release:
            for instance in claimed:  # reserved but never handed out: recycle it all the same
                await delete_fenced(self.client, INSTANCES, instance)
            status.phase, status.end_reason, status.queue_position = "Released", "Released", None
            status.message = "released before a cluster was bound"
            await self._finish(obj, status, "Released")
            return Result()
        pool_obj = self.pools.store.get(pool_key)
        if pool_obj is None:
            status.phase, status.message = "Pending", f"pool {lease.spec.pool} does not exist"
            await self._write_status(obj, status)
            return Result(requeue_after=10.0)
        pool = ClusterPool.model_validate(pool_obj)
        status.effective_ttl = format_duration(parse_duration(lease.spec.ttl or pool.spec.ttl))
        if not claimed:
            queue = self.queue_of(pool_key)
            position = next(
                (
                    n
                    for n, waiting in enumerate(queue, 1)
                    if waiting["metadata"]["uid"] == lease.metadata.uid
                ),
                len(queue) + 1,
            )
            taken = self.claims.instances_taken()
            free = sorted(
                (
                    i
                    for i in self.instances.store.by_index(BY_POOL, pool_key)
                    if _is_free(i) and i["metadata"]["uid"] not in taken
                ),
                key=_created,
            )
            if position > len(free):
                # No Event of its own: the queue position is in the status, and the Bound
                # Event says how long the lease waited (one request fewer per queued create,
                # issue 45).
                status.phase, status.queue_position = "Pending", position
                status.message = "waiting for a ready cluster"
                await self._write_status(obj, status)
                return Result()
            claim = {"name": lease.metadata.name, "uid": lease.metadata.uid}
            instance, kubeconfig = await self._claim(free[position - 1], claim)
            self.claims.add(lease.metadata.uid or "", instance)
            return await self._bind(obj, lease, instance, status, pool_key, secret=kubeconfig)
        return await self._bind(obj, lease, claimed[0], status, pool_key)

    async def _claim(self, instance: Json, claim: Json) -> tuple[Json, Json | None]:
        """The fenced claim of `instance`, and its kubeconfig Secret read alongside: the read
        was a round trip of its own after the claim, on the path a waiting client measures. A
        claim that loses its race wastes one read; a read that fails is made again by the bind,
        which reports its error (the claim is made and remembered either way)."""
        claiming = patch_fenced(
            self.client,
            INSTANCES,
            instance,
            [{"op": "add", "path": "/spec/claimRef", "value": claim}],
        )
        source = instance.get("status", {}).get("kubeconfigSecret")
        if not source:
            return await claiming, None

        path = SECRETS.path(instance["metadata"]["namespace"], source)

        async def read() -> Json | None:
            with contextlib.suppress(Exception):
                return await self.client.get(path)
            return None

        claimed, secret = await asyncio.gather(claiming, read())
        return claimed, secret

    async def _bind(
        self,
        obj: Json,
        lease: ClusterLease,
        instance: Json,
        status: ClusterLeaseStatus,
        pool_key: str,
        *,
        secret: Json | None = None,
    ) -> Result:
        """`secret`: the instance's kubeconfig Secret when the claim has just read it."""
        queued = status.phase == "Pending"  # it was written Pending: it waited in the queue
        name = lease.metadata.name or ""
        namespace = lease.metadata.namespace or ""
        source = instance.get("status", {}).get("kubeconfigSecret")
        if not source:
            return Result(requeue_after=0.5)  # the instance is publishing its kubeconfig
        if secret is None or secret["metadata"]["name"] != source:
            secret = await self.client.get(SECRETS.path(namespace, source))
        assert status.effective_ttl is not None  # set by _pending
        instance_name = instance["metadata"]["name"]
        with lease_traces.span("lease.bind", obj, {"lessor.cluster.name": instance_name}):
            bound_at = now_seconds()
            expiry = lease.spec.expires_at(bound_at, status.effective_ttl).replace(microsecond=0)
            kubeconfig = await self._issue(lease, instance, secret, expiry)
            await lease_kubeconfigs.publish(self.client, obj, kubeconfig, expiry)
            status = status.model_copy(
                update={
                    "phase": "Bound",
                    "queue_position": None,
                    "instance": ObjectRef(name=instance_name, uid=instance["metadata"]["uid"]),
                    "bound_at": bound_at,
                    "expires_at": expiry,
                    "cluster_name": instance_name,
                    "kubeconfig_secret": lease_kubeconfigs.secret_name(name),
                    "extensions": min(len(lease.spec.extensions), lease.spec.max_extensions),
                    "message": "",
                }
            )
            obj = await self._write_status(obj, status)
        self._trace_wait(obj, instance, queued=queued)
        created = lease.metadata.creation_timestamp
        waited = (
            f" after {format_duration(max(bound_at - created, datetime.timedelta()))} in the queue"
            if queued and created is not None
            else ""
        )
        await self.events.record(
            obj,
            "Normal",
            "Bound",
            f"bound to {instance_name}{waited}, expires {timestamp(expiry)}",
        )
        for waiting in self.queue_of(pool_key):  # everyone behind moves up one place
            self._enqueue(waiting)
        return Result(requeue_after=max(0.0, (expiry - utcnow()).total_seconds()))

    @staticmethod
    def _trace_wait(obj: Json, instance: Json, *, queued: bool) -> None:
        """The lease's wait in the queue, and the start of its cluster if the lease waited for
        it (the cluster became ready after the lease was made: its start may have begun before),
        as spans of its trace (times from the objects)."""
        created = obj["metadata"].get("creationTimestamp")
        bound = obj.get("status", {}).get("boundAt")
        if not (queued and created and bound):
            return
        lease_created = datetime.datetime.fromisoformat(created)
        lease_traces.record(
            "lease.queue", obj, lease_created, datetime.datetime.fromisoformat(bound)
        )
        started = instance["metadata"].get("creationTimestamp")
        ready = instance.get("status", {}).get("readyAt")
        if started and ready and datetime.datetime.fromisoformat(ready) >= lease_created:
            backend = str(instance["spec"].get("backend", {}).get("type", ""))
            cluster = {"lessor.cluster.name": instance["metadata"]["name"]}
            lease_traces.record(
                "cluster.start", obj,
                datetime.datetime.fromisoformat(started), datetime.datetime.fromisoformat(ready),
                {**cluster, "lessor.backend.type": backend},
            )  # fmt: skip

    async def _issue(
        self, lease: ClusterLease, instance: Json, admin_secret: Json, expiry: datetime.datetime
    ) -> str:
        """The lease's own kubeconfig, valid until `expiry`, issued by the instance's backend
        with the cluster's admin kubeconfig (`admin_secret`, the instance's Secret)."""
        meta = instance["metadata"]
        backend = self.backends.for_spec(Backend.model_validate(instance["spec"]["backend"]))
        return await backend.lease_kubeconfig(
            InstanceRef(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"]),
            base64.b64decode(admin_secret["data"]["kubeconfig"]).decode(),
            LeaseRef(name=lease.metadata.name or "", expires_at=expiry),
        )

    async def _reissue(self, obj: Json, lease: ClusterLease, expiry: datetime.datetime) -> None:
        """An extension's credential, written before the status that shows the new expiry; a
        replay that finds it written (killed before the status) issues nothing."""
        current = await lease_kubeconfigs.read(self.client, obj)
        if current is not None and lease_kubeconfigs.issued_until(current) == timestamp(expiry):
            return
        instance = self._bound_instance(lease)
        source = (instance or {}).get("status", {}).get("kubeconfigSecret")
        if instance is None or not source:
            raise BackendError("the bound cluster or its admin kubeconfig is gone")
        admin = await self.client.get(SECRETS.path(instance["metadata"]["namespace"], source))
        kubeconfig = await self._issue(lease, instance, admin, expiry)
        await lease_kubeconfigs.publish(self.client, obj, kubeconfig, expiry, current=current)

    async def _write_status(self, obj: Json, status: ClusterLeaseStatus) -> Json:
        written = await write_status(self.client, LEASES, obj, status)
        self.writes.wrote(key_of(obj), obj, written)
        exists = self.pools.store.get(pool_key(obj)) is not None
        lease_metrics.transition("cluster", ClusterLease.phases, obj, written, pool_exists=exists)
        return written

    def _enqueue(self, obj: Json) -> None:
        self._enqueue_key(f"{obj['metadata']['namespace']}/{obj['metadata']['name']}")

    # -- Bound ------------------------------------------------------------------------------

    async def _bound(self, obj: Json, lease: ClusterLease, release: bool) -> Result:
        assert lease.status is not None and lease.status.bound_at is not None
        status = _status(lease)
        ttl = lease.status.effective_ttl or lease.spec.ttl or "1h"
        expiry = lease.spec.expires_at(lease.status.bound_at, ttl).replace(microsecond=0)
        applied = min(len(lease.spec.extensions), lease.spec.max_extensions)
        retry: float | None = None
        if applied != lease.status.extensions and not release and utcnow() < expiry:
            try:
                await self._reissue(obj, lease, expiry)
            except (BackendError, ApiError) as error:
                # Never a reason to keep the lease past its expiry: the check below still runs,
                # the extension is applied once a credential for it is, and until then the
                # served kubeconfig lasts until the expiry the status still says.
                log.warning("lease %s: no credential for its extension yet: %s", key_of(obj), error)
                retry = 5.0
            else:
                status.expires_at, status.extensions = expiry, applied
                obj = await self._write_status(obj, status)
                await self.events.record(obj, "Normal", "Extended", f"expires {timestamp(expiry)}")
        obj = await self._report_health(obj, lease, status)
        now = utcnow()
        if not release and now < expiry:
            left = (expiry - now).total_seconds()
            return Result(requeue_after=min(left, retry) if retry else left)
        reason: Literal["Released", "Expired"] = "Released" if release else "Expired"
        status.phase, status.end_reason = "Recycling", reason
        status.message = f"{reason.lower()}; tearing the cluster down"
        obj = await self._write_status(obj, status)
        await self.events.record(
            obj, "Normal", reason, "the cluster is being destroyed and replaced"
        )
        return await self._ending(obj, ClusterLease.model_validate(obj))

    async def _report_health(
        self, obj: Json, lease: ClusterLease, status: ClusterLeaseStatus
    ) -> Json:
        """The bound cluster's Healthy condition, mirrored as the lease's ClusterHealthy with an
        Event each time it turns. A cluster that fails under a lease is kept (its owner may still
        be using what works, and it may recover) and said so, never silently replaced; a lease
        whose cluster stayed healthy is never written for it."""
        instance = self._bound_instance(lease)
        conditions = instance.get("status", {}).get("conditions", []) if instance else []
        healthy = next((c for c in conditions if c.get("type") == "Healthy"), None)
        if healthy is None:
            return obj
        ok = healthy.get("status") == "True"
        previous = find(status.conditions, CLUSTER_HEALTHY)
        if (previous.status == "True" if previous else True) == ok:
            return obj
        message = healthy.get("message", "")
        status.conditions = with_condition(
            status.conditions, CLUSTER_HEALTHY, ok, healthy.get("reason", "HealthCheck"), message,
            generation=lease.metadata.generation,
        )  # fmt: skip
        obj = await self._write_status(obj, status)
        if ok:
            await self.events.record(obj, "Normal", "ClusterRecovered", message)
        else:
            await self.events.record(
                obj, "Warning", "ClusterUnhealthy", f"the cluster fails its health check: {message}"
            )
        return obj

    def _bound_instance(self, lease: ClusterLease) -> Json | None:
        """The instance the lease is bound to, if it still exists (the same uid)."""
        reference = lease.status.instance if lease.status else None
        if reference is None:
            return None
        instance = self.instances.store.get(f"{lease.metadata.namespace}/{reference.name}")
        if instance is None or instance["metadata"]["uid"] != reference.uid:
            return None
        return instance

    # -- Recycling --------------------------------------------------------------------------

    async def _ending(self, obj: Json, lease: ClusterLease) -> Result:
        assert lease.status is not None
        status = _status(lease)
        namespace = lease.metadata.namespace or ""
        instance = self._bound_instance(lease)
        if instance is not None:
            instance_phase = instance.get("status", {}).get("phase")
            if instance_phase == "Quarantined":
                if status.phase != "Quarantined":
                    evidence = "; ".join(
                        instance.get("status", {}).get("teardown", {}).get("evidence", [])
                    )
                    status.phase = "Quarantined"
                    status.message = f"teardown could not be verified: {evidence}"
                    obj = await self._write_status(obj, status)
                    await self.events.record(obj, "Warning", "TeardownQuarantined", status.message)
                return Result()
            if not instance["metadata"].get("deletionTimestamp"):
                obj, capturing = await self.captures.before_teardown(
                    obj, lease, self._diagnostics_of(lease)
                )
                if capturing is not None:
                    return capturing
                await delete_fenced(self.client, INSTANCES, instance)
            return Result()  # the instance's deletion (or quarantine) brings us back here
        # The instance is gone: teardown was verified, or a person resolved a quarantine by
        # cleaning up and removing the instance.
        reason = lease.status.end_reason or "Released"
        secret = lease_kubeconfigs.secret_name(lease.metadata.name or "")
        await delete_present(self.client, SECRETS.path(namespace, secret))
        status.phase, status.message = reason, "cluster destroyed; teardown verified"
        await self._finish(obj, status, reason)
        return Result()

    def _diagnostics_of(self, lease: ClusterLease) -> Diagnostics | None:
        """The diagnostics settings of the lease's pool now (None without, or without pool)."""
        pool = self.pools.store.get(f"{lease.metadata.namespace}/{lease.spec.pool}")
        return ClusterPool.model_validate(pool).spec.diagnostics if pool else None

    async def _finish(self, obj: Json, status: ClusterLeaseStatus, reason: str) -> None:
        if status.ended_at is None:
            status.ended_at = now_seconds()
        obj = await self._write_status(obj, status)
        await self.events.record(obj, "Normal", f"Lease{reason}", status.message)
        # From the moment a bound lease stopped being usable (its Ready condition turned False).
        unusable = find(status.conditions, READY)
        usable = unusable is not None and status.bound_at is not None
        ended = unusable.last_transition_time if unusable and usable else status.ended_at
        lease_traces.record("lease.end", obj, ended, attributes={"lessor.lease.outcome": reason})
        # Nothing is left to tear down: a finished lease is deleted at once when asked to (by
        # kubectl, or by the retention sweep, which never sees it in a cache). Its diagnostics
        # record was kept when the capture was Captured. A crash before this write leaves the
        # finalizer to the sweep, which removes it when it deletes the lease.
        await remove_finalizer(self.client, LEASES, obj, LEASE_FINALIZER)
