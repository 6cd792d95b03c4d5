"""One installed lessor for every scenario: LESSOR_E2E_CLUSTER=local (default) or kind."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.installation import NAMESPACE, Installation, install_kind, install_local
from e2e.kind.docker_setup import DockerSetupError
from e2e.people import ALICE, BOB
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


@pytest.fixture(scope="session")
def configured(installation: Installation) -> Installation:
    """What an administrator applies after installing: tokens, a policy, a warm pool; once
    per session, for every module of scenarios."""
    installation.kubectl(
        "create", "secret", "generic", "e2e-tokens", "-n", NAMESPACE,
        f"--from-literal=alice={ALICE}", f"--from-literal=bob={BOB}",
    )  # fmt: skip
    installation.apply(
        {
            "apiVersion": "lessor.dev/v1alpha1",
            "kind": "AccessPolicy",
            "metadata": {"name": "e2e"},
            "spec": {
                "auth": {
                    "staticTokens": [
                        {"secretRef": {"name": "e2e-tokens", "key": k}, "claims": {"sub": k}}
                        for k in ("alice", "bob")
                    ]
                },
                "identity": "{sub}",
                "rules": [
                    {"pools": ["e2e-*"], "maxTtl": "1h", "maxConcurrentLeases": 2,
                     "maxExtensions": 1}
                ],
                # Sandbox pools (e2e/test_sandboxes.py) are served where agent-sandbox runs.
                "sandbox": [
                    {"match": {"claim": "sub", "value": "alice"}, "pools": ["e2e-*"],
                     "verbs": ["lease", "release"], "maxTtl": "1h",
                     "maxConcurrentSandboxes": 2}
                ],
            },
        }
    )  # fmt: skip
    installation.apply(
        {
            "apiVersion": "lessor.dev/v1alpha1",
            "kind": "ClusterPool",
            "metadata": {"name": "e2e-warm"},
            "spec": {"warmTarget": 2, "ttl": "30m", "backend": {"type": installation.backend}},
        }
    )
    return installation
