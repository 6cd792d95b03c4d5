"""Reservations (lessor.apiserver.leases.reservations) deleted once their lease no longer holds
them: the lease ended, was quarantined or deleted, or was never created (an API replica died
between the reservation's create and the lease's).

Why here and not by an owner reference: the API server made each new lease the owner of its
reservations with a PATCH after the create, one kube-apiserver request in six of a create, and
the garbage collector deleted them only with the lease, a day after it ended (issue 45). Here a
reservation goes when its lease stops holding it, which also leaves the next create's slot
free, and the create pays nothing. A reservation this controller misses (the operator down) is
still reclaimed by the next take of its slot or alias, fenced, as before.

The reconciler reads the reservation and its lease from the caches and deletes the reservation
fenced by its uid, so it is replayable at any point; a lease missing from the cache is read
from kube-apiserver (the cache may leave finished leases out, and a new reservation's lease may
not have arrived yet).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable

from lessor.operator.core.kinds import resource_type
from lessor.operator.core.typed import Typed
from lessor.operator.core.writes import delete_fenced
from lessor.operator.runtime.client import ConflictError, NotFoundError, ResourceType
from lessor.operator.runtime.controller import Controller, Result
from lessor.operator.runtime.informer import Informer
from lessor.operator.runtime.store import key_of
from lessor.operator.wiring.context import Context
from lessor.protocol.json_object import Json
from lessor.protocol.timestamps import utcnow
from lessor.resources import labels
from lessor.resources.cluster import ClusterLease
from lessor.resources.lease_time import RESERVATION_ORPHAN_GRACE
from lessor.resources.sandbox import SandboxLease

log = logging.getLogger(__name__)

RESERVATIONS = ResourceType("", "v1", "configmaps", "ConfigMap")
BY_LEASE = "by-lease"
LeaseKind = type[ClusterLease] | type[SandboxLease]


def _lease_kind(reservation: Json) -> LeaseKind:
    family = reservation["metadata"].get("labels", {}).get(labels.RESERVATION, "")
    return SandboxLease if family.startswith("sandbox-") else ClusterLease


def lease_key(reservation: Json) -> str:
    """`plural/namespace/name` of the lease a reservation names."""
    lease = (reservation.get("data") or {}).get("lease", "")
    plural = _lease_kind(reservation).crd.plural
    return f"{plural}/{reservation['metadata'].get('namespace')}/{lease}"


def holds(lease: ClusterLease | SandboxLease) -> bool:
    """Whether the lease still counts against its owner (a cancelled Sandbox lease, the
    admission arbiter's tombstone, never did)."""
    if isinstance(lease, SandboxLease) and lease.spec.cancelled:
        return False
    return lease.phases.holds_slot(lease.status.phase if lease.status else None)


def setup(context: Context) -> Controller:
    """A reservation is reconciled when it appears and when its lease's phase changes."""
    reservations = context.manager.informer(
        context.client,
        RESERVATIONS,
        namespace=context.settings.namespace,
        label_selector=labels.RESERVATION,
    )
    # A Role from before this controller grants no ConfigMaps (an upgrade that kept the old
    # RBAC): the controller waits for the right, the rest of the operator serves, and the API
    # servers reclaim what it would have deleted.
    reservations.optional = True
    reservations.store.add_indexer(BY_LEASE, lambda obj: [lease_key(obj)])
    leases: dict[str, Typed[ClusterLease] | Typed[SandboxLease]] = {
        ClusterLease.crd.plural: context.cache(ClusterLease)
    }
    if context.settings.agent_sandbox_mode == "external":
        leases[SandboxLease.crd.plural] = context.cache(SandboxLease)
    sweep = ReservationSweep(context, reservations, leases)
    controller = context.controller("reservation", sweep.reconcile).watch(reservations)

    def of_lease(plural: str) -> Callable[[Json], list[str]]:
        def keys(lease: Json) -> list[str]:
            found = reservations.store.by_index(BY_LEASE, f"{plural}/{key_of(lease)}")
            return [key_of(reservation) for reservation in found]

        return keys

    for plural, typed in leases.items():
        controller.watch(typed.informer, of_lease(plural), when=_phase_changed)
    return controller


def _phase_changed(old: Json, new: Json) -> bool:
    """Raw, as every update predicate reads: it runs on each watch event of every lease, and
    only the phase matters (a model per event would cost a validation nobody reads)."""
    return bool(old.get("status", {}).get("phase") != new.get("status", {}).get("phase"))


class ReservationSweep:
    def __init__(
        self,
        context: Context,
        reservations: Informer,
        leases: dict[str, Typed[ClusterLease] | Typed[SandboxLease]],
    ) -> None:
        self.client = context.client
        self.reservations = reservations
        self.leases = leases

    async def reconcile(self, key: str) -> Result:
        reservation = self.reservations.store.get(key)
        if reservation is None:
            return Result()
        kind = _lease_kind(reservation)
        plural, namespace, name = lease_key(reservation).split("/", 2)
        typed = self.leases.get(plural)
        cached = typed.get(f"{namespace}/{name}") if typed else None
        if cached is not None and holds(cached.model):
            return Result()
        if cached is None:
            created = datetime.datetime.fromisoformat(reservation["metadata"]["creationTimestamp"])
            left = (created + RESERVATION_ORPHAN_GRACE - utcnow()).total_seconds()
            if left > 0:
                return Result(requeue_after=left)
            try:
                stored = await self.client.get(resource_type(kind).path(namespace, name))
            except NotFoundError:
                stored = None
            if stored is not None and holds(kind.model_validate(stored)):
                return Result()
        try:
            await delete_fenced(self.client, RESERVATIONS, reservation)
        except ConflictError:  # reclaimed and taken again by a new lease meanwhile
            return Result()
        log.info("reservation %s deleted: its lease %s holds it no more", key, name)
        return Result()
