"""What a pool's addons cost a cluster's start, and what they save a job (issue 46), on the local
stack (`local` clusters: kube-apiserver and etcd processes).

The addons are tests/integration/addon_sources.py's: a real chart from a real chart repository
on loopback (a CRD, a ConfigMap from its values, a Deployment), rendered by the operator's helm,
and a manifest of three objects (a Namespace, a CRD, an object of that CRD's kind), gated on
both CRDs Established. `local`
clusters have no nodes, so no Deployment becomes Available here: the gate on it is left out
(e2e/test_addons.py runs it in kind).

- `start`: a pool's one warm cluster, from the pool's creation to the cluster Ready (its
  ClusterInstance, polled), with and without the addons; each round deletes the pool and waits for
  its cluster to go.
- `job`: a job's lease until it can use its dependencies: from a pool with the addons, POST
  /v1/leases to Bound (they are in); from a pool without, to Bound and then what the job would
  do itself: `helm install` of the same chart (`--create-namespace`), `kubectl apply
  --server-side` of the same manifest, and `kubectl wait` for both CRDs Established.

Usage: python -m bench.addons [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.stack import NAMESPACE, Stack, local_stack, percentiles, progress
from lessor.controlplane.binaries import ensure_binaries
from lessor.controlplane.helm import ensure_helm
from tests.integration.addon_sources import WIDGETS, serve_gadgets

CRDS = ("gadgets.example.com", "widgets.example.com")


def addons(repository: str) -> dict[str, Any]:
    chart = {"repository": repository, "name": "gadgets", "version": "0.3.1",
             "namespace": "gadgets"}  # fmt: skip
    return {
        "addons": [
            {"name": "gadgets", "chart": chart},
            {"name": "widgets", "manifests": WIDGETS},
        ],
        "readinessGates": {"crdsEstablished": list(CRDS)},
    }


def pool(stack: Stack, name: str, template: dict[str, Any]) -> None:
    stack.apply(
        {
            "apiVersion": "lessor.dev/v1alpha1",
            "kind": "ClusterPool",
            "metadata": {"name": name},
            "spec": {"warmTarget": 1, "maxInstances": 1, "ttl": "30m",
                     "backend": {"type": "local"}, **template},
        }
    )  # fmt: skip


def gone(stack: Stack, name: str) -> None:
    """The pool deleted and its clusters torn down (by hand: the bench's control plane runs no
    garbage collector to follow the owner references)."""
    stack.cluster.kubectl("delete", "clusterpool", name, "-n", NAMESPACE, "--wait=false")
    stack.cluster.kubectl(
        "delete", "clusterinstances", "-n", NAMESPACE, f"-l=lessor.dev/pool={name}",
        "--wait=false",
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while stack.cluster.kubectl("get", "clusterinstances", "-n", NAMESPACE, "-o", "name").stdout:
        if time.monotonic() > deadline:
            raise TimeoutError("the pool's clusters were not torn down")
        time.sleep(0.2)


def start(stack: Stack, name: str, template: dict[str, Any], rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        began = time.perf_counter()
        pool(stack, name, template)
        warm(stack, name)
        samples.append(time.perf_counter() - began)
        gone(stack, name)
    return samples


def warm(stack: Stack, name: str) -> None:
    """Until the pool's one cluster is a fresh warm one: the last lease's cluster torn down and
    replaced (the pool's status, written at most once a second, can still count the old one)."""
    deadline = time.monotonic() + 300
    while True:
        listed = stack.cluster.kubectl(
            "get", "clusterinstances", "-n", NAMESPACE, f"-l=lessor.dev/pool={name}", "-o", "json"
        ).stdout
        instances = json.loads(listed)["items"]
        if len(instances) == 1 and (
            instances[0].get("status", {}).get("phase") == "Ready"
            and not instances[0]["spec"].get("claimRef")
            and not instances[0]["metadata"].get("deletionTimestamp")
        ):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"pool {name} has no fresh warm cluster")
        time.sleep(0.2)


