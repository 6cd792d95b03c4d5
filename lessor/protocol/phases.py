"""The phases a lease reports and the states of an execution, with the groups every component
decides by. One declaration: the CRD models type their status with these literals, the operator
and the API server decide with these groups, and the CLI reads the API's answers with them, so
no two components can disagree about, say, whether a Recycling lease still counts against its
owner (it does) or can still become Bound (it cannot)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ClusterLeasePhase = Literal["Pending", "Bound", "Released", "Expired", "Recycling", "Quarantined"]
SandboxLeasePhase = Literal[
    "Pending", "Provisioning", "Ready", "Releasing", "Released", "Expired", "Quarantined"
]
ExecutionState = Literal[
    "Queued", "Running", "Succeeded", "Failed", "Cancelled", "TimedOut", "Unknown"
]

# A pool's health, as its status and the API's pool listings report it.
PoolPhase = Literal["Healthy", "Degraded", "Unavailable"]

# Why a lease ended, once it did: its owner released it, or its time ran out.
EndReason = Literal["Released", "Expired"]

# Why a sandbox lease's teardown started: recorded once, never changed.
ReleaseCause = Literal["Requested", "RuntimeTtl", "ProvisioningDeadline"]

# An execution in one of these states has an outcome; nothing will change it again.
EXECUTION_FINISHED: frozenset[str] = frozenset(
    {"Succeeded", "Failed", "Cancelled", "TimedOut", "Unknown"}
)


@dataclass(frozen=True)
class LeasePhases:
    """The groups of one kind of lease. `None` (no phase yet: the operator has not seen the
    lease) belongs to no group but holding."""

    usable: str
    """The phase in which the leased thing can be used (Bound, Ready)."""
    ended: frozenset[str]
    """It will never be usable again: a client waiting for `usable` gives up."""
    finished: frozenset[str]
    """Terminal: nothing happens to the lease any more but its deletion after retention."""
    released_slot: frozenset[str]
    """It no longer counts against its owner's concurrency ceiling."""
    placed: frozenset[str]
    """Given what it leased, or being given it: what its pool counts as leased."""

    def holds_slot(self, phase: str | None) -> bool:
        return phase not in self.released_slot

    def unfinished_selector(self) -> str:
        """The field selector of the leases not `finished`: what the components' caches hold
        (ended history is read when asked for, not kept in memory; issue 45)."""
        return ",".join(f"status.phase!={phase}" for phase in sorted(self.finished))

    @staticmethod
    def waiting(phase: str | None) -> bool:
        """Not yet given anything: new (no phase yet) or Pending."""
        return phase in (None, "Pending")

    @staticmethod
    def queued(phase: str | None, *, deleting: bool, cancelled: bool) -> bool:
        """In its pool's queue: waiting, and neither being deleted nor cancelled (a sandbox
        lease released before it was placed). What the pool's queue depth counts, the queue
        gauges show, and a ready instance is offered to."""
        return LeasePhases.waiting(phase) and not deleting and not cancelled


CLUSTER_LEASE = LeasePhases(
    usable="Bound",
    ended=frozenset({"Released", "Expired", "Recycling", "Quarantined"}),
    finished=frozenset({"Released", "Expired"}),
    # Recycling holds its slot: the cluster is still being torn down on the owner's account.
    released_slot=frozenset({"Released", "Expired", "Quarantined"}),
    placed=frozenset({"Bound"}),
)
SANDBOX_LEASE = LeasePhases(
    usable="Ready",
    ended=frozenset({"Releasing", "Released", "Expired", "Quarantined"}),
    finished=frozenset({"Released", "Expired"}),
    released_slot=frozenset({"Released", "Expired", "Quarantined"}),
    placed=frozenset({"Provisioning", "Ready"}),  # Provisioning: its claim is being placed
)
