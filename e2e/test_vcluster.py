"""A vcluster leased from kind and used from this machine, outside kind: the `vcluster` backend
on real nodes. The pool runs the image built here (e2e/kind/vcluster.py); its virtual cluster's
CoreDNS and the pod the scenario runs use images the kind node already holds."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.installation import NAMESPACE, Installation, wait_for
from e2e.kind.components import KindVersions
from e2e.people import ALICE, Person
from e2e.test_scenarios import kubectl_binary

pytestmark = pytest.mark.e2e
POOL = "e2e-vcluster"


@pytest.fixture(scope="module")
def pool(configured: Installation) -> Iterator[str]:
    if configured.kind != "kind" or configured.vcluster_image is None:
        pytest.skip("a vcluster's pods run on real nodes: LESSOR_E2E_CLUSTER=kind")
    versions = KindVersions.pinned()
    configured.apply(
        {
            "apiVersion": "lessor.dev/v1alpha1",
            "kind": "ClusterPool",
            "metadata": {"name": POOL},
            "spec": {
                "warmTarget": 1,
                "ttl": "30m",
                "backend": {
                    "type": "vcluster",
                    "vcluster": {
                        "image": configured.vcluster_image,
                        "kubernetesImage": configured.vcluster_image,
                        "corednsImage": f"registry.k8s.io/coredns/coredns:{versions.coredns}",
                        "cpu": "50m",
                        "memory": "128Mi",
                    },
                },
            },
        }
    )
    yield POOL
    configured.kubectl("delete", "clusterpool", POOL, "-n", NAMESPACE, "--timeout=300s")


def kubectl(kubeconfig: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [kubectl_binary(), "--kubeconfig", kubeconfig, *args],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_a_leased_vcluster_runs_a_pod_on_the_node_and_is_gone_after_release(
    pool: str, configured: Installation, tmp_path: Path
) -> None:
    alice = Person(configured, tmp_path / "alice", ALICE)
    wait_for(
        "a warm vcluster",
        lambda: alice.http("GET", f"/v1/pools/{pool}")[1].get("ready", 0) >= 1,
        timeout=900,
    )
    lease = alice.json("lease", pool, "--ttl", "20m")
    kubeconfig = lease["kubeconfig"]
    pause = f"registry.k8s.io/pause:{KindVersions.pinned().pause}"
    created = kubectl(kubeconfig, "create", "deployment", "sleeper", f"--image={pause}")
    assert created.returncode == 0, created.stderr
    rolled = kubectl(kubeconfig, "rollout", "status", "deployment/sleeper", "--timeout=300s")
    assert rolled.returncode == 0, rolled.stderr + kubectl(kubeconfig, "get", "events").stdout
    [pod] = json.loads(kubectl(kubeconfig, "get", "pods", "-o", "json").stdout)["items"]
    assert pod["status"]["phase"] == "Running"

    # On the host: the pod runs on the kind node, in the cluster's own namespace.
    leased = configured.get("clusterlease", lease["id"])
    assert leased is not None
    instance = configured.get("clusterinstance", leased["status"]["clusterName"])
    assert instance is not None
    namespace = instance["status"]["backendDetails"]["namespace"]
    host_pods = json.loads(configured.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)[
        "items"
    ]
    synced = [p for p in host_pods if p["metadata"]["name"].startswith("sleeper-")]
    assert synced and synced[0]["status"]["phase"] == "Running"
    assert synced[0]["spec"]["nodeName"] == pod["spec"]["nodeName"]

    alice.release(lease["id"])
    gone = configured.kubectl("get", "namespace", namespace, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr, "released: the namespace is gone"
    wait_for(
        "the pool refilled",
        lambda: alice.http("GET", f"/v1/pools/{pool}")[1].get("ready", 0) >= 1,
        timeout=900,
    )
