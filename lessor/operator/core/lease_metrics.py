"""What happened to leases: how long they took to become usable, and how they ended.

Observed where a lease's phase changes, and only once the status write that changed it has
succeeded: `transition(before, after)` compares the phase of the object the reconciler read
with the one kube-apiserver answered the write with. Status writes replace the object at the
resourceVersion that was read (lessor.operator.core.writes.write_status), so of two reconciles of
one lease (a retried one, a replayed one after a crash, one on a stale cache) at most one write
makes a given transition; a replay that finds the phase already written has nothing to change
and counts nothing. A crash between the write and the observation loses that one sample: the
counts are at-most-once, never double.

Labels are bounded: `kind` (cluster, sandbox), the lease's namespace, and its pool only if that
pool exists (an administrator's object); a lease naming a pool that does not exist is counted
under `pool=""`, so nobody who can create leases can make series at will.
"""

from __future__ import annotations

from typing import Literal, TypeVar

from prometheus_client import Counter, Histogram

from lessor.protocol.timestamps import utcnow
from lessor.resources.cluster import ClusterLease
from lessor.resources.sandbox import SandboxLease

Kind = Literal["cluster", "sandbox"]
L = TypeVar("L", ClusterLease, SandboxLease)

BIND_DURATION = Histogram(
    "lessor_lease_bind_duration_seconds",
    "Time from a lease's creation to its cluster Bound or its sandbox Ready (the status write), "
    "queueing included; creationTimestamp has one-second resolution.",
    ["kind", "namespace", "pool"],
    buckets=(0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
)
QUEUE_DURATION = Histogram(
    "lessor_cluster_lease_queue_duration_seconds",
    "Time a cluster lease waited in its pool's queue for a cluster: from its creation to Bound "
    "if it was Pending, 0 if a warm cluster was bound to it at once. The share of leases above "
    "0 is the share the warm target did not serve.",
    ["namespace", "pool"],
    buckets=(0, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800),
)
OUTCOMES = Counter(
    "lessor_lease_outcomes_total",
    "Leases that ended, by outcome: released (by request), expired (TTL or provisioning "
    "deadline) or quarantined (teardown not verified).",
    ["kind", "namespace", "pool", "outcome"],
)
OUTCOME_OF_PHASE = {"Released": "released", "Expired": "expired", "Quarantined": "quarantined"}


def _phase(lease: ClusterLease | SandboxLease) -> str | None:
    return lease.status.phase if lease.status else None


def transition(kind: Kind, before: L, after: L, *, pool_exists: bool) -> None:
    """Count what the status write from `before` to `after` did, if it changed the phase.

    `after` is the object as kube-apiserver answered the write (write_status returns `before`
    itself when nothing needed writing, which changes nothing here)."""
    entered = _phase(after)
    if entered is None or entered == _phase(before):
        return
    namespace = after.metadata.namespace or ""
    pool = after.spec.pool if pool_exists else ""
    if entered == after.phases.usable:
        created = after.metadata.creation_timestamp or utcnow()
        seconds = max(0.0, (utcnow() - created).total_seconds())
        BIND_DURATION.labels(kind, namespace, pool).observe(seconds)
        if kind == "cluster":
            queued = _phase(before) == "Pending"
            QUEUE_DURATION.labels(namespace, pool).observe(seconds if queued else 0.0)
    elif entered in OUTCOME_OF_PHASE:
        OUTCOMES.labels(kind, namespace, pool, OUTCOME_OF_PHASE[entered]).inc()
