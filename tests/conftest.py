"""Session fixtures: one real Kubernetes control plane for every integration test.

The control plane is the real kube-apiserver (with etcd, controller manager, scheduler and a kwok
node) built from pinned Go modules; LESSOR_TEST_KUBECONFIG points the tests at an existing cluster
(kind or any other) instead.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lessor.controlplane.agent_sandbox import install_agent_sandbox, run_agent_sandbox
from lessor.controlplane.binaries import ensure_binaries, find_binaries
from lessor.controlplane.cluster import LocalControlPlane
from lessor.controlplane.kubectl import Cluster, ExistingCluster
from lessor.controlplane.watchdog import watch_over


@pytest.fixture(scope="session", autouse=True)
def _stop_everything_left_if_killed(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Everything the tests start names a path under the session's temporary directory (control
    planes, operators, the `local` clusters the operators start): if this run is killed before
    its fixtures end them (SIGKILL, a CI timeout), a watchdog stops them."""
    watch_over(tmp_path_factory.getbasetemp())


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    existing = os.environ.get("LESSOR_TEST_KUBECONFIG")
    if existing:
        cached = find_binaries()
        yield ExistingCluster.from_kubeconfig(
            Path(existing), cached / "kubectl" if cached else None
        )
        return
    binaries = ensure_binaries(_progress)
    cluster = LocalControlPlane(tmp_path_factory.mktemp("control-plane"))
    cluster.start(binaries, with_node=True, progress=_progress)
    try:
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture(scope="session")
def agent_sandbox(
    control_plane: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """agent-sandbox v0.5.6 on the control plane: its CRDs and one controller for the session,
    shared by the Sandbox modules as one installation is shared by a cluster's tenants."""
    install_agent_sandbox(control_plane, _progress)
    log = tmp_path_factory.mktemp("agent-sandbox") / "controller.log"
    with run_agent_sandbox(control_plane.kubeconfig, log, _progress):
        yield
