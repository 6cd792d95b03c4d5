"""Claims this operator wrote that its instance cache does not show yet.

client-go calls these "expectations". A lease reconciler pairs the queue of a pool with its
free instances, both read from caches that lag the writes of this very process by a watch
event: a lease reconciled in that moment saw the instance just claimed as free, or (its lease
already Bound in the lease cache, the claim not yet in the instance cache) its own place in the
queue one off, chose a taken instance, lost the fenced patch and was requeued with a backoff.
Under a burst of leases that was most binds (issue 19). Remembering the claims until the cache
shows them keeps every reconcile's pairing consistent with what this process already did.

Only the leader writes claims, and its reconciles share one event loop, so no lock is needed.
"""

from __future__ import annotations

import time

from lessor.operator.core.typed import Typed
from lessor.operator.runtime.store import key_of
from lessor.protocol.json_object import Json
from lessor.resources.cluster import ClusterInstance

# A claim the cache never shows (the instance deleted and recreated meanwhile, a relist that
# skipped the version) is forgotten after this long; a decision made on the cache alone then
# loses at most one fenced write.
FORGET_AFTER = 30.0


class ClaimsInFlight:
    def __init__(self, instances: Typed[ClusterInstance]) -> None:
        self.instances = instances
        self._by_lease: dict[str, tuple[Json, float]] = {}  # lease uid: (instance as patched, when)

    def add(self, lease_uid: str, instance: Json) -> None:
        """`instance`: as the claim's patch returned it."""
        self._by_lease[lease_uid] = (instance, time.monotonic())

    def instance_of(self, lease_uid: str) -> Json | None:
        self._prune()
        found = self._by_lease.get(lease_uid)
        return found[0] if found else None

    def leases(self) -> set[str]:
        self._prune()
        return set(self._by_lease)

    def instances_taken(self) -> set[str]:
        self._prune()
        return {instance["metadata"]["uid"] for instance, _ in self._by_lease.values()}

    def _prune(self) -> None:
        """Forget what the cache shows now: the instance claimed (by anyone) or gone."""
        now = time.monotonic()
        for lease_uid, (instance, since) in list(self._by_lease.items()):
            cached = self.instances.get(key_of(instance))
            if (
                cached is None
                or cached.uid != instance["metadata"]["uid"]
                or cached.model.spec.claim_ref is not None
                or now - since > FORGET_AFTER
            ):
                del self._by_lease[lease_uid]
