"""Ceilings that span API replicas, enforced by atomic creates rather than check-then-create.

A caller's concurrent leases are slots `0 .. maxConcurrentLeases-1`; an alias is one name. Each
is a ConfigMap whose name is derived from the identity (and slot or alias), so two replicas
taking the same slot race on one create and exactly one wins. A reservation names its lease,
and the lease names its reservations (the `lessor.dev/reservations` annotation). The operator
deletes a reservation once its lease no longer holds it (ended, quarantined, deleted, or never
created: lessor.operator.tenancy.reservations); a take that finds one its lease no longer holds (the
operator was down) reclaims it, fenced by its uid and resourceVersion.

Taking a slot costs one create when the caller's active leases are known from the watch (issue
45): they name the slots they hold, a free one is picked at random, and only a create that finds
it taken (a lease of another worker not yet seen, an ended lease whose reservation the operator
has not deleted yet) falls back to what a take without that knowledge does: list the held slots
(kube-apiserver's watch cache, names only), pick a free one at random (so a burst of creates by
one identity rarely races for the same slot), and only when none is free check held slots for
reclaim, one by one. (Trying slots in order, as a first version did, cost three round trips per
held slot: at 100 active leases a create took 300 API calls.)
"""

from __future__ import annotations

import datetime
import hashlib
import itertools
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass

from kubernetes.client.exceptions import ApiException

from lessor.apiserver.http.errors import HttpConflictError, TooManyRequestsError
from lessor.apiserver.state.kube import Kube
from lessor.protocol.timestamps import utcnow
from lessor.resources import labels
from lessor.resources.cluster import ClusterLease
from lessor.resources.lease_time import RESERVATION_ORPHAN_GRACE
from lessor.resources.sandbox import SandboxLease

log = logging.getLogger(__name__)

# Random picks among free slots before an ordered scan: enough that racing creates spread out.
_RANDOM_PICKS = 8


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:20]


@dataclass(frozen=True)
class Reservation:
    name: str


