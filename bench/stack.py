"""The local stack a benchmark runs against: a local control plane with lessor's CRDs, the
operator, and the API server, with a static-token AccessPolicy. Everything is stopped on exit."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lessor.controlplane.binaries import ensure_binaries
from lessor.controlplane.cluster import LocalControlPlane, free_port

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "bench"
TOKEN = "bench-token"  # noqa: S105 - a throwaway static token for a throwaway cluster


@dataclass
class Stack:
    cluster: LocalControlPlane
    base: str
    token: str
    work: Path

    def apply(self, document: dict[str, Any]) -> None:
        document["metadata"]["namespace"] = NAMESPACE
        self.cluster.kubectl("apply", "-f", "-", input=json.dumps(document))

    def pool(self, name: str, warm: int) -> None:
        self.apply(
            {
                "apiVersion": "lessor.dev/v1alpha1",
                "kind": "ClusterPool",
                "metadata": {"name": name},
                "spec": {"warmTarget": warm, "ttl": "30m", "backend": {"type": "local"}},
            }
        )

    def ready(self, pool: str) -> int:
        request = urllib.request.Request(  # noqa: S310 - loopback
            f"{self.base}/v1/pools/{pool}", headers={"Authorization": f"Bearer {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
            return int(json.loads(answer.read())["ready"])

    def wait_ready(self, pool: str, count: int, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while self.ready(pool) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"pool {pool} never had {count} ready clusters")
            time.sleep(0.2)


def _healthy(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/healthz", timeout=2) as answer:  # noqa: S310
            return bool(answer.status == 200)
    except OSError:
        return False


@contextmanager
def local_stack(api_workers: int = 2) -> Iterator[Stack]:
    binaries = ensure_binaries(lambda message: print(message, file=sys.stderr))
    with tempfile.TemporaryDirectory(prefix="lessor-bench-") as directory:
        work = Path(directory)
        cluster = LocalControlPlane(work / "cluster")
        cluster.start(binaries, with_node=False)
        processes: list[subprocess.Popen[bytes]] = []
        try:
            cluster.kubectl("apply", "-f", str(ROOT / "crds"))
            cluster.kubectl("wait", "--for=condition=Established", "crd", "--all")
            cluster.kubectl("create", "namespace", NAMESPACE)
            cluster.kubectl(
                "create", "secret", "generic", "tokens", "-n", NAMESPACE,
                f"--from-literal=bench={TOKEN}",
            )  # fmt: skip
            policy = {
                "apiVersion": "lessor.dev/v1alpha1",
                "kind": "AccessPolicy",
                "metadata": {"name": "bench", "namespace": NAMESPACE},
                "spec": {
                    "auth": {
                        "staticTokens": [
                            {
                                "secretRef": {"name": "tokens", "key": "bench"},
                                "claims": {"sub": "b"},
                            }
                        ]
                    },
                    "identity": "{sub}",
                    "rules": [{"pools": ["*"], "maxConcurrentLeases": 1000}],
                },
            }
            cluster.kubectl("apply", "-f", "-", input=json.dumps(policy))
            log = (work / "lessor.log").open("ab")
            common = [f"--kubeconfig={cluster.kubeconfig}", f"--namespace={NAMESPACE}"]
            port = free_port()
            for argv in (
                ["lessor.operator", *common, "--http-host=127.0.0.1", f"--http-port={free_port()}",
                 f"--local-backend-dir={work / 'instances'}"],
                ["lessor.apiserver", *common, f"--bind=127.0.0.1:{port}",
                 f"--workers={api_workers}"],
            ):  # fmt: skip
                processes.append(
                    subprocess.Popen([sys.executable, "-m", *argv], stdout=log, stderr=log)
                )
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while not _healthy(base):
                if time.monotonic() > deadline:
                    raise TimeoutError("the API server did not start")
                time.sleep(0.1)
            yield Stack(cluster, base, TOKEN, work)
        finally:
            for process in reversed(processes):
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=60)
            for leftover in (work / "instances").glob("*"):
                LocalControlPlane(leftover).destroy()
            cluster.destroy()
