"""Scale of the operator: its memory (RSS) and reconcile queue latency with 10,000 ClusterLeases
and 1,000 ClusterPools in its cache. The objects exist before the operator starts, as leases
created through the API while no operator ran (with the API server's finalizer and labels; a
restart of a running installation, whose leases already have their status, writes nothing);
the pools keep nothing warm, so every lease stays Pending and is reconciled (a queue position
written) without creating clusters.

With `--ended N`, a history of N ended leases (Released, as a day of CI jobs leaves them before
their retention) exists too, and once the operator has drained, an API server (2 workers) is
started on the same cluster: its workers' RSS, and GET /v1/leases of one caller who holds 10
leases (p50 of 200), which should not depend on the history (issue 45).

Usage: python -m bench.operator_scale [--pools 1000] [--leases 10000] [--ended 0]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bench.stack import (
    NAMESPACE,
    TOKEN,
    Client,
    api_server,
    configure,
    healthy,
    metrics,
    percentiles,
    progress,
)
from lessor.apiserver.state.kube import Kube
from lessor.controlplane.binaries import ensure_binaries
from lessor.controlplane.cluster import LocalControlPlane
from lessor.controlplane.ports import reserved_port
from lessor.protocol.timestamps import timestamp, utcnow
from lessor.resources.cluster import LEASE_FINALIZER

BATCH = 500


def create(cluster: LocalControlPlane, items: list[dict[str, Any]]) -> None:
    for start in range(0, len(items), BATCH):
        batch = {"apiVersion": "v1", "kind": "List", "items": items[start : start + BATCH]}
        cluster.kubectl("create", "-f", "-", input=json.dumps(batch), timeout=600)


def quantile(values: dict[str, float], queue: str, name: str) -> float | None:
    """The upper bound of the queue-latency bucket holding quantile `name` ("p99"), as
    Prometheus' histogram_quantile would give it without interpolation."""
    wanted = float(name[1:]) / 100
    buckets = sorted(
        (float(key.split('le="')[1].split('"')[0]), count)
        for key, count in values.items()
        if key.startswith("lessor_workqueue_queue_duration_seconds_bucket")
        and f'name="{queue}"' in key
    )
    total = buckets[-1][1] if buckets else 0
    for bound, count in buckets:
        if total and count >= wanted * total:
            return bound if bound != float("inf") else None  # None: beyond the last bucket
    return None


def history(cluster: LocalControlPlane, count: int, pools: int) -> None:
    """`count` Released leases, as the operator leaves them (no finalizer, endedAt now), made
    by 8 threads straight on kube-apiserver: a create, then the status."""
    kube = Kube(str(cluster.kubeconfig), NAMESPACE)
    ended = timestamp(utcnow())

    def make(n: int) -> None:
        pool = f"p{n % pools:04d}"
        lease = {"apiVersion": "lessor.dev/v1alpha1", "kind": "ClusterLease",
                 "metadata": {"name": f"h{n:06d}",
                              "labels": {"lessor.dev/pool": pool,
                                         "lessor.dev/requester": f"r{n % 5000}"}},
                 "spec": {"pool": pool, "requester": f"r{n % 5000}", "ttl": "1h"}}  # fmt: skip
        created = kube.create("clusterleases", lease)
        created["status"] = {"phase": "Released", "endReason": "Released", "endedAt": ended,
                             "message": "released"}  # fmt: skip
        path = f"/apis/lessor.dev/v1alpha1/namespaces/{NAMESPACE}/clusterleases/h{n:06d}/status"
        kube.request("PUT", path, body=created)

    with ThreadPoolExecutor(8) as pool_of_threads:
        for done, _ in enumerate(pool_of_threads.map(make, range(count)), 1):
            if done % 10000 == 0:
                progress(f"  {done} ended leases")


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(child) for child in path.read_text().split()] if path.exists() else []


