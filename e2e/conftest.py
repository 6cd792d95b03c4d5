"""One installed lessor for every scenario: LESSOR_E2E_CLUSTER=local (default) or kind."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.installation import Installation, install_kind, install_local
from e2e.kind.docker_setup import DockerSetupError
from lessor.controlplane.binaries import ensure_binaries
from lessor.controlplane.cluster import LocalControlPlane
from lessor.controlplane.errors import ControlPlaneError
from lessor.controlplane.local_clusters import every_cluster
from lessor.controlplane.watchdog import watch_over


@pytest.fixture(scope="session", autouse=True)
def _stop_everything_left_if_killed(tmp_path_factory: pytest.TempPathFactory) -> None:
    """As in tests/conftest.py: a watchdog over the session's temporary directory, for a run
    killed before its fixtures end what it started."""
    watch_over(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="session")
def installation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installation]:
    kind = os.environ.get("LESSOR_E2E_CLUSTER", "local")
    work = tmp_path_factory.mktemp("installation")
    if kind == "kind":
        # Everything is built here on first use (docker installed and started, the node image,
        # kind, lessor's image); a step that cannot be done fails with what it needs.
        try:
            installed = install_kind(work)
        except (ControlPlaneError, DockerSetupError) as error:
            pytest.fail(f"LESSOR_E2E_CLUSTER=kind: {error}")
    elif kind == "local":
        binaries = ensure_binaries(lambda message: print(message, file=sys.stderr))
        cluster = LocalControlPlane(work / "cluster")
        cluster.start(binaries, with_node=False)
        try:
            installed = install_local(cluster, work)
        except BaseException:
            cluster.destroy()
            raise
        installed.cleanup.append(cluster.destroy)
        installed.cleanup.append(lambda: _destroy_local_clusters(work / "instances"))
    else:
        pytest.fail(f"LESSOR_E2E_CLUSTER={kind}: use local or kind")
    try:
        yield installed
    finally:
        installed.stop()


def _destroy_local_clusters(directory: Path) -> None:
    for instance in every_cluster(directory):
        subprocess.run(["chattr", "-R", "-i", str(instance)], check=False, capture_output=True)
        LocalControlPlane(instance).destroy()
