"""What pools' clusters do: how long they take to start and to tear down, how often a start
fails, how often they are checked and replaced. The figures a platform team sizes a pool's
`warmTarget` from (docs/operations.md, "Sizing a pool").

Each is observed after the status write (or finalizer removal) that made the change has
succeeded. Those writes are fenced by resourceVersion, and what they write (`readyAt`, the
phase, the finalizer) is how a replay after a crash knows it was done, so a replay counts
nothing again: at most once, never double. Labels are bounded by administrators' objects: the
pool's namespace and name and the backend type its template names.
"""

from __future__ import annotations

import datetime
from typing import Literal, get_args

from prometheus_client import Counter, Histogram

from lessor.protocol.timestamps import utcnow
from lessor.resources.cluster import ClusterInstance, ClusterPool

StartFailure = Literal["timeout", "addon_failed"]

START_DURATION = Histogram(
    "lessor_cluster_start_duration_seconds",
    "Time from a cluster's creation to its first Ready (backend started, addons applied, "
    "readiness gates passed); creationTimestamp has one-second resolution.",
    ["namespace", "pool", "backend"],
    buckets=(1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800),
)
START_FAILURES = Counter(
    "lessor_cluster_start_failures_total",
    "Clusters that failed to start, by reason: timeout (not ready within the operator's "
    "--start-timeout) or addon_failed (an addon refused, unreadable or unrenderable).",
    ["namespace", "pool", "backend", "reason"],
)
TEARDOWN_DURATION = Histogram(
    "lessor_cluster_teardown_duration_seconds",
    "Time from the start of a cluster's teardown to its verification by the backend.",
    ["namespace", "pool", "backend"],
    buckets=(0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600),
)
CHECKS = Counter(
    "lessor_cluster_checks_total",
    "Checks of clusters (the backend's, then the readiness gates): at every pass while a cluster "
    "starts, every few seconds while it fails, every healthCheck.period while it is ready, by "
    "result (ready, not_ready).",
    ["namespace", "pool", "result"],
)
REPLACED = Counter(
    "lessor_clusters_replaced_total",
    "Unleased clusters deleted to be replaced, by reason: unhealthy (failed healthCheck."
    "failureThreshold checks in a row after being ready), failed_to_start (never ready).",
    ["namespace", "pool", "reason"],
)


def _labels(instance: ClusterInstance) -> tuple[str, str, str]:
    return instance.metadata.namespace or "", instance.spec.pool, instance.spec.backend.type


def pool_seen(pool: ClusterPool) -> None:
    """Make the pool's start-failure series at 0, so that its first failure is an increase
    (a counter that appears at 1 is invisible to rate() and increase())."""
    labels = pool.metadata.namespace or "", pool.metadata.name or "", pool.spec.backend.type
    for reason in get_args(StartFailure):
        START_FAILURES.labels(*labels, reason)


def started(instance: ClusterInstance) -> None:
    created = instance.metadata.creation_timestamp
    if created is not None:
        seconds = max(0.0, (utcnow() - created).total_seconds())
        START_DURATION.labels(*_labels(instance)).observe(seconds)


def failed_to_start(instance: ClusterInstance, reason: StartFailure) -> None:
    START_FAILURES.labels(*_labels(instance), reason).inc()


def torn_down(instance: ClusterInstance, started_at: datetime.datetime) -> None:
    seconds = max(0.0, (utcnow() - started_at).total_seconds())
    TEARDOWN_DURATION.labels(*_labels(instance)).observe(seconds)
