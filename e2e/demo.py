"""The demo behind `make demo`: a real local control plane with lessor's CRDs installed.

It says what it does at each step and stops everything it started, even when a step fails.
It grows into the full lease demo (operator, API, `lessor lease demo`) as those parts land.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from lessor.controlplane.binaries import ensure_binaries
from lessor.controlplane.cluster import LocalControlPlane
from lessor.controlplane.errors import ControlPlaneError

ROOT = Path(__file__).resolve().parents[1]
STARTED = time.monotonic()


def step(message: str) -> None:
    print(f"[{time.monotonic() - STARTED:6.1f}s] {message}", flush=True)


def show(cluster: LocalControlPlane, *args: str) -> None:
    print(f"$ kubectl {' '.join(args)}")
    print(cluster.kubectl(*args).stdout.rstrip(), flush=True)


def main() -> int:
    step("finding (or building, the first time) the local control plane's binaries")
    binaries = ensure_binaries(step)
    with tempfile.TemporaryDirectory(prefix="lessor-demo-") as directory:
        cluster = LocalControlPlane(Path(directory) / "cluster")
        step("starting etcd, kube-apiserver, controller manager, scheduler and a kwok node")
        try:
            cluster.start(binaries, progress=step)
            step("installing lessor's CRDs (generated from lessor/resources)")
            cluster.kubectl("apply", "-f", str(ROOT / "crds"))
            cluster.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
            show(cluster, "get", "crds")
            step("applying an example AccessPolicy (static token) and a local ClusterPool")
            for name in ("namespace", "accesspolicy-static-token", "clusterpool-local"):
                cluster.kubectl("apply", "-f", str(ROOT / "manifests/examples" / f"{name}.yaml"))
            show(cluster, "get", "accesspolicies,clusterpools", "-n", "lessor-system")
        except ControlPlaneError as error:
            print(f"demo failed: {error}", file=sys.stderr)
            return 1
        finally:
            step("stopping everything the demo started")
            cluster.destroy()
    step("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
