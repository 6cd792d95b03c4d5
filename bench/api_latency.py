"""Requests per second and latency of GET /v1/leases/:id and POST /v1/leases, with an OIDC token
(the local kube-apiserver as issuer, JWKS cached), against a real API server (gunicorn, 2 gevent
workers) on the local control plane. Prints one JSON document; starts and stops what it uses.

Usage: python bench/api_latency.py [--seconds 10] [--clients 8]
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from lessor.controlplane.binaries import ensure_binaries
from lessor.controlplane.cluster import LocalControlPlane, free_port

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "bench"


def request(base: str, method: str, path: str, token: str, body: Any = None) -> int:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method)  # noqa: S310
    req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as response:  # noqa: S310 - loopback
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def load(
    base: str, method: str, path: str, token: str, body: Any, *, seconds: float, clients: int
) -> dict[str, Any]:
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def client() -> None:
        while time.monotonic() < deadline:
            started = time.perf_counter()
            status = request(base, method, path, token, body)
            took = time.perf_counter() - started
            with lock:
                latencies.append(took)
                statuses[status] = statuses.get(status, 0) + 1

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    latencies.sort()
    return {
        "requests_per_second": round(len(latencies) / seconds, 1),
        "p50_ms": round(1000 * statistics.median(latencies), 1),
        "p99_ms": round(1000 * latencies[int(0.99 * (len(latencies) - 1))], 1),
        "statuses": statuses,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args()
    binaries = ensure_binaries(lambda m: print(m, file=sys.stderr))
    with tempfile.TemporaryDirectory() as directory:
        cluster = LocalControlPlane(Path(directory) / "cluster")
        cluster.start(binaries, with_node=False)
        api = None
        try:
            cluster.kubectl("apply", "-f", str(ROOT / "crds"))
            cluster.kubectl("wait", "--for=condition=Established", "crd", "--all")
            cluster.kubectl("create", "namespace", NAMESPACE)
            ca = (cluster.pki / "ca.crt").read_text()
            policy = {
                "apiVersion": "lessor.dev/v1alpha1",
                "kind": "AccessPolicy",
                "metadata": {"name": "bench", "namespace": NAMESPACE},
                "spec": {
                    "auth": {
                        "oidc": {
                            "issuer": cluster.server,
                            "audience": ["lessor"],
                            "jwksUrl": f"{cluster.server}/openid/v1/jwks",
                            "caBundle": ca,
                        }
                    },
                    "identity": "{sub}",
                    "rules": [{"pools": ["*"]}],
                },
            }
            pool = {
                "apiVersion": "lessor.dev/v1alpha1",
                "kind": "ClusterPool",
                "metadata": {"name": "bench", "namespace": NAMESPACE},
                "spec": {"warmTarget": 0},
            }
            for document in (policy, pool):
                cluster.kubectl("apply", "-f", "-", input=json.dumps(document))
            cluster.kubectl("create", "serviceaccount", "ci", "-n", NAMESPACE)
            token = cluster.kubectl(
                "create", "token", "ci", "-n", NAMESPACE, "--audience", "lessor", "--duration", "1h"
            ).stdout.strip()
            port = free_port()
            api = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "lessor.apiserver",
                    f"--bind=127.0.0.1:{port}",
                    "--workers=2",
                    f"--namespace={NAMESPACE}",
                    f"--kubeconfig={cluster.kubeconfig}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            base = f"http://127.0.0.1:{port}"
            for _ in range(100):
                try:
                    if request(base, "GET", "/healthz", token) == 200:
                        break
                except OSError:
                    time.sleep(0.1)
            created = json.loads(
                urllib.request.urlopen(  # noqa: S310 - loopback
                    urllib.request.Request(  # noqa: S310
                        base + "/v1/leases",
                        data=b'{"profile": "bench"}',
                        method="POST",
                        headers={
                            "Authorization": f"Bearer {token}",
                            "Content-Type": "application/json",
                        },
                    ),
                    timeout=30,
                ).read()
            )
            results = {
                "benchmark": "api_latency",
                "workers": 2,
                "clients": args.clients,
                "get_lease": load(
                    base,
                    "GET",
                    f"/v1/leases/{created['id']}",
                    token,
                    None,
                    seconds=args.seconds,
                    clients=args.clients,
                ),
                "post_lease": load(
                    base,
                    "POST",
                    "/v1/leases",
                    token,
                    {"profile": "bench"},
                    seconds=args.seconds,
                    clients=args.clients,
                ),
            }
        finally:
            if api is not None:
                api.send_signal(signal.SIGTERM)
                api.wait(timeout=60)
            cluster.destroy()
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