class Reservations:
    """`lease_kind`: the kind of lease whose phases free a reservation; `family` keeps each
    kind's slots and aliases apart (a caller's cluster and Sandbox limits are independent);
    `default_ceiling`: the active leases of this kind an owner may hold where its grant sets no
    ceiling, so that every owner has one."""

    def __init__(
        self,
        kube: Kube,
        lease_kind: type[ClusterLease | SandboxLease],
        default_ceiling: int,
        family: str = "",
    ) -> None:
        self.kube = kube
        self.lease_kind = lease_kind
        self.default_ceiling = default_ceiling
        self.family = family

    def take(
        self,
        owner: str,
        ceiling: int | None,
        lease: str,
        alias: str | None,
        *,
        too_many: Callable[[int], str],
        alias_used: str,
        active: list[ClusterLease] | list[SandboxLease] | None = None,
    ) -> list[Reservation]:
        """What a new lease needs before it is created: a slot under the owner's ceiling (its
        grant's, else the default) and, when it asks for one, its alias. All of them, or none:
        a refusal (429 `concurrency_limit` with `too_many(ceiling)`, 409 `alias_active` with
        `alias_used`) or any failure first releases what was taken. `active`: the owner's
        leases that hold a slot, when known without asking (the watch), whose annotations say
        which slots are held."""
        limit = self.default_ceiling if ceiling is None else ceiling
        taken: list[Reservation] = []
        try:
            slot = self.slot(owner, limit, lease, self._named_slots(owner, active))
            if slot is None:
                raise TooManyRequestsError(too_many(limit), reason="concurrency_limit")
            taken.append(slot)
            if alias:
                reserved = self.alias(owner, alias, lease)
                if reserved is None:
                    raise HttpConflictError(alias_used, reason="alias_active")
                taken.append(reserved)
        except BaseException:
            for reservation in taken:
                self.release(reservation)
            raise
        return taken

    def slot(
        self, identity: str, limit: int, lease: str, named: set[int] | None = None
    ) -> Reservation | None:
        """Take a free slot for `lease`, or None when all `limit` slots are held. `named`:
        the slots the owner's active leases name, when known: one pick among the others is
        tried first, without a list."""
        holder = _digest(identity)
        if named is not None and len(named) < limit:
            # From the whole range, as the listed path picks: concurrent creates by one caller
            # that picked among the lowest free slots collided, and each collision cost a list.
            sampled = random.sample(range(limit), min(limit, len(named) + _RANDOM_PICKS))
            index = next(i for i in sampled if i not in named)
            name = self._slot_name(holder, index)
            if self._take(name, "slot", identity, lease, reclaim=False):
                return Reservation(name)
        held = self._held_slots(holder)
        sampled = random.sample(range(limit), min(limit, len(held) + _RANDOM_PICKS))
        picks = [i for i in sampled if i not in held][:_RANDOM_PICKS]
        rest = (i for i in range(limit) if i not in held and i not in picks)
        contested = set()
        for index in itertools.chain(picks, rest):
            # Free when listed: a 409 means a racing create took it (or a reservation from
            # before the holder label), so no reclaim yet.
            if self._take(self._slot_name(holder, index), "slot", identity, lease, reclaim=False):
                return Reservation(self._slot_name(holder, index))
            contested.add(index)
        for index in sorted(i for i in held | contested if i < limit):
            if self._take(self._slot_name(holder, index), "slot", identity, lease, reclaim=True):
                return Reservation(self._slot_name(holder, index))
        return None

    def _slot_name(self, holder: str, index: int) -> str:
        return f"lessor-{self.family}slot-{holder}-{index}"

    def _named_slots(
        self, identity: str, active: list[ClusterLease] | list[SandboxLease] | None
    ) -> set[int] | None:
        """The slot indexes `active` leases name in their annotation (None: not known)."""
        if active is None:
            return None
        prefix = self._slot_name(_digest(identity), 0)[:-1]
        named = set()
        for lease in active:
            annotation = lease.metadata.annotations.get(labels.RESERVATIONS)
            if annotation is None:  # made before the annotation: which slot is not known
                return None
            for name in annotation.split(","):
                if name.startswith(prefix) and name[len(prefix) :].isdigit():
                    named.add(int(name[len(prefix) :]))
        return named

    @staticmethod
    def annotation(reservations: list[Reservation]) -> dict[str, str]:
        """The annotation a lease names its reservations with: their names, comma-separated."""
        return {labels.RESERVATIONS: ",".join(r.name for r in reservations)}

    def _held_slots(self, holder: str) -> set[int]:
        # From the watch cache (a consistent list waits ~100 ms after any write), names only.
        # A slot taken since is found by the create's 409.
        selector = f"{labels.RESERVATION}={self.family}slot,{labels.HOLDER}={holder}"
        names = self.kube.names(self.kube.configmap_path(), selector)
        prefix = f"lessor-{self.family}slot-{holder}-"
        return {int(name[len(prefix) :]) for name in names if name.startswith(prefix)}

    def alias(self, identity: str, alias: str, lease: str) -> Reservation | None:
        name = f"lessor-{self.family}alias-{_digest(identity, alias)}"
        taken = self._take(name, "alias", identity, lease, reclaim=True)
        return Reservation(name) if taken else None

    def release(self, reservation: Reservation) -> None:
        try:
            self.kube.request("DELETE", self.kube.configmap_path(reservation.name))
        except ApiException as error:
            if error.status != 404:
                raise

    def _take(self, name: str, kind: str, identity: str, lease: str, *, reclaim: bool) -> bool:
        """Create the reservation; when it exists and `reclaim`, take it over if stale."""
        body = {
            "metadata": {
                "name": name,
                "labels": {
                    labels.RESERVATION: f"{self.family}{kind}",
                    labels.HOLDER: _digest(identity),
                },
            },
            "data": {"identity": identity, "lease": lease},
        }
        for _ in range(2):
            try:
                self.kube.request("POST", self.kube.configmap_path(), body=body)
                return True
            except ApiException as error:
                if error.status != 409:
                    raise
            if not reclaim or not self._reclaim_if_stale(name):
                return False
        return False

    def _reclaim_if_stale(self, name: str) -> bool:
        try:
            current = self.kube.request("GET", self.kube.configmap_path(name))
        except ApiException as error:
            return bool(error.status == 404)
        metadata = current["metadata"]
        if not self._ended(
            metadata.get("creationTimestamp"), current.get("data", {}).get("lease", "")
        ):
            return False
        options = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "preconditions": {
                "uid": metadata["uid"],
                "resourceVersion": metadata["resourceVersion"],
            },
        }
        try:
            self.kube.request("DELETE", self.kube.configmap_path(name), body=options)
        except ApiException as error:
            return bool(error.status == 404)  # 409: someone else reclaimed or renewed it first
        return True

    def _ended(self, created_at: str | None, lease: str) -> bool:
        """Whether the reservation's lease has ended, or never came to be and the reservation
        (created at `created_at`) is older than a grace period."""
        found = self.kube.find_model(self.lease_kind, lease)
        if found is None:
            if created_at is None:
                return True
            age = utcnow() - datetime.datetime.fromisoformat(created_at)
            return age > RESERVATION_ORPHAN_GRACE
        # A tombstone of the Sandbox admission arbiter is no lease: it holds nothing.
        if isinstance(found, SandboxLease) and found.spec.cancelled:
            return True
        return not found.phases.holds_slot(found.status.phase if found.status else None)
