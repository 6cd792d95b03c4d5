"""The test run that test_killed_runs.py kills: not collected by itself (no `test_` prefix).

It starts what a real session starts (the session's control plane, an operator, a `local` pool
whose warm cluster is etcd and kube-apiserver processes that outlive the operator by design),
writes the file named by LESSOR_KILLED_RUN_READY, and waits to be killed.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from lessor.controlplane.kubectl import Cluster, wait_established
from tests.integration.operator_harness import Objects, Operator, wait_for

pytestmark = pytest.mark.integration
CRDS = Path(__file__).resolve().parents[2] / "crds"


def test_start_a_local_cluster_and_wait_to_be_killed(
    control_plane: Cluster, tmp_path: Path
) -> None:
    control_plane.kubectl("apply", "-f", str(CRDS))
    wait_established(control_plane)
    objects = Objects(control_plane, f"killed-{uuid.uuid4().hex[:8]}")
    control_plane.kubectl("create", "namespace", objects.namespace)
    Operator(
        kubeconfig=control_plane.kubeconfig,
        namespace=objects.namespace,
        backend_dir=tmp_path / "instances",
        log_path=tmp_path / "operator.log",
        leader_election=False,
    ).start()
    objects.pool("p", warmTarget=1)
    wait_for("a warm cluster", lambda: objects.pool_status("p").get("ready") == 1, timeout=300)
    Path(os.environ["LESSOR_KILLED_RUN_READY"]).write_text("ready")
    time.sleep(600)
