"""Prometheus metrics of the API server, correct across gunicorn workers.

Each worker is a process with its own counters; in multiprocess mode (PROMETHEUS_MULTIPROC_DIR
set by the server before it forks) they write to files that /metrics aggregates, so any worker
answers for all of them.
"""

from __future__ import annotations

import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

REQUESTS = Counter(
    "lessor_http_requests_total",
    "HTTP requests by route, method and status.",
    ["route", "method", "status"],
)
LATENCY = Histogram(
    "lessor_http_request_duration_seconds",
    "HTTP request latency by route and method.",
    ["route", "method"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)


class Aliased:
    """One count exported under several names (a metric renamed, its old name kept for a
    release): every increment goes to each, so they always hold the same value, in every
    worker's file as in the aggregate."""

    def __init__(self, *counters: Counter) -> None:
        self.counters = counters

    def inc(self, amount: float = 1) -> None:
        for counter in self.counters:
            counter.inc(amount)


# The one metric the spec names (4.3, 6), `svc_sandbox_admission_rate_limited_total`, where
# "svc stands in identifiers that would otherwise carry the product name": so lessor's, as the
# CLI's LESSOR_TOKEN is the spec's SVC_TOKEN. The literal `svc_` name, which releases up to
# 0.2.0 exported, is kept beside it with the same value for one release (deprecated:
# CHANGELOG.md), so dashboards and alerts on it keep working across the upgrade.
SANDBOX_ADMISSION_RATE_LIMITED = Aliased(
    Counter(
        "lessor_sandbox_admission_rate_limited_total",
        "Sandbox lease creations refused by the per-principal admission rate limit.",
    ),
    Counter(
        "svc_sandbox_admission_rate_limited_total",
        "Deprecated alias of lessor_sandbox_admission_rate_limited_total (the same value), "
        "exported for one release more.",
    ),
)
LEASE_ADMISSION_RATE_LIMITED = Counter(
    "lessor_lease_admission_rate_limited_total",
    "Cluster lease creations refused by the per-principal admission rate limit.",
)
EXECUTION_ADMISSION_RATE_LIMITED = Counter(
    "lessor_execution_admission_rate_limited_total",
    "Sandbox execution creations refused by the per-principal admission rate limit.",
)
LOGIN_RATE_LIMITED = Counter(
    "lessor_login_rate_limited_total",
    "Logins refused by the per-principal rate limit.",
)
SHED = Counter(
    "lessor_http_shed_total",
    "Requests refused at once with 429 because the worker already served --max-in-flight.",
)
SANDBOX_STREAMS_OPEN = Gauge(
    "lessor_sandbox_streams_open",
    "Attach and port-forward sessions open now.",
    ["kind"],
    multiprocess_mode="livesum",
)
WAITS_DECLINED = Counter(
    "lessor_waits_declined_total",
    "Requests that asked to wait and were answered at once instead: the caller's share of "
    "waits on the replica, or the worker's, was held (lessor.apiserver.state.held_requests).",
    ["kind", "bound"],
)
WAITS_ABANDONED = Counter(
    "lessor_waits_abandoned_total",
    "Waiting requests given up because their client had closed the connection.",
    ["kind"],
)
LEASES_WAITING = Gauge(
    "lessor_lease_waits",
    "GETs of a lease waiting for it to change now (waitSeconds): clients waiting for clusters.",
    multiprocess_mode="livesum",
)
SANDBOX_STREAMS_ENDED = Counter(
    "lessor_sandbox_streams_ended_total",
    "Attach and port-forward sessions ended, by why (closed, idle_timeout, lease_not_ready, ...).",
    ["kind", "reason"],
)


def exposition() -> tuple[bytes, str]:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