def api_figures(cluster: LocalControlPlane, work: Path) -> dict[str, Any]:
    """An API server on the cluster: its workers' RSS once synced, and one caller's list."""
    port, reservation = reserved_port()
    reservation.release()
    with (work / "api.log").open("ab") as log:
        api = subprocess.Popen(
            [sys.executable, "-m", *api_server(cluster, port, 2)], stdout=log, stderr=log
        )
    try:
        started = time.monotonic()
        client = Client(f"http://127.0.0.1:{port}", lambda *_: f"Bearer {TOKEN}")
        while not healthy(client):
            time.sleep(0.1)
        for _ in range(10):
            status, body = client.call("POST", "/v1/leases", {"profile": "p0000"})
            assert status == 202, body
        latencies = []
        for _ in range(200):
            before = time.perf_counter()
            status, body = client.call("GET", "/v1/leases")
            latencies.append(time.perf_counter() - before)
            assert status == 200 and len(body) == 10, body
        ready = time.monotonic() - started
        return {
            "api_ready_and_listed_s": round(ready, 1),
            "api_worker_rss_mib": [rss_mib(child) for child in children(api.pid)],
            "list_one_caller_ms": percentiles(latencies, 1000, 2),
        }
    finally:
        api.terminate()
        api.wait(timeout=60)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def run(pools: int = 1000, leases: int = 10000, ended: int = 0) -> dict[str, Any]:
    binaries = ensure_binaries(progress)
    with tempfile.TemporaryDirectory(prefix="lessor-scale-") as directory:
        cluster = LocalControlPlane(Path(directory) / "cluster")
        cluster.start(binaries, with_node=False)
        operator = None
        try:
            configure(cluster, Ed25519PrivateKey.generate())
            progress(f"creating {pools} pools, {leases} leases and {ended} ended ones")
            started = time.monotonic()
            create(cluster, [
                {"apiVersion": "lessor.dev/v1alpha1", "kind": "ClusterPool",
                 "metadata": {"name": f"p{n:04d}", "namespace": NAMESPACE},
                 "spec": {"warmTarget": 0, "backend": {"type": "local"}}}
                for n in range(pools)
            ])  # fmt: skip
            create(cluster, [
                {"apiVersion": "lessor.dev/v1alpha1", "kind": "ClusterLease",
                 "metadata": {"name": f"l{n:05d}", "namespace": NAMESPACE,
                              "finalizers": [LEASE_FINALIZER],
                              "labels": {"lessor.dev/pool": f"p{n % pools:04d}",
                                         "lessor.dev/requester": "bench"}},
                 "spec": {"pool": f"p{n % pools:04d}", "requester": "bench"}}
                for n in range(leases)
            ])  # fmt: skip
            history(cluster, ended, pools)
            created_in = time.monotonic() - started
            port, reservation = reserved_port()
            progress("starting the operator")
            started = time.monotonic()
            operator = subprocess.Popen(
                [sys.executable, "-m", "lessor.operator", f"--kubeconfig={cluster.kubeconfig}",
                 f"--namespace={NAMESPACE}", "--http-host=127.0.0.1", f"--http-port={port}",
                 "--no-leader-election"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            samples: list[tuple[float, float, float]] = []
            drained = None
            while time.monotonic() - started < 1800:
                time.sleep(1)
                try:
                    values = metrics(port)
                except OSError:
                    continue
                depth = sum(v for k, v in values.items() if k.startswith("lessor_workqueue_depth"))
                done = sum(
                    v for k, v in values.items()
                    if k.startswith("lessor_reconcile_total") and 'controller="clusterlease"' in k
                )  # fmt: skip
                samples.append((time.monotonic() - started, depth, rss_mib(operator.pid)))
                if done >= leases and depth == 0:
                    drained = time.monotonic() - started
                    break
            values = metrics(port)
            result = {
                "pools": pools,
                "leases": leases,
                "ended": ended,
                "objects_created_s": round(created_in, 1),
                "drained_s": round(drained, 1) if drained else None,
                "rss_mib_at_drain": rss_mib(operator.pid),
                "rss_mib_peak": max(s[2] for s in samples),
                "queue_latency_s": {
                    queue: {q: quantile(values, queue, q) for q in ("p50", "p90", "p99")}
                    for queue in ("clusterlease", "clusterpool")
                },
                "depth_over_time": [[round(t, 1), d] for t, d, _ in samples],
            }
            if ended:
                progress("starting an API server")
                result.update(api_figures(cluster, Path(directory)))
        finally:
            if operator is not None:
                operator.terminate()
                operator.wait(timeout=120)
                reservation.release()
            cluster.destroy()
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pools", type=int, default=1000)
    parser.add_argument("--leases", "--active", type=int, default=10000)
    parser.add_argument("--ended", type=int, default=0, help="a history of ended leases")
    arguments = parser.parse_args()
    print(json.dumps(run(arguments.pools, arguments.leases, arguments.ended)))
    sys.exit(0)