def lease(stack: Stack, name: str, work: Path) -> tuple[str, Path]:
    """A lease of `name`, Bound; its id and its kubeconfig's path."""
    client = stack.static()
    status, created = client.call("POST", "/v1/leases", {"profile": name})
    assert status == 202, created
    while True:
        _, found = client.call("GET", f"/v1/leases/{created['id']}?waitSeconds=20")
        if found.get("phase") == "Bound" and found.get("kubeconfig"):
            break
    path = work / f"{created['id']}.kubeconfig"
    path.write_text(found["kubeconfig"])
    return str(created["id"]), path


def install_after_leasing(kubeconfig: Path, repository: str) -> None:
    """What a job without addons does first: the same dependencies, with the usual tools."""
    helm, kubectl = str(ensure_helm(progress)), str(ensure_binaries(progress) / "kubectl")
    with tempfile.TemporaryDirectory(prefix="lessor-bench-helm-") as home:
        env = {"HOME": home, "PATH": "/usr/bin:/bin", "KUBECONFIG": str(kubeconfig)}
        subprocess.run(
            [helm, "install", "gadgets", "gadgets", "--repo", repository, "--version", "0.3.1",
             "--namespace", "gadgets", "--create-namespace"],
            check=True, capture_output=True, env=env,
        )  # fmt: skip
    for document in WIDGETS.split("\n---\n"):
        # One by one, as a job would wait for a CRD before applying an object of its kind.
        for _ in range(100):
            done = subprocess.run(
                [kubectl, f"--kubeconfig={kubeconfig}", "apply", "--server-side", "-f", "-"],
                input=document, capture_output=True, text=True, check=False,
            )  # fmt: skip
            if done.returncode == 0:
                break
            time.sleep(0.1)
        else:
            raise RuntimeError(done.stderr)
    subprocess.run(
        [kubectl, f"--kubeconfig={kubeconfig}", "wait", "--for=condition=Established",
         "--timeout=60s", *(f"crd/{crd}" for crd in CRDS)],
        check=True, capture_output=True,
    )  # fmt: skip


def job(
    stack: Stack, name: str, template: dict[str, Any], rounds: int, repository: str | None
) -> list[float]:
    """Lease to usable, `rounds` times, each from a warm cluster; with `repository`, the job
    installs the addons itself (from that chart repository) after it is Bound."""
    pool(stack, name, template)
    samples = []
    for _ in range(rounds):
        warm(stack, name)
        began = time.perf_counter()
        lease_id, kubeconfig = lease(stack, name, stack.work)
        if repository is not None:
            install_after_leasing(kubeconfig, repository)
        samples.append(time.perf_counter() - began)
        stack.static().call("DELETE", f"/v1/leases/{lease_id}")
    gone(stack, name)
    return samples


def run(rounds: int) -> dict[str, Any]:
    with local_stack() as stack, serve_gadgets(stack.work / "charts") as repository:
        prepared = addons(repository)
        progress("start: without addons")
        plain_start = start(stack, "plain", {}, rounds)
        progress("start: with addons")
        prepared_start = start(stack, "prepared", prepared, rounds)
        progress("job: the addons in the pool")
        prepared_job = job(stack, "prepared", prepared, rounds, None)
        progress("job: the addons installed after leasing")
        plain_job = job(stack, "plain", {}, rounds, repository)
    return {
        "benchmark": "addons",
        "rounds": rounds,
        "start_seconds": {
            "without_addons": percentiles(plain_start),
            "with_addons": percentiles(prepared_start),
        },
        # In order: the first with addons renders the chart, the others reuse the render.
        "start_samples_seconds": {
            "without_addons": [round(s, 3) for s in plain_start],
            "with_addons": [round(s, 3) for s in prepared_start],
        },
        "lease_to_usable_seconds": {
            "addons_in_the_pool": percentiles(prepared_job),
            "installed_after_leasing": percentiles(plain_job),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    result = run(parser.parse_args().rounds)
    print(json.dumps(result, indent=2))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
