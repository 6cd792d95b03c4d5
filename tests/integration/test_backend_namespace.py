"""The test-only `namespace` backend, through the real operator: a lease binds a namespace of
the host cluster with a kubeconfig confined to it, release deletes it, and without
--test-backends the operator refuses to provision it."""

from __future__ import annotations

import base64
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lessor.controlplane.cluster import LocalControlPlane
from lessor.controlplane.kubectl import Cluster
from tests.integration.operator_harness import Objects, Operator, wait_for

pytestmark = pytest.mark.integration
CRDS = Path(__file__).resolve().parents[2] / "crds"


@pytest.fixture
def objects(control_plane: Cluster) -> Iterator[Objects]:
    if not isinstance(control_plane, LocalControlPlane):
        pytest.skip("needs the local control plane's controller manager to finish namespaces")
    control_plane.kubectl("apply", "-f", str(CRDS))
    namespace = f"nsb-{uuid.uuid4().hex[:8]}"
    control_plane.kubectl("create", "namespace", namespace)
    yield Objects(control_plane, namespace)
    control_plane.kubectl("delete", "namespace", namespace, "--wait=false")


def test_a_namespace_lease_is_confined_to_its_namespace_and_deleted_on_release(
    objects: Objects, tmp_path: Path
) -> None:
    cluster = objects.cluster
    operator = Operator(
        cluster.kubeconfig, objects.namespace, tmp_path / "instances", tmp_path / "op.log",
        extra=["--test-backends"],
    ).start()  # fmt: skip
    try:
        objects.pool("cheap", warmTarget=1, backend={"type": "namespace"})
        objects.lease("mine", "cheap")
        bound = objects.wait_phase("mine", "Bound")
        tenant = f"lessor-ns-{bound['status']['clusterName']}"
        secret = objects.get("secret", bound["status"]["kubeconfigSecret"])
        assert secret is not None
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_bytes(base64.b64decode(secret["data"]["kubeconfig"]))
        kubectl = ["--kubeconfig", str(kubeconfig)]
        mine = cluster.kubectl(*kubectl, "auth", "can-i", "create", "pods", check=False)
        assert mine.stdout.strip() == "yes", mine.stderr
        other = cluster.kubectl(
            *kubectl, "auth", "can-i", "get", "pods", "-n", "kube-system", check=False
        )
        assert other.stdout.strip() == "no"
        objects.patch("clusterlease", "mine", {"spec": {"releaseRequested": True}})
        objects.wait_phase("mine", "Released")
        wait_for(
            "the namespace deleted",
            lambda: cluster.kubectl("get", "namespace", tenant, check=False).returncode != 0,
            timeout=120,
        )
    finally:
        operator.kill(signal.SIGTERM)
