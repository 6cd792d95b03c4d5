"""/v1/pools and /v1/status: what a caller may lease from, and how the service is doing.

Every pool the caller may lease from is listed, whatever its kind (spec 4.2): ClusterPools by
the AccessPolicy's rules, and, while the Sandbox API is served, SandboxPools by the caller's
Sandbox grants with the `lease` verb, as `resourceKind: Sandbox` with the capabilities the pool
gives (`exec` only with a runner, `port-forward` only with declared ports). A ClusterPool and a
SandboxPool of the same name are both listed; GET /v1/pools/:name answers with the ClusterPool.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Literal

import cachetools

from lessor.apiserver.auth.authenticator import Principal
from lessor.apiserver.http.errors import HttpNotFoundError
from lessor.apiserver.leases.cluster_leases import OBJECT_NAME
from lessor.apiserver.policy.evaluation import sandbox_grant, visible_pools
from lessor.apiserver.state.kube import Kube
from lessor.apiserver.state.watched import WatchedObjects
from lessor.protocol.responses import PoolLease, PoolPolicy, PoolRecord, StatusPool
from lessor.protocol.responses import SandboxLease as SandboxLeaseView
from lessor.resources.base import Condition, instant_json, problems_for_tenants
from lessor.resources.cluster import (
    ClusterLease,
    ClusterLeaseStatus,
    ClusterPool,
    ClusterPoolStatus,
)
from lessor.resources.sandbox import SandboxLease, SandboxPool, SandboxPoolStatus

CLUSTER_CAPABILITIES = ["lease", "kubeconfig", "extend", "release"]
SANDBOX_CAPABILITIES = ["lease", "extend", "release", "logs", "attach"]
REDACTED = "redacted"
ANONYMOUS_TTL = 2.0  # seconds


def pool_record(pool: ClusterPool) -> PoolRecord:
    """The pool status record of spec 2.3."""
    policy = PoolPolicy(mode=pool.spec.policy.mode, ttl=pool.spec.ttl, warmTarget=pool.warm_now())
    return _record(pool.metadata.name, "Cluster", CLUSTER_CAPABILITIES, pool.status, policy)


def sandbox_pool_record(pool: SandboxPool) -> PoolRecord:
    """A SandboxPool as a pool status record (spec 2.3), with the operator's counts. Its policy
    is always `fixed`: a SandboxPool keeps `warm` sandboxes (agent-sandbox's warm pool), and
    has no autoscaler."""
    capabilities = list(SANDBOX_CAPABILITIES)
    if pool.spec.runner is not None:
        capabilities.append("exec")
    if pool.spec.ports:
        capabilities.append("port-forward")
    policy = PoolPolicy(mode="fixed", ttl=pool.spec.default_ttl, warmTarget=pool.spec.warm)
    return _record(pool.metadata.name, "Sandbox", capabilities, pool.status, policy)


def _record(
    name: str | None,
    kind: Literal["Cluster", "Sandbox"],
    capabilities: list[str],
    status: ClusterPoolStatus | SandboxPoolStatus | None,
    policy: PoolPolicy,
) -> PoolRecord:
    """A record from the counts both kinds of pool status keep (0 before the operator's first
    pass), and its message from their conditions."""
    record = PoolRecord(
        name=name,
        resource_kind=kind,
        capabilities=capabilities,
        phase=(status.phase if status else None) or "Unavailable",
        ready=status.ready if status else 0,
        leased=status.leased if status else 0,
        creating=status.creating if status else 0,
        recycling=status.recycling if status else 0,
        unhealthy=status.unhealthy if status else 0,
        quarantined=status.quarantined if status else 0,
        queue_depth=status.queue_depth if status else 0,
        policy=policy,
    )
    _explain(record, status.conditions if status else [])
    return record


def _explain(record: PoolRecord, conditions: list[Condition]) -> None:
    """The record's `message`: which of the pool's conditions are False, and why in a word (the
    details are in the pool's status, for administrators), if any."""
    failing = problems_for_tenants(conditions)
    if failing:
        record.message = "; ".join(failing)


class PoolService:
    def __init__(
        self,
        kube: Kube,
        watched_pools: WatchedObjects,
        watched_leases: WatchedObjects,
        sandbox_served: Callable[[], bool] = lambda: False,
        own_sandbox_leases: Callable[[Principal], list[SandboxLeaseView]] = lambda _: [],
    ) -> None:
        self.kube = kube
        self.watched_pools, self.watched_leases = watched_pools, watched_leases
        self.sandbox_served = sandbox_served
        self.own_sandbox_leases = own_sandbox_leases  # SandboxLeaseService.list_mine
        # What anyone may read without credentials, computed at most once per ANONYMOUS_TTL:
        # unauthenticated callers cannot turn their requests into LISTs on kube-apiserver.
        self._anonymous: cachetools.TTLCache[str, list[StatusPool]] = cachetools.TTLCache(
            maxsize=1, ttl=ANONYMOUS_TTL
        )
        self._anonymous_lock = threading.Lock()

    def _cluster_pools(self) -> list[ClusterPool]:
        return [ClusterPool.model_validate(p) for p in self.watched_pools.listed()]

    def _sandbox_pools(self) -> list[SandboxPool]:
        if not self.sandbox_served():
            return []
        pools = self.kube.list_objects(SandboxPool.crd.plural, cached=True)
        return [SandboxPool.model_validate(p) for p in pools]

    def records(self, principal: Principal | None) -> list[PoolRecord]:
        """Every pool's record, or with a principal those it may lease from."""
        clusters = {pool.metadata.name or "": pool for pool in self._cluster_pools()}
        names = sorted(clusters)
        if principal is not None:
            names = visible_pools(principal.policy.spec, principal.claims, names)
        records = [pool_record(clusters[name]) for name in names]
        for pool in sorted(self._sandbox_pools(), key=lambda p: p.metadata.name or ""):
            name = pool.metadata.name or ""
            if principal is None or sandbox_grant(
                principal.policy.spec, principal.claims, name, "lease"
            ):
                records.append(sandbox_pool_record(pool))
        return records

    def one(self, principal: Principal, name: str) -> PoolRecord:
        for record in self.records(principal):
            if record.name == name:
                return record
        # A ClusterPool made a moment ago may not have reached this worker's watch yet: ask
        # kube-apiserver before answering that it does not exist.
        found = self.watched_pools.read(name) if OBJECT_NAME.match(name) else None
        if found is not None and visible_pools(principal.policy.spec, principal.claims, [name]):
            return pool_record(ClusterPool.model_validate(found))
        raise HttpNotFoundError(f"no pool {name}")

    def leases(self, principal: Principal, name: str) -> list[PoolLease]:
        """Active leases of a shared pool; other tenants' requester, alias and metadata are
        redacted. A Sandbox pool shows the caller's own leases only (spec: a caller sees its
        own Sandbox leases), without a requester: no Sandbox response names one."""
        if self.one(principal, name).resource_kind == "Sandbox":
            return self._own_sandbox_leases(principal, name)
        rows = []
        for lease in map(ClusterLease.model_validate, self.watched_leases.listed()):
            spec, status = lease.spec, lease.status or ClusterLeaseStatus()
            if spec.pool != name or not ClusterLease.phases.holds_slot(status.phase):
                continue
            mine = spec.requester == principal.owner
            row = PoolLease(
                id=lease.metadata.name,
                phase=status.phase or "Pending",
                profile=name,
                cluster_name=status.cluster_name,  # null until the lease is bound
                requester=principal.identity if mine else REDACTED,
                expires_at=None if status.expires_at is None else instant_json(status.expires_at),
            )
            if mine and spec.alias is not None:
                row.alias = spec.alias
            if mine and spec.metadata is not None:
                row.metadata = spec.metadata
            rows.append(row)
        return rows

    def _own_sandbox_leases(self, principal: Principal, name: str) -> list[PoolLease]:
        """The caller's Sandbox leases of the pool as pool leases: no cluster (null), no
        requester (absent: no Sandbox response names one)."""
        rows = []
        for lease in self.own_sandbox_leases(principal):
            if lease.pool != name or not SandboxLease.phases.holds_slot(lease.phase):
                continue
            row = PoolLease(
                id=lease.id,
                phase=lease.phase,
                profile=name,
                cluster_name=None,
                expires_at=lease.expires_at,
            )
            if lease.alias:
                row.alias = lease.alias
            rows.append(row)
        return rows

    def status_rows(self, principal: Principal | None) -> list[StatusPool]:
        if principal is None:
            with self._anonymous_lock:
                if "rows" not in self._anonymous:
                    self._anonymous["rows"] = self._status_rows(None)
                return self._anonymous["rows"]
        return self._status_rows(principal)

    def _status_rows(self, principal: Principal | None) -> list[StatusPool]:
        """A row per pool: its counts to anyone, and its phase and quarantined count to a
        caller (spec 4.6)."""
        rows = []
        for record in self.records(principal):
            row = StatusPool(
                name=record.name, ready=record.ready, leased=record.leased, creating=record.creating
            )
            if principal is not None:
                row.phase = record.phase
                row.quarantined = record.quarantined
            rows.append(row)
        return rows
