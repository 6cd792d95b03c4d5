"""Issue 46 in kind: a vcluster pool of the installed lessor (its operator in the cluster, with
the helm its image ships) whose template installs a real chart from a real chart repository
(tests/integration/addon_sources.py, served on the kind network's gateway, which the
operator's pod reaches) and a manifest, gated on the chart's Deployment Available and its CRD
Established.

- A lease's kubeconfig sees the Deployment Available and the CRD Established at the moment it
  is Bound: a lease never waits for its addons.
- A warm cluster whose API the test stops (its StatefulSet scaled to nothing) is replaced before
  a lease takes it: a lease created after the stop is bound to another cluster.

The time from a cluster's creation to Ready is printed for bench/README.md.
"""

from __future__ import annotations

import datetime
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.installation import NAMESPACE, Installation, wait_for
from e2e.kind.registry import kind_gateway
from e2e.kind.sandboxes import SANDBOX_IMAGE
from e2e.test_tenant_isolation import lease
from lessor.operator.backends.base import InstanceRef
from lessor.operator.backends.instance_namespace import namespace_name
from tests.integration.addon_sources import serve_gadgets

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        os.environ.get("LESSOR_E2E_CLUSTER", "local") != "kind",
        reason="vcluster clusters, whose pods run on real nodes (kind)",
    ),
]
POOL = "e2e-addons"
MANIFEST = """
apiVersion: v1
kind: Namespace
metadata: {name: ci}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: job-settings, namespace: ci}
data: {from: the pool}
"""


@pytest.fixture
def chart_repository(tmp_path: Path) -> Iterator[str]:
    with serve_gadgets(tmp_path / "charts", kind_gateway()) as url:
        yield url


def _seconds_to_ready(instance: dict[str, Any]) -> float:
    created = datetime.datetime.fromisoformat(instance["metadata"]["creationTimestamp"])
    ready = datetime.datetime.fromisoformat(instance["status"]["readyAt"])
    return (ready - created).total_seconds()


def test_a_leased_vcluster_has_its_chart_and_manifest_in_and_a_broken_warm_one_is_replaced(
    configured: Installation, tmp_path: Path, chart_repository: str
) -> None:
    chart = {
        "repository": chart_repository, "name": "gadgets", "version": "0.3.1",
        "namespace": "gadgets",
        "values": {
            "image": SANDBOX_IMAGE,
            "command": ["python3", "-c", "import time; time.sleep(1e9)"],
        },
    }  # fmt: skip
    configured.apply(
        {
            "apiVersion": "lessor.dev/v1alpha1",
            "kind": "ClusterPool",
            "metadata": {"name": POOL},
            "spec": {
                # One warm cluster, and room for its replacement: the kind node's two cores
                # hold every earlier scenario's pods as well.
                "warmTarget": 1, "maxInstances": 2, "ttl": "30m",
                "backend": configured.vcluster_backend(),
                "addons": [
                    {"name": "gadgets", "chart": chart},
                    {"name": "ci", "manifests": MANIFEST},
                ],
                "readinessGates": {
                    "deploymentsAvailable": ["gadgets/gadgets-controller"],
                    "crdsEstablished": ["gadgets.example.com"],
                },
                "healthCheck": {"period": "5s", "failureThreshold": 2},
            },
        }
    )  # fmt: skip
    suffix = uuid.uuid4().hex[:6]
    try:
        _prepared_and_replaced(configured, tmp_path, suffix)
    finally:  # the clusters go, so that the scenarios after this one have the node to themselves
        configured.kubectl("delete", "clusterpool", POOL, "-n", NAMESPACE, "--wait=false")
        configured.kubectl(
            "delete", "clusterlease", f"job-{suffix}", f"next-{suffix}", "-n", NAMESPACE,
            "--wait=false", "--ignore-not-found",
        )  # fmt: skip


def _prepared_and_replaced(configured: Installation, tmp_path: Path, suffix: str) -> None:
    job, instance = lease(configured, POOL, f"job-{suffix}", tmp_path)
    # What the job sees at the moment it is Bound, through its own kubeconfig.
    available = job.kubectl(
        "get", "deployment", "gadgets-controller", "-n", "gadgets",
        "-o", "jsonpath={.status.conditions[?(@.type=='Available')].status}",
    ).stdout  # fmt: skip
    assert available == "True"
    established = job.kubectl(
        "get", "crd", "gadgets.example.com",
        "-o", "jsonpath={.status.conditions[?(@.type=='Established')].status}",
    ).stdout  # fmt: skip
    assert established == "True"
    assert job.kubectl("get", "configmap", "job-settings", "-n", "ci").returncode == 0
    print(f"\nvcluster with the chart and the manifest: Ready {_seconds_to_ready(instance):.1f}s"
          " after creation")  # fmt: skip

    # The pool refills its warm cluster; the test stops that one's API.
    def warm() -> dict[str, Any] | None:
        for found in _instances(configured):
            if found["status"].get("phase") == "Ready" and not found["spec"].get("claimRef"):
                return found
        return None

    spare = wait_for("a warm cluster again", warm, timeout=600)
    meta = spare["metadata"]
    namespace = namespace_name(InstanceRef(NAMESPACE, meta["name"], meta["uid"]))
    configured.kubectl("scale", "statefulset", "--all", "--replicas=0", "-n", namespace)
    wait_for(
        f"{meta['name']} failing its check",
        lambda: any(
            c["type"] == "Healthy" and c["status"] == "False"
            for c in (configured.get("clusterinstance", meta["name"]) or {})
            .get("status", {})
            .get("conditions", [])
        ),
        timeout=120,
    )
    _, taken = lease(configured, POOL, f"next-{suffix}", tmp_path)
    assert taken["metadata"]["name"] != meta["name"], "a lease took the cluster whose API stopped"
    reasons = {
        event["reason"]
        for event in _events(configured)
        if event["involvedObject"].get("name") == meta["name"]
    }
    assert "Unhealthy" in reasons


def _instances(configured: Installation) -> list[dict[str, Any]]:
    listed = configured.kubectl("get", "clusterinstances", "-n", NAMESPACE, "-o", "json").stdout
    return [i for i in json.loads(listed)["items"] if i["spec"]["pool"] == POOL]


def _events(configured: Installation) -> list[dict[str, Any]]:
    listed = configured.kubectl("get", "events", "-n", NAMESPACE, "-o", "json").stdout
    items: list[dict[str, Any]] = json.loads(listed)["items"]
    return items
