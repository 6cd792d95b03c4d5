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
namespace; an extension issues another until the new expiry
(lessor.operator.cluster.lease_kubeconfigs).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import logging
from collections.abc import Callable
from typing import Any

from lessor.operator.backends.base import BackendError, InstanceRef, LeaseRef
from lessor.operator.backends.registry import Backends
from lessor.operator.cluster import lease_kubeconfigs
from lessor.operator.core import lease_metrics, lease_traces
from lessor.operator.core.claims_in_flight import ClaimsInFlight
from lessor.operator.core.conditions import find, is_false, with_condition
from lessor.operator.core.kinds import (
    BY_CLAIM,
    BY_POOL,
    INSTANCES,
    LEASES,
    QUEUE_OF_POOL,
    SECRETS,
    index_by_claim,
    index_by_pool,
    index_queue_of_pool,
    pool_key,
)
from lessor.operator.core.typed import Cached, Typed
from lessor.operator.core.writes import (
    add_finalizer,
    delete_fenced,
    delete_present,
    patch_fenced,
    remove_finalizer,
    write_status,
)
from lessor.operator.core.writes_in_flight import WritesInFlight
from lessor.operator.diagnostics import records as diagnostics_records
from lessor.operator.diagnostics.captures import Captures
from lessor.operator.runtime.client import ApiError, KubeClient
from lessor.operator.runtime.controller import Controller, Result, spec_changed
from lessor.operator.runtime.events import EventRecorder
from lessor.operator.runtime.store import key_of
from lessor.operator.wiring.context import Context
from lessor.protocol.durations import format_duration, parse_duration
from lessor.protocol.json_object import Json
from lessor.protocol.phases import EndReason
from lessor.protocol.timestamps import now_seconds, timestamp, utcnow
from lessor.resources.base import READY, ObjectRef, json_pointer
from lessor.resources.cluster import (
    CLUSTER_HEALTHY,
    INSTANCE_HEALTHY,
    LEASE_FINALIZER,
    ClaimRef,
    ClusterInstance,
    ClusterInstanceStatus,
    ClusterLease,
    ClusterLeaseStatus,
    ClusterPool,
    Diagnostics,
)

log = logging.getLogger(__name__)


def _created(obj: Cached[Any]) -> tuple[str, str]:
    return (obj.raw["metadata"].get("creationTimestamp", ""), obj.name)


def _status(lease: ClusterLease) -> ClusterLeaseStatus:
    """A copy of the lease's status to change and write: the cached model is shared."""
    return lease.status.model_copy(deep=True) if lease.status else ClusterLeaseStatus()


def _is_free(instance: ClusterInstance) -> bool:
    """Ready, unclaimed, not being deleted, and not failing its health check right now."""
    status = instance.status or ClusterInstanceStatus()
    return (
        status.phase == "Ready"
        and instance.spec.claim_ref is None
        and instance.metadata.deletion_timestamp is None
        and not is_false(status.conditions, INSTANCE_HEALTHY)
    )


def setup(context: Context) -> Controller:
    """A lease is reconciled when it changes; when its pool changes (it may now exist, or have
    another TTL); and when an instance changes: the lease that claims it (binding, teardown),
    and the pending leases of its pool (a ready instance may take the head of the queue)."""
    pools = context.cache(ClusterPool)
    instances = context.cache(ClusterInstance, {BY_POOL: index_by_pool, BY_CLAIM: index_by_claim})
    leases = context.cache(
        ClusterLease, {BY_POOL: index_by_pool, QUEUE_OF_POOL: index_queue_of_pool}
    )
    controller = context.controller(ClusterLease)
    reconciler = LeaseReconciler(
        context.client,
        pools=pools,
        instances=instances,
        leases=leases,
        backends=context.backends,
        events=context.events,
        enqueue=controller.enqueue,
        captures=Captures(context.client, context.events, controller.enqueue),
    )

    def of_pool(pool: Json) -> list[str]:
        return [lease.key for lease in leases.by_index(BY_POOL, key_of(pool))]

    def of_instance(raw: Json) -> list[str]:
        instance = instances.decode(raw)
        claim = instance.model.spec.claim_ref
        keys = [f"{instance.model.metadata.namespace}/{claim.name}"] if claim else []
        return keys + [
            key_of(lease) for lease in leases.informer.store.by_index(QUEUE_OF_POOL, pool_key(raw))
        ]

    # A lease reads its pool's spec (existence, TTL, diagnostics), never its status: a pool's
    # status turns at every lease's change, and mapping each turn to every lease of the pool
    # reconciled N leases per create into a pool N deep (issue 19, profile of creates).
    return (
        controller.for_(leases, reconciler.reconcile)
        .watch(pools.informer, of_pool, when=spec_changed)
        .watch(instances.informer, of_instance)
    )


