"""Conditions every tool can wait on (issue 20, item 3): `kubectl wait` against the real operator
and kube-apiserver, and an AccessPolicy's verdict in its own status."""

from __future__ import annotations

from pathlib import Path

import pytest

from lessor.controlplane.kubectl import Cluster
from tests.integration.operator_harness import (
    Objects,
    Operator,
    kubectl_wait,
    start_operator,
    wait_for,
)

pytestmark = pytest.mark.integration


def test_kubectl_waits_for_a_warm_pool_a_ready_lease_and_its_release(
    cluster: Cluster, env: tuple[Objects, list[Operator]], tmp_path: Path
) -> None:
    """Issue 20, item 3: every status carries Ready (and a pool Warm) with observedGeneration,
    so `kubectl wait` and GitOps health checks work without knowing lessor's phases."""
    objects, started = env
    start_operator(cluster, objects, started, tmp_path)
    objects.pool("waitable", warmTarget=1, ttl="10m")
    kubectl_wait(objects, "clusterpool/waitable", "Warm")
    assert objects.pool_status("waitable")["ready"] == 1
    kubectl_wait(objects, "clusterpool/waitable", "Ready")

    objects.lease("w1", "waitable")
    kubectl_wait(objects, "clusterlease/w1", "Ready")
    lease = objects.get("clusterlease", "w1")
    assert lease is not None and lease["status"]["phase"] == "Bound"
    ready = next(c for c in lease["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "Bound" and lease["status"]["clusterName"] in ready["message"]
    assert ready["observedGeneration"] == lease["metadata"]["generation"]
    assert lease["status"]["observedGeneration"] == lease["metadata"]["generation"]
    instance = f"clusterinstance/{lease['status']['clusterName']}"
    kubectl_wait(objects, instance, "Ready")

    # The release is a spec change: Ready turns False for the new generation.
    objects.patch("clusterlease", "w1", {"spec": {"releaseRequested": True}})
    kubectl_wait(objects, "clusterlease/w1", "Ready=False")
    ended = objects.get("clusterlease", "w1")
    assert ended is not None
    ready = next(c for c in ended["status"]["conditions"] if c["type"] == "Ready")
    assert ready["observedGeneration"] == ended["metadata"]["generation"] > 1
    assert ready["reason"] in ("Recycling", "Released")


def test_an_access_policy_says_in_its_status_whether_its_token_secret_exists(
    cluster: Cluster, env: tuple[Objects, list[Operator]], tmp_path: Path
) -> None:
    """Issue 20, item 3: a policy naming a Secret that is not there is reported where the
    administrator looks (status, `kubectl get ap`, an Event), not only in an API server log."""
    objects, started = env
    start_operator(cluster, objects, started, tmp_path)
    objects.apply(
        {
            "apiVersion": "lessor.dev/v1alpha1",
            "kind": "AccessPolicy",
            "metadata": {"name": "tokens"},
            "spec": {
                "auth": {
                    "staticTokens": [
                        {"secretRef": {"name": "ci-tokens", "key": "ci"}, "claims": {"sub": "ci"}}
                    ]
                },
                "identity": "{sub}",
                "rules": [{"pools": ["*"]}],
            },
        }
    )
    kubectl_wait(objects, "accesspolicy/tokens", "Ready=False")
    ready = next(c for c in objects.status("accesspolicy", "tokens")["conditions"])
    assert ready["reason"] == "SecretMissing"
    assert "Secret ci-tokens does not exist" in ready["message"]
    wait_for("a Warning Event", lambda: "SecretMissing" in objects.events("tokens"))
    listed = cluster.kubectl("get", "ap", "tokens", "-n", objects.namespace).stdout
    assert listed.split("\n")[1].split()[1:3] == ["{sub}", "False"], listed

    cluster.kubectl(
        "create", "secret", "generic", "ci-tokens", "-n", objects.namespace,
        "--from-literal=ci=sha256:" + "0" * 64,
    )  # fmt: skip
    # Secrets are read, not watched: any change of the policy (or a minute) looks again.
    cluster.kubectl("annotate", "ap", "tokens", "-n", objects.namespace, "touched=1")
    kubectl_wait(objects, "accesspolicy/tokens", "Ready")
    ready = objects.status("accesspolicy", "tokens")["conditions"][0]
    assert ready["reason"] == "Valid"
