"""Prometheus metrics of the controller runtime, named after controller-runtime's."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

QUEUE_DEPTH = Gauge("lessor_workqueue_depth", "Keys waiting in the work queue.", ["name"])
QUEUE_ADDS = Counter("lessor_workqueue_adds_total", "Keys added to the work queue.", ["name"])
QUEUE_RETRIES = Counter("lessor_workqueue_retries_total", "Rate-limited re-adds of keys.", ["name"])
QUEUE_LATENCY = Histogram(
    "lessor_workqueue_queue_duration_seconds",
    "How long a key waited in the queue before a worker took it.",
    ["name"],
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60),
)
RECONCILE_TOTAL = Counter(
    "lessor_reconcile_total",
    "Reconciles by result: success, requeue, conflict or error.",
    ["controller", "result"],
)
RECONCILE_ERRORS = Counter(
    "lessor_reconcile_errors_total", "Reconciles that raised.", ["controller"]
)
RECONCILE_DURATION = Histogram(
    "lessor_reconcile_duration_seconds",
    "Time spent in one reconcile.",
    ["controller"],
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30),
)
LEADER = Gauge("lessor_leader", "1 while this process holds the leader election lease.")