def _phase(lease: ClusterLease) -> str | None:
    return lease.status.phase if lease.status else None


class LeaseReconciler:
    def __init__(
        self,
        client: KubeClient,
        *,
        pools: Typed[ClusterPool],
        instances: Typed[ClusterInstance],
        leases: Typed[ClusterLease],
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

    def queue_of(self, pool_key: str) -> list[Cached[ClusterLease]]:
        """Pending leases of a pool without a reserved instance, oldest first (FIFO)."""
        in_flight = self.claims.leases()
        waiting = [
            lease
            for lease in self.leases.by_index(QUEUE_OF_POOL, pool_key)
            if lease.uid not in in_flight
            and not self.instances.informer.store.by_index(BY_CLAIM, lease.uid)
        ]
        return sorted(waiting, key=_created)

    async def reconcile(self, key: str, cached: Cached[ClusterLease] | None) -> Result:
        # A version this process replaced is skipped: the watch event of its write comes next.
        if cached is None or self.writes.stale(key, cached.raw):
            return Result()
        lease = cached.model
        phase = _phase(lease)
        if phase in ClusterLease.phases.finished:
            # Seen only where the cache holds finished leases too (a CRD without the
            # selectable field): the retention sweep deletes them (lease_retention).
            if LEASE_FINALIZER in (lease.metadata.finalizers or []):
                await diagnostics_records.keep(self.client, lease)
                await remove_finalizer(self.client, LEASES, cached.raw, LEASE_FINALIZER)
            return Result()
        if not cached.deleting:
            written = await add_finalizer(self.client, LEASES, cached.raw, LEASE_FINALIZER)
            self.writes.wrote(key, cached.raw, written)
            cached = self.leases.decode(written)
        release = cached.model.spec.release_requested or cached.deleting
        if ClusterLease.phases.waiting(phase):
            return await self._pending(cached, release)
        if phase == ClusterLease.phases.usable:
            return await self._bound(cached, release)
        return await self._ending(cached)

    # -- Pending ----------------------------------------------------------------------------

    async def _pending(self, cached: Cached[ClusterLease], release: bool) -> Result:
        lease = cached.model
        pool_key = f"{lease.metadata.namespace}/{lease.spec.pool}"
        claimed = [i.raw for i in self.instances.by_index(BY_CLAIM, cached.uid)]
        if not claimed and (in_flight := self.claims.instance_of(cached.uid)):
            claimed = [in_flight]
        status = _status(lease)
        if release:
            for reserved in claimed:  # reserved but never handed out: recycle it all the same
                await delete_fenced(self.client, INSTANCES, reserved)
            status.phase, status.end_reason, status.queue_position = "Released", "Released", None
            status.message = "released before a cluster was bound"
            await self._finish(cached, status, "Released")
            return Result()
        pool = self.pools.get(pool_key)
        if pool is None:
            status.phase, status.message = "Pending", f"pool {lease.spec.pool} does not exist"
            await self._write_status(cached, status)
            return Result(requeue_after=10.0)
        ttl = lease.spec.ttl or pool.model.spec.ttl
        status.effective_ttl = format_duration(parse_duration(ttl))
        if claimed:
            return await self._bind(cached, self.instances.decode(claimed[0]), status, pool_key)
        queue = self.queue_of(pool_key)
        position = _position(queue, cached.uid)
        free = self._free_instances(pool_key)
        if position > len(free):
            # No Event of its own: the queue position is in the status, and the Bound Event
            # says how long the lease waited (one request fewer per queued create, issue 45).
            status.phase, status.queue_position = "Pending", position
            status.message = "waiting for a ready cluster"
            await self._write_status(cached, status)
            return Result()
        claim = ClaimRef(name=cached.name, uid=cached.uid)
        instance, kubeconfig = await self._claim(free[position - 1], claim)
        self.claims.add(cached.uid, instance.raw)
        return await self._bind(cached, instance, status, pool_key, secret=kubeconfig)

    def _free_instances(self, pool_key: str) -> list[Cached[ClusterInstance]]:
        """The pool's instances a lease may claim now, oldest first."""
        taken = self.claims.instances_taken()
        return sorted(
            (
                instance
                for instance in self.instances.by_index(BY_POOL, pool_key)
                if _is_free(instance.model) and instance.uid not in taken
            ),
            key=_created,
        )

    async def _claim(
        self, instance: Cached[ClusterInstance], claim: ClaimRef
    ) -> tuple[Cached[ClusterInstance], Json | None]:
        """The fenced claim of `instance`, and its kubeconfig Secret read alongside: the read
        was a round trip of its own after the claim, on the path a waiting client measures. A
        claim that loses its race wastes one read; a read that fails is made again by the bind,
        which reports its error (the claim is made and remembered either way)."""
        path = json_pointer("spec", "claim_ref", model=ClusterInstance)
        claiming = patch_fenced(
            self.client,
            INSTANCES,
            instance.raw,
            [{"op": "add", "path": path, "value": claim.model_dump(mode="json")}],
        )
        source = _kubeconfig_secret(instance.model)
        if not source:
            return self.instances.decode(await claiming), None

        async def read() -> Json | None:
            with contextlib.suppress(Exception):
                return await self.client.get(SECRETS.path(_namespace(instance.model), source))
            return None

        claimed, secret = await asyncio.gather(claiming, read())
        return self.instances.decode(claimed), secret

    async def _bind(
        self,
        cached: Cached[ClusterLease],
        instance: Cached[ClusterInstance],
        status: ClusterLeaseStatus,
        pool_key: str,
        *,
        secret: Json | None = None,
    ) -> Result:
        """`secret`: the instance's kubeconfig Secret when the claim has just read it."""
        lease = cached.model
        queued = status.phase == "Pending"  # it was written Pending: it waited in the queue
        source = _kubeconfig_secret(instance.model)
        if not source:
            return Result(requeue_after=0.5)  # the instance is publishing its kubeconfig
        if secret is None or secret["metadata"]["name"] != source:
            secret = await self.client.get(SECRETS.path(_namespace(lease), source))
        assert status.effective_ttl is not None  # set by _pending
        with lease_traces.span("lease.bind", lease, {"lessor.cluster.name": instance.name}):
            bound_at = now_seconds()
            expiry = lease.spec.expires_at(bound_at, status.effective_ttl).replace(microsecond=0)
            kubeconfig = await self._issue(lease, instance.model, secret, expiry)
            await lease_kubeconfigs.publish(self.client, cached.raw, kubeconfig, expiry)
            status.phase, status.queue_position, status.message = "Bound", None, ""
            status.instance = ObjectRef(name=instance.name, uid=instance.uid)
            status.cluster_name = instance.name
            status.bound_at, status.expires_at = bound_at, expiry
            status.kubeconfig_secret = lease_kubeconfigs.secret_name(cached.name)
            status.extensions = min(len(lease.spec.extensions), lease.spec.max_extensions)
            cached = await self._write_status(cached, status)
        self._trace_wait(cached, instance, queued=queued)
        created = lease.metadata.creation_timestamp
        waited = (
            f" after {format_duration(max(bound_at - created, datetime.timedelta()))} in the queue"
            if queued and created is not None
            else ""
        )
        await self.events.record(
            cached.raw,
            "Normal",
            "Bound",
            f"bound to {instance.name}{waited}, expires {timestamp(expiry)}",
        )
        for waiting in self.queue_of(pool_key):  # everyone behind moves up one place
            self._enqueue_key(waiting.key)
        return Result(requeue_after=max(0.0, (expiry - utcnow()).total_seconds()))

    @staticmethod
    def _trace_wait(
        cached: Cached[ClusterLease], instance: Cached[ClusterInstance], *, queued: bool
    ) -> None:
        """The lease's wait in the queue, and the start of its cluster if the lease waited for
        it (the cluster became ready after the lease was made: its start may have begun before),
        as spans of its trace (times from the objects)."""
        created = cached.model.metadata.creation_timestamp
        bound = cached.model.status.bound_at if cached.model.status else None
        if not (queued and created and bound):
            return
        lease_traces.record("lease.queue", cached.model, created, bound)
        started = instance.model.metadata.creation_timestamp
        ready = instance.model.status.ready_at if instance.model.status else None
        if started and ready and ready >= created:
            attributes = {
                "lessor.cluster.name": instance.name,
                "lessor.backend.type": instance.model.spec.backend.type,
            }
            lease_traces.record("cluster.start", cached.model, started, ready, attributes)

    async def _issue(
        self,
        lease: ClusterLease,
        instance: ClusterInstance,
        admin_secret: Json,
        expiry: datetime.datetime,
    ) -> str:
        """The lease's own kubeconfig, valid until `expiry`, issued by the instance's backend
        with the cluster's admin kubeconfig (`admin_secret`, the instance's Secret)."""
        meta = instance.metadata
        backend = self.backends.for_spec(instance.spec.backend)
        return await backend.lease_kubeconfig(
            InstanceRef(namespace=meta.namespace or "", name=meta.name or "", uid=meta.uid or ""),
            base64.b64decode(admin_secret["data"]["kubeconfig"]).decode(),
            LeaseRef(name=lease.metadata.name or "", expires_at=expiry),
        )

    async def _reissue(self, cached: Cached[ClusterLease], expiry: datetime.datetime) -> None:
        """An extension's credential, written before the status that shows the new expiry; a
        replay that finds it written (killed before the status) issues nothing."""
        current = await lease_kubeconfigs.read(self.client, cached.raw)
        if current is not None and lease_kubeconfigs.issued_until(current) == timestamp(expiry):
            return
        instance = self._bound_instance(cached.model)
        source = _kubeconfig_secret(instance.model) if instance else None
        if instance is None or not source:
            raise BackendError("the bound cluster or its admin kubeconfig is gone")
        admin = await self.client.get(SECRETS.path(_namespace(instance.model), source))
        kubeconfig = await self._issue(cached.model, instance.model, admin, expiry)
        await lease_kubeconfigs.publish(
            self.client, cached.raw, kubeconfig, expiry, current=current
        )

    async def _write_status(
        self, cached: Cached[ClusterLease], status: ClusterLeaseStatus
    ) -> Cached[ClusterLease]:
        written = self.leases.decode(await write_status(self.client, LEASES, cached.raw, status))
        self.writes.wrote(cached.key, cached.raw, written.raw)
        exists = self.pools.informer.store.get(pool_key(cached.raw)) is not None
        lease_metrics.transition("cluster", cached.model, written.model, pool_exists=exists)
        return written

    # -- Bound ------------------------------------------------------------------------------

    async def _bound(self, cached: Cached[ClusterLease], release: bool) -> Result:
        lease = cached.model
        assert lease.status is not None and lease.status.bound_at is not None
        status = _status(lease)
        expiry = lease.spec.expires_at(lease.status.bound_at, lease.effective_ttl())
        expiry = expiry.replace(microsecond=0)
        applied = min(len(lease.spec.extensions), lease.spec.max_extensions)
        retry: float | None = None
        if applied != lease.status.extensions and not release and utcnow() < expiry:
            try:
                await self._reissue(cached, expiry)
            except (BackendError, ApiError) as error:
                # Never a reason to keep the lease past its expiry: the check below still runs,
                # the extension is applied once a credential for it is, and until then the
                # served kubeconfig lasts until the expiry the status still says.
                log.warning("lease %s: no credential for its extension yet: %s", cached.key, error)
                retry = 5.0
            else:
                status.expires_at, status.extensions = expiry, applied
                cached = await self._write_status(cached, status)
                await self.events.record(
                    cached.raw, "Normal", "Extended", f"expires {timestamp(expiry)}"
                )
        cached = await self._report_health(cached, status)
        now = utcnow()
        if not release and now < expiry:
            left = (expiry - now).total_seconds()
            return Result(requeue_after=min(left, retry) if retry else left)
        reason: EndReason = "Released" if release else "Expired"
        status.phase, status.end_reason = "Recycling", reason
        status.message = f"{reason.lower()}; tearing the cluster down"
        cached = await self._write_status(cached, status)
        await self.events.record(
            cached.raw, "Normal", reason, "the cluster is being destroyed and replaced"
        )
        return await self._ending(cached)

    async def _report_health(
        self, cached: Cached[ClusterLease], status: ClusterLeaseStatus
    ) -> Cached[ClusterLease]:
        """The bound cluster's Healthy condition, mirrored as the lease's ClusterHealthy with an
        Event each time it turns. A cluster that fails under a lease is kept (its owner may still
        be using what works, and it may recover) and said so, never silently replaced; a lease
        whose cluster stayed healthy is never written for it."""
        instance = self._bound_instance(cached.model)
        conditions = instance.model.status.conditions if instance and instance.model.status else []
        healthy = find(conditions, INSTANCE_HEALTHY)
        if healthy is None:
            return cached
        ok = healthy.status == "True"
        previous = find(status.conditions, CLUSTER_HEALTHY)
        if (previous.status == "True" if previous else True) == ok:
            return cached
        message = healthy.message
        status.conditions = with_condition(
            status.conditions, CLUSTER_HEALTHY, ok, healthy.reason or "HealthCheck", message,
            generation=cached.model.metadata.generation,
        )  # fmt: skip
        cached = await self._write_status(cached, status)
        if ok:
            await self.events.record(cached.raw, "Normal", "ClusterRecovered", message)
        else:
            await self.events.record(
                cached.raw,
                "Warning",
                "ClusterUnhealthy",
                f"the cluster fails its health check: {message}",
            )
        return cached

    def _bound_instance(self, lease: ClusterLease) -> Cached[ClusterInstance] | None:
        """The instance the lease is bound to, if it still exists (the same uid)."""
        reference = lease.status.instance if lease.status else None
        if reference is None:
            return None
        instance = self.instances.get(f"{lease.metadata.namespace}/{reference.name}")
        if instance is None or instance.uid != reference.uid:
            return None
        return instance

    # -- Recycling --------------------------------------------------------------------------

    async def _ending(self, cached: Cached[ClusterLease]) -> Result:
        lease = cached.model
        assert lease.status is not None
        status = _status(lease)
        instance = self._bound_instance(lease)
        if instance is not None:
            teardown = instance.model.status.teardown if instance.model.status else None
            if instance.model.status and instance.model.status.phase == "Quarantined":
                if status.phase != "Quarantined":
                    evidence = "; ".join(teardown.evidence if teardown else [])
                    status.phase = "Quarantined"
                    status.message = f"teardown could not be verified: {evidence}"
                    cached = await self._write_status(cached, status)
                    await self.events.record(
                        cached.raw, "Warning", "TeardownQuarantined", status.message
                    )
                return Result()
            if not instance.deleting:
                _, capturing = await self.captures.before_teardown(
                    cached.raw, lease, self._diagnostics_of(lease)
                )
                if capturing is not None:
                    return capturing
                await delete_fenced(self.client, INSTANCES, instance.raw)
            return Result()  # the instance's deletion (or quarantine) brings us back here
        # The instance is gone: teardown was verified, or a person resolved a quarantine by
        # cleaning up and removing the instance.
        reason = lease.status.end_reason or "Released"
        secret = lease_kubeconfigs.secret_name(cached.name)
        await delete_present(self.client, SECRETS.path(_namespace(lease), secret))
        status.phase, status.message = reason, "cluster destroyed; teardown verified"
        await self._finish(cached, status, reason)
        return Result()

    def _diagnostics_of(self, lease: ClusterLease) -> Diagnostics | None:
        """The diagnostics settings of the lease's pool now (None without, or without pool)."""
        pool = self.pools.get(f"{lease.metadata.namespace}/{lease.spec.pool}")
        return pool.model.spec.diagnostics if pool else None

    async def _finish(
        self, cached: Cached[ClusterLease], status: ClusterLeaseStatus, reason: EndReason
    ) -> None:
        if status.ended_at is None:
            status.ended_at = now_seconds()
        cached = await self._write_status(cached, status)
        await self.events.record(cached.raw, "Normal", f"Lease{reason}", status.message)
        # From the moment a bound lease stopped being usable (its Ready condition turned False).
        unusable = find(status.conditions, READY)
        usable = unusable is not None and status.bound_at is not None
        ended = unusable.last_transition_time if unusable and usable else status.ended_at
        lease_traces.record(
            "lease.end", cached.model, ended, attributes={"lessor.lease.outcome": reason}
        )
        # Nothing is left to tear down: a finished lease is deleted at once when asked to (by
        # kubectl, or by the retention sweep, which never sees it in a cache). Its diagnostics
        # record was kept when the capture was Captured. A crash before this write leaves the
        # finalizer to the sweep, which removes it when it deletes the lease.
        await remove_finalizer(self.client, LEASES, cached.raw, LEASE_FINALIZER)


def _position(queue: list[Cached[ClusterLease]], uid: str) -> int:
    """The lease's 1-based place in its pool's queue (after the last when it is not in it)."""
    return next((n for n, lease in enumerate(queue, 1) if lease.uid == uid), len(queue) + 1)


def _namespace(obj: ClusterLease | ClusterInstance) -> str:
    return obj.metadata.namespace or ""


def _kubeconfig_secret(instance: ClusterInstance) -> str | None:
    """The name of the Secret the instance published its admin kubeconfig in, once it did."""
    return instance.status.kubeconfig_secret if instance.status else None
