"""The demo behind `make demo`: lease a real cluster through lessor and use its kubeconfig.

It brings up a local control plane, installs the CRDs, starts the operator and the API server
(two gunicorn workers), applies a static-token AccessPolicy and a `local` ClusterPool with two
warm clusters, leases one with `lessor lease demo`, runs `kubectl get namespaces` with the
leased kubeconfig, shows `lessor status`, releases the lease with `lessor release`, shows the
link to the diagnostics bundle captured from the cluster before its teardown (into a MinIO on
loopback) and the files in it, and stops everything it started, even when a step fails. It says
what it does at each step.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from lessor.controlplane.binaries import ensure_binaries
from lessor.controlplane.cluster import LocalControlPlane
from lessor.controlplane.errors import ControlPlaneError
from lessor.controlplane.kubectl import wait_established
from lessor.controlplane.local_clusters import every_cluster
from lessor.controlplane.object_store import MinioServer
from lessor.controlplane.ports import PortReservation
from lessor.controlplane.watchdog import watch_over

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "manifests" / "examples"
TOKEN = "demo-token-change-me"  # noqa: S105 - the example policy's token (manifests/examples)
STARTED = time.monotonic()


def step(message: str) -> None:
    print(f"[{time.monotonic() - STARTED:6.1f}s] {message}", flush=True)


def call(base: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base + path, data=data, method=method)  # noqa: S310
    request.add_header("Authorization", f"Bearer {TOKEN}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - loopback
            text = response.read().decode()
            return response.status, json.loads(text) if text else None
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read().decode() or "null")


def wait(what: str, probe: Any, timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.2)
    raise ControlPlaneError(f"timed out waiting for {what}")


def run_demo(
    cluster: LocalControlPlane,
    work: Path,
    processes: list[subprocess.Popen[bytes]],
    stores: list[MinioServer],
) -> None:
    step("installing lessor's CRDs (generated from lessor/resources)")
    cluster.kubectl("apply", "-f", str(ROOT / "crds"))
    wait_established(cluster)
    step("applying the example AccessPolicy (static token) and a local ClusterPool (warmTarget 2)")
    for name in ("namespace", "accesspolicy-static-token", "clusterpool-local"):
        cluster.kubectl("apply", "-f", str(EXAMPLES / f"{name}.yaml"))
    stores.append(start_object_store(cluster, work))
    # Held while the demo runs: no other process on the machine is handed these ports.
    ports = PortReservation()
    port = ports.take()
    log = (work / "lessor.log").open("ab")
    step("starting the operator and the API server (gunicorn, 2 gevent workers)")
    common = [f"--kubeconfig={cluster.kubeconfig}", "--namespace=lessor-system"]
    processes.append(
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "lessor.operator",
                *common,
                "--http-host=127.0.0.1",
                f"--http-port={ports.take()}",
                f"--local-backend-dir={work / 'instances'}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    )
    processes.append(
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "lessor.apiserver",
                *common,
                f"--bind=127.0.0.1:{port}",
                "--workers=2",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    )
    base = f"http://127.0.0.1:{port}"

    def pool_ready() -> bool:
        try:
            status, pools = call(base, "GET", "/v1/pools/demo")
        except OSError:
            return False
        return status == 200 and pools["ready"] >= 2

    step("waiting for the pool to have 2 warm clusters")
    wait("2 warm clusters", pool_ready)
    print(json.dumps(call(base, "GET", "/v1/pools/demo")[1], indent=2))

    env = {**os.environ, "LESSOR_ENDPOINT": base, "LESSOR_TOKEN": TOKEN, "HOME": str(work)}
    lessor = [sys.executable, "-m", "lessor.cli.main"]
    step("$ lessor lease demo --ttl 15m")
    leased_at = time.monotonic()
    leased = subprocess.run(
        [*lessor, "lease", "demo", "--ttl", "15m"],
        env=env, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    took = time.monotonic() - leased_at
    print(leased.stdout.rstrip())
    lease_id = leased.stdout.split()[1]
    kubeconfig = work / ".kube" / f"lessor-{lease_id}"
    step(f"lessor lease took {took:.2f}s (process start to kubeconfig written)")
    step(f"$ kubectl --kubeconfig ~/.kube/lessor-{lease_id} get namespaces")
    kubectl = str(ensure_binaries() / "kubectl")
    result = subprocess.run(
        [kubectl, "--kubeconfig", str(kubeconfig), "get", "namespaces"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    print(result.stdout.rstrip())
    step("$ lessor status")
    print(subprocess.run([*lessor, "status"], env=env, capture_output=True, text=True,
                         timeout=60, check=True).stdout.rstrip())  # fmt: skip
    step(f"$ lessor release {lease_id}: the cluster is destroyed and replaced")
    subprocess.run([*lessor, "release", lease_id], env=env, timeout=60, check=True)
    wait(
        "the lease to be Released",
        lambda: call(base, "GET", f"/v1/leases/{lease_id}")[1].get("phase") == "Released",
    )
    step("released; the pool refills to 2 warm clusters")
    wait("the pool to refill", pool_ready)
    step(f"$ lessor diagnostics {lease_id}: the bundle captured from the cluster before teardown")
    print(subprocess.run([*lessor, "diagnostics", lease_id], env=env, capture_output=True,
                         text=True, timeout=60, check=True).stdout.rstrip())  # fmt: skip
    bundle = work / "bundle.tar.gz"
    subprocess.run(
        [*lessor, "diagnostics", lease_id, "--download", str(bundle)],
        env=env, timeout=60, check=True,
    )  # fmt: skip
    with tarfile.open(bundle) as archive:
        names = archive.getnames()
    print(f"{len(names)} files: {', '.join(sorted(names))}")


def start_object_store(cluster: LocalControlPlane, work: Path) -> MinioServer:
    """MinIO on loopback, a bucket, its credentials in a Secret, and the demo pool pointed there:
    each lease's cluster is captured into a diagnostics bundle before it is torn down."""
    step("starting MinIO (an S3-compatible store) for the pool's diagnostics bundles")
    store = MinioServer(work / "minio", progress=step)
    store.start()
    store.create_bucket("lessor-diagnostics")
    cluster.kubectl(
        "create", "secret", "generic", "diagnostics-store", "-n", "lessor-system",
        *store.credential_literals(),
    )  # fmt: skip
    diagnostics = {
        "bucket": "lessor-diagnostics",
        "endpoint": store.endpoint,
        "credentialsSecretRef": {"name": "diagnostics-store"},
    }
    cluster.kubectl(
        "patch", "clusterpool", "demo", "-n", "lessor-system", "--type=merge",
        "-p", json.dumps({"spec": {"diagnostics": diagnostics}}),
    )  # fmt: skip
    return store


