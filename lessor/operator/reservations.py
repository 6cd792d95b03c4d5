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

from lessor.operator.context import Context
from lessor.operator.kinds import LEASES, SANDBOX_LEASES
from lessor.operator.runtime.client import ConflictError, NotFoundError, ResourceType
from lessor.operator.runtime.controller import Controller, Result
from lessor.operator.runtime.informer import Informer
from lessor.operator.runtime.store import key_of
from lessor.operator.writes import delete_fenced
from lessor.protocol.json_object import Json
from lessor.protocol.phases import CLUSTER_LEASE, SANDBOX_LEASE, LeasePhases
from lessor.protocol.timestamps import utcnow

log = logging.getLogger(__name__)

RESERVATIONS = ResourceType("", "v1", "configmaps", "ConfigMap")
KIND_LABEL = "lessor.dev/reservation"  # its value: [sandbox-](slot|alias)
BY_LEASE = "by-lease"
# A reservation is made just before its lease: one whose lease is not found is left this long.
ORPHAN_GRACE = datetime.timedelta(seconds=30)


def _lease_kind(reservation: Json) -> tuple[ResourceType, LeasePhases]:
    family = reservation["metadata"].get("labels", {}).get(KIND_LABEL, "")
    if family.startswith("sandbox-"):
        return SANDBOX_LEASES, SANDBOX_LEASE
    return LEASES, CLUSTER_LEASE


def lease_key(reservation: Json) -> str:
    """`plural/namespace/name` of the lease a reservation names."""
    kind, _ = _lease_kind(reservation)
    lease = (reservation.get("data") or {}).get("lease", "")
    return f"{kind.plural}/{reservation['metadata'].get('namespace')}/{lease}"


def holds(lease: Json, phases: LeasePhases) -> bool:
    """Whether the lease still counts against its owner (a cancelled Sandbox lease, the
    admission arbiter's tombstone, never did)."""
    if lease.get("spec", {}).get("cancelled"):
        return False
    return phases.holds_slot(lease.get("status", {}).get("phase"))


def setup(context: Context) -> Controller:
    """A reservation is reconciled when it appears and when its lease's phase changes."""
    reservations = context.manager.informer(
        context.client,
        RESERVATIONS,
        namespace=context.settings.namespace,
        label_selector=KIND_LABEL,
    )
    # A Role from before this controller grants no ConfigMaps (an upgrade that kept the old
    # RBAC): the controller waits for the right, the rest of the operator serves, and the API
    # servers reclaim what it would have deleted.
    reservations.optional = True
    reservations.store.add_indexer(BY_LEASE, lambda obj: [lease_key(obj)])
    leases = {LEASES.plural: context.informer(LEASES)}
    if context.settings.agent_sandbox_mode == "external":
        leases[SANDBOX_LEASES.plural] = context.informer(SANDBOX_LEASES)
    sweep = ReservationSweep(context, reservations, leases)
    controller = context.controller("reservation", sweep.reconcile).watch(reservations)

    def of_lease(plural: str) -> Callable[[Json], list[str]]:
        def keys(lease: Json) -> list[str]:
            found = reservations.store.by_index(BY_LEASE, f"{plural}/{key_of(lease)}")
            return [key_of(reservation) for reservation in found]

        return keys

    for plural, informer in leases.items():
        controller.watch(informer, of_lease(plural), when=_phase_changed)
    return controller


def _phase_changed(old: Json, new: Json) -> bool:
    return bool(old.get("status", {}).get("phase") != new.get("status", {}).get("phase"))


class ReservationSweep:
    def __init__(
        self, context: Context, reservations: Informer, leases: dict[str, Informer]
    ) -> None:
        self.client = context.client
        self.reservations = reservations
        self.leases = leases

    async def reconcile(self, key: str) -> Result:
        reservation = self.reservations.store.get(key)
        if reservation is None:
            return Result()
        kind, phases = _lease_kind(reservation)
        plural, namespace, name = lease_key(reservation).split("/", 2)
        informer = self.leases.get(plural)
        lease = informer.store.get(f"{namespace}/{name}") if informer else None
        if lease is not None and holds(lease, phases):
            return Result()
        if lease is None:
            created = datetime.datetime.fromisoformat(reservation["metadata"]["creationTimestamp"])
            left = (created + ORPHAN_GRACE - utcnow()).total_seconds()
            if left > 0:
                return Result(requeue_after=left)
            try:
                lease = await self.client.get(kind.path(namespace, name))
            except NotFoundError:
                lease = None
            if lease is not None and holds(lease, phases):
                return Result()
        try:
            await delete_fenced(self.client, RESERVATIONS, reservation)
        except ConflictError:  # reclaimed and taken again by a new lease meanwhile
            return Result()
        log.info("reservation %s deleted: its lease %s holds it no more", key, name)
        return Result()
