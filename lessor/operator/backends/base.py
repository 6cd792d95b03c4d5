"""The interface every cluster backend implements, and what it reports.

Reconcilers only ever talk to this interface, so a new kind of cluster (vcluster, Cluster API,
a cloud's managed clusters) is a new module here and an entry in `lessor.operator.backends`,
with no change to the reconcilers. Every method must be idempotent and safe to call again after
the operator was killed at any point inside it: the reconciler replays from the object's recorded
state and simply calls the method again.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class InstanceRef:
    """Which ClusterInstance a call is about; `uid` makes names reused after deletion distinct."""

    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class LeaseRef:
    """Which lease a credential is for, and the instant it must stop working (its expiresAt)."""

    name: str
    expires_at: datetime.datetime


@dataclass(frozen=True)
class Readiness:
    ready: bool
    message: str
    # Shown in the instance's status so an operator can find the cluster (endpoint, pids, ...).
    details: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TeardownReport:
    """Whether teardown is *verified*: every trace of the cluster was looked for and none remains.

    `evidence` says what was checked and what was found; when unverified, it is kept on the
    instance (which is then Quarantined) and never discarded, so a person can finish the cleanup.
    """

    verified: bool
    evidence: list[str]


class BackendError(RuntimeError):
    """The backend could not do what was asked; the reconciler retries with backoff."""


class ClusterBackend(Protocol):
    async def provision(self, instance: InstanceRef) -> None:
        """Start creating the cluster, or adopt it if it already exists; returns without waiting
        for readiness."""

    async def readiness(self, instance: InstanceRef) -> Readiness:
        """Whether the cluster serves now. Never raises for a cluster that is merely not ready."""

    async def kubeconfig(self, instance: InstanceRef) -> str:
        """An admin kubeconfig for the cluster, self-contained (credentials embedded). It stays
        in lessor's namespace: tenants are handed `lease_kubeconfig`'s."""

    async def lease_kubeconfig(self, instance: InstanceRef, admin: str, lease: LeaseRef) -> str:
        """A kubeconfig of the lease's own (lessor.operator.backends.lease_credentials): a fresh
        key and a certificate for the lease, valid until `lease.expires_at`, with the cluster's
        address and CA from `admin` (what `kubeconfig` returned), whose credential it uses to
        reach the cluster and never hands out. Each call issues a new certificate."""

    async def teardown(self, instance: InstanceRef) -> None:
        """Destroy the cluster and everything it owns; a missing cluster is not an error."""

    async def verify_teardown(self, instance: InstanceRef) -> TeardownReport:
        """Look for every trace of the cluster, independently of what teardown believed it did."""
