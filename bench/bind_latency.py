"""Time from ClusterLease creation to Bound with a warm `local` pool, through the real operator.

Prints one JSON document and a line for people. Starts its own local control plane and operator
and stops both. Usage: python bench/bind_latency.py [--leases 20] [--warm 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lessor.controlplane.binaries import ensure_binaries
from lessor.controlplane.cluster import LocalControlPlane, free_port
from lessor.operator.kinds import LEASES, POOLS
from lessor.operator.runtime.client import KubeClient

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "bench"


async def measure(client: KubeClient, leases: int, warm: int) -> list[float]:
    pool = {
        "apiVersion": "lessor.dev/v1alpha1",
        "kind": "ClusterPool",
        "metadata": {"name": "bench", "namespace": NAMESPACE},
        "spec": {"warmTarget": warm, "backend": {"type": "local"}},
    }
    await client.create(POOLS.path(NAMESPACE), pool)
    latencies = []
    for n in range(leases):
        while (await client.get(POOLS.path(NAMESPACE, "bench"))).get("status", {}).get(
            "ready", 0
        ) < 1:
            await asyncio.sleep(0.05)
        name = f"l{n:03d}"
        lease = {
            "apiVersion": "lessor.dev/v1alpha1",
            "kind": "ClusterLease",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"pool": "bench"},
        }
        started = time.perf_counter()
        await client.create(LEASES.path(NAMESPACE), lease)
        while (await client.get(LEASES.path(NAMESPACE, name))).get("status", {}).get(
            "phase"
        ) != "Bound":
            await asyncio.sleep(0.01)
        latencies.append(time.perf_counter() - started)
        await client.merge_patch(LEASES.path(NAMESPACE, name), {"spec": {"releaseRequested": True}})
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--leases", type=int, default=20)
    parser.add_argument("--warm", type=int, default=3)
    args = parser.parse_args()
    binaries = ensure_binaries(lambda m: print(m, file=sys.stderr))
    with tempfile.TemporaryDirectory() as directory:
        cluster = LocalControlPlane(Path(directory) / "cluster")
        cluster.start(binaries, with_node=False)
        operator = None
        try:
            cluster.kubectl("apply", "-f", str(ROOT / "crds"))
            cluster.kubectl("wait", "--for=condition=Established", "crd", "--all")
            cluster.kubectl("create", "namespace", NAMESPACE)
            operator = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "lessor.operator",
                    f"--kubeconfig={cluster.kubeconfig}",
                    f"--namespace={NAMESPACE}",
                    "--http-host=127.0.0.1",
                    f"--http-port={free_port()}",
                    f"--local-backend-dir={directory}/instances",
                ],
                stderr=subprocess.DEVNULL,
            )

            async def run() -> list[float]:
                client = await KubeClient.connect(str(cluster.kubeconfig))
                return await measure(client, args.leases, args.warm)

            latencies = sorted(asyncio.run(run()))
        finally:
            if operator is not None:
                operator.terminate()
                operator.wait(timeout=60)
            for leftover in Path(directory, "instances").glob("*"):
                LocalControlPlane(leftover).destroy()
            cluster.destroy()
    figures = {
        "benchmark": "bind_latency",
        "leases": args.leases,
        "warm_target": args.warm,
        "p50_s": round(statistics.median(latencies), 3),
        "p90_s": round(latencies[int(0.9 * (len(latencies) - 1))], 3),
        "max_s": round(latencies[-1], 3),
        "min_s": round(latencies[0], 3),
    }
    print(json.dumps(figures))
    print(
        f"lease created -> Bound over {args.leases} leases, warm pool of {args.warm}: "
        f"p50 {figures['p50_s']}s, p90 {figures['p90_s']}s, max {figures['max_s']}s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