def main() -> int:
    step("finding (or building, the first time) the local control plane's binaries")
    binaries = ensure_binaries(step)
    processes: list[subprocess.Popen[bytes]] = []
    stores: list[MinioServer] = []
    with tempfile.TemporaryDirectory(prefix="lessor-demo-") as directory:
        work = Path(directory)
        # Killed (not interrupted) mid-way, the demo's `finally` never runs: this stops and
        # deletes all it started then.
        watch_over(work, remove=True)
        cluster = LocalControlPlane(work / "cluster")
        step("starting a local control plane (etcd, kube-apiserver) on 127.0.0.1")
        try:
            cluster.start(binaries, with_node=False, progress=step)
            run_demo(cluster, work, processes, stores)
        except (ControlPlaneError, subprocess.CalledProcessError, OSError) as error:
            print(f"demo failed: {error}", file=sys.stderr)
            if isinstance(error, subprocess.CalledProcessError) and error.stderr:
                print(error.stderr, file=sys.stderr)
            log = work / "lessor.log"
            if log.exists():
                print(log.read_text()[-3000:], file=sys.stderr)
            return 1
        finally:
            step("stopping everything the demo started")
            for process in reversed(processes):
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=60)
            for store in stores:
                store.stop()
            for leftover in every_cluster(work / "instances"):
                LocalControlPlane(leftover).destroy()
            cluster.destroy()
    step("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
