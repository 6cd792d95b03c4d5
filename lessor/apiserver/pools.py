"""/v1/pools and /v1/status: what a caller may lease from, and how the service is doing."""

from __future__ import annotations

from typing import Any

from lessor.apiserver.authn import Principal
from lessor.apiserver.errors import NotFoundError
from lessor.apiserver.kube import Kube
from lessor.apiserver.leases import ACTIVE
from lessor.apiserver.policy import visible_pools
from lessor.resources.cluster import ClusterPool

Json = dict[str, Any]
CLUSTER_CAPABILITIES = ["lease", "kubeconfig", "extend", "release"]
REDACTED = "redacted"


def pool_record(pool: ClusterPool) -> Json:
    """The pool status record of spec 2.3."""
    status = pool.status
    counts = ("ready", "leased", "creating", "recycling", "unhealthy", "quarantined")
    record: Json = {
        "name": pool.metadata.name,
        "resourceKind": "Cluster",
        "capabilities": CLUSTER_CAPABILITIES,
        "phase": (status.phase if status else None) or "Unavailable",
    }
    for count in counts:
        record[count] = getattr(status, count) if status else 0
    record["queueDepth"] = status.queue_depth if status else 0
    record["policy"] = {
        "mode": pool.spec.policy.mode,
        "ttl": pool.spec.ttl,
        "warmTarget": pool.spec.warm_target,
    }
    return record


class PoolService:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def all_pools(self) -> list[ClusterPool]:
        pools = self.kube.list_objects("clusterpools", cached=True)
        return [ClusterPool.model_validate(p) for p in pools]

    def visible(self, principal: Principal) -> list[ClusterPool]:
        pools = {pool.metadata.name or "": pool for pool in self.all_pools()}
        allowed = visible_pools(principal.policy.spec, principal.claims, sorted(pools))
        return [pools[name] for name in allowed]

    def list_records(self, principal: Principal) -> list[Json]:
        return [pool_record(pool) for pool in self.visible(principal)]

    def one(self, principal: Principal, name: str) -> Json:
        for pool in self.visible(principal):
            if pool.metadata.name == name:
                return pool_record(pool)
        raise NotFoundError(f"no pool {name}")

    def leases(self, principal: Principal, name: str) -> list[Json]:
        """Active leases of a shared pool; other tenants' requester, alias and metadata are
        redacted."""
        self.one(principal, name)
        rows = []
        for lease in self.kube.list_objects("clusterleases", cached=True):
            spec, status = lease.get("spec", {}), lease.get("status", {})
            if spec.get("pool") != name or status.get("phase") not in ACTIVE:
                continue
            mine = spec.get("requester") == principal.identity
            row: Json = {
                "id": lease["metadata"]["name"],
                "phase": status.get("phase", "Pending"),
                "profile": name,
                "cluster_name": status.get("clusterName"),
                "requester": spec.get("requester") if mine else REDACTED,
                "expires_at": status.get("expiresAt"),
            }
            if mine:
                for key in ("alias", "metadata"):
                    if key in spec:
                        row[key] = spec[key]
            rows.append(row)
        return rows

    def status_rows(self, principal: Principal | None) -> list[Json]:
        pools = self.visible(principal) if principal else self.all_pools()
        rows = []
        for pool in pools:
            record = pool_record(pool)
            row = {key: record[key] for key in ("name", "ready", "leased", "creating")}
            if principal is not None:
                row.update(phase=record["phase"], quarantined=record["quarantined"])
            rows.append(row)
        return rows
