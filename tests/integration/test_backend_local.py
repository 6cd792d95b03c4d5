"""The `local` backend creates real clusters whose kubeconfig works, re-adopts them after an
operator restart, and verifies teardown independently of its own records."""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lessor.controlplane.binaries import ensure_binaries
from lessor.controlplane.local_clusters import Host, every_cluster
from lessor.controlplane.processes import processes_mentioning
from lessor.operator.backends.base import InstanceRef
from lessor.operator.backends.local import LocalBackend

pytestmark = pytest.mark.integration

# No operator here, so no host to ask: one that never answers names the clusters' directory.
HOST = Host(uid="test-host", server="https://127.0.0.1:1")


@pytest.fixture
def instance() -> InstanceRef:
    return InstanceRef(namespace="pools", name="demo-abcde", uid=str(uuid.uuid4()))


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    backend = LocalBackend.of_host(HOST, tmp_path / "instances")
    yield backend
    for directory in every_cluster(backend.root):
        subprocess.run(["chattr", "-R", "-i", str(directory)], check=False)


def where(backend: LocalBackend, instance: InstanceRef) -> Path:
    """Where the instance's cluster lives: under its host's directory."""
    return backend.root / HOST.uid / LocalBackend.name(instance)


def kubectl(kubeconfig: str, *args: str) -> subprocess.CompletedProcess[str]:
    kubectl_path = ensure_binaries() / "kubectl"
    return subprocess.run(
        [str(kubectl_path), "--kubeconfig", kubeconfig, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_provisioned_cluster_serves_kubectl_and_teardown_is_verified(
    backend: LocalBackend, instance: InstanceRef, tmp_path: Path
) -> None:
    asyncio.run(backend.provision(instance))
    readiness = asyncio.run(backend.readiness(instance))
    assert readiness.ready, readiness.message
    config = tmp_path / "leased.kubeconfig"
    config.write_text(asyncio.run(backend.kubeconfig(instance)))
    result = kubectl(str(config), "get", "namespaces", "-o", "name")
    assert result.returncode == 0, result.stderr
    assert "namespace/default" in result.stdout.split()
    assert backend.directory(instance) == where(backend, instance)
    assert (backend.root / HOST.uid / "host.json").exists(), "gc can ask whether the host lives"

    # A restarted operator is a new backend object: it adopts the running cluster as it is.
    restarted = LocalBackend.of_host(HOST, backend.root)
    pids_before = readiness.details["pids"]
    asyncio.run(restarted.provision(instance))
    assert asyncio.run(restarted.readiness(instance)).details["pids"] == pids_before

    asyncio.run(restarted.teardown(instance))
    report = asyncio.run(restarted.verify_teardown(instance))
    assert report.verified, report.evidence
    assert not processes_mentioning(str(where(backend, instance)))
    assert kubectl(str(config), "get", "namespaces", "--request-timeout=3s").returncode != 0


def test_teardown_that_leaves_files_behind_is_not_verified(
    backend: LocalBackend, instance: InstanceRef
) -> None:
    asyncio.run(backend.provision(instance))
    # A real fault: an immutable file that even root cannot delete survives the teardown.
    stuck = where(backend, instance) / "pki" / "ca.crt"
    subprocess.run(["chattr", "+i", str(stuck)], check=True)
    asyncio.run(backend.teardown(instance))
    report = asyncio.run(backend.verify_teardown(instance))
    assert not report.verified
    assert any(str(stuck) in line for line in report.evidence)
    assert not processes_mentioning(str(where(backend, instance))), "processes are stopped"


def test_a_start_interrupted_by_a_crash_is_started_afresh(
    backend: LocalBackend, instance: InstanceRef
) -> None:
    asyncio.run(backend.provision(instance))
    state = where(backend, instance) / "state.json"
    first = asyncio.run(backend.readiness(instance)).details["pids"]
    # Kill the cluster's processes as a host crash would, leaving its record behind.
    for part in first.split(","):
        subprocess.run(["kill", "-9", part.split("=")[1]], check=True)
    assert state.exists()
    assert not asyncio.run(backend.readiness(instance)).ready
    asyncio.run(backend.provision(instance))
    again = asyncio.run(backend.readiness(instance))
    assert again.ready and again.details["pids"] != first
    asyncio.run(backend.teardown(instance))
    assert asyncio.run(backend.verify_teardown(instance)).verified
