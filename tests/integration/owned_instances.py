"""A ClusterInstance for a backend test to create objects for.

A backend's objects are owned by their ClusterInstance, so it must exist: otherwise the garbage
collector rightly deletes them as orphans while the test looks at them."""

from __future__ import annotations

import json
from pathlib import Path

from lessor.controlplane.kubectl import Cluster, wait_established
from lessor.operator.backends.base import InstanceRef

CRDS = Path(__file__).resolve().parents[2] / "crds"


def owned_instance(cluster: Cluster, namespace: str, backend: str) -> InstanceRef:
    cluster.kubectl("apply", "-f", str(CRDS))
    wait_established(cluster)
    owner = {
        "apiVersion": "lessor.dev/v1alpha1",
        "kind": "ClusterInstance",
        "metadata": {"name": "pool-abcde", "namespace": namespace},
        "spec": {"pool": "pool", "backend": {"type": backend}},
    }
    created = cluster.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(owner))
    return InstanceRef(namespace, "pool-abcde", json.loads(created.stdout)["metadata"]["uid"])
