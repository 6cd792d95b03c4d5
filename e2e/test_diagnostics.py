"""A diagnostics bundle as a CI user meets it: a cluster leased with `lessor lease`, used, released,
and its bundle fetched afterwards with `lessor diagnostics --download`, from the installed
operator and API server (pods in kind, with the image and the RBAC as shipped) and a real S3
store (MinIO on this machine, where kind's pods reach it through their Docker network's gateway).
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.installation import NAMESPACE, Installation, wait_for
from e2e.people import ALICE, BOB, Person
from e2e.test_scenarios import kubectl_binary
from lessor.controlplane.object_store import MinioServer
from lessor.controlplane.ports import LOOPBACK

pytestmark = pytest.mark.e2e
POOL = "e2e-diagnostics"
BUCKET = "e2e-bundles"


def _reachable_address(installation: Installation) -> str:
    """This machine's address as the installation's operator reaches it."""
    if installation.kind != "kind":
        return LOOPBACK
    inspected = subprocess.run(
        ["docker", "network", "inspect", "kind",
         "--format", "{{range .IPAM.Config}}{{.Gateway}} {{end}}"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return next(address for address in inspected.stdout.split() if "." in address)


@pytest.fixture(scope="module")
def pool(configured: Installation, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    directory = tmp_path_factory.mktemp("store")
    with MinioServer(directory, host=_reachable_address(configured)) as store:
        store.create_bucket(BUCKET)
        configured.kubectl(
            "create", "secret", "generic", "e2e-diagnostics-store", "-n", NAMESPACE,
            *store.credential_literals(),
        )  # fmt: skip
        diagnostics = {
            "bucket": BUCKET,
            "endpoint": store.endpoint,
            "credentialsSecretRef": {"name": "e2e-diagnostics-store"},
        }
        configured.apply(
            {
                "apiVersion": "lessor.dev/v1alpha1",
                "kind": "ClusterPool",
                "metadata": {"name": POOL},
                "spec": {
                    "warmTarget": 1,
                    "ttl": "30m",
                    "backend": {"type": configured.backend},
                    "diagnostics": diagnostics,
                },
            }
        )
        try:
            yield POOL
        finally:
            configured.kubectl("delete", "clusterpool", POOL, "-n", NAMESPACE, "--wait=false")


def test_a_released_clusters_bundle_is_fetched_by_its_owner_alone(
    pool: str, configured: Installation, tmp_path: Path
) -> None:
    alice = Person(configured, tmp_path / "alice", ALICE)

    def store_ready() -> bool:
        conditions = (configured.get("clusterpool", pool) or {}).get("status", {})
        found = [c for c in conditions.get("conditions", []) if c["type"] == "DiagnosticsReady"]
        return bool(found) and found[0]["status"] == "True"

    wait_for("the pool's bucket checked", store_ready, timeout=180)
    lease = alice.json("lease", pool, "--wait-timeout", "10m")
    marker = f"ci-job-{uuid.uuid4().hex[:8]}"
    created = subprocess.run(
        [kubectl_binary(), "--kubeconfig", lease["kubeconfig"], "create", "namespace", marker],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    alice.release(lease["id"])

    bundle = tmp_path / "bundle.tar.gz"
    fetched = alice.json("diagnostics", lease["id"], "--download", str(bundle))
    assert fetched["file"] == str(bundle) and fetched["truncated"] is False
    with tarfile.open(fileobj=io.BytesIO(bundle.read_bytes()), mode="r:gz") as archive:
        files = {m.name: archive.extractfile(m).read() for m in archive.getmembers()}  # type: ignore[union-attr]
    namespaces = sorted(name for name in files if name.startswith("cluster/namespaces/page-"))
    assert marker in b"".join(files[name] for name in namespaces).decode()
    assert json.loads(files["lessor/lease.json"])["name"] == lease["id"]
    assert "Bound" in files["lessor/events.json"].decode(), "the operator may list its Events"
    assert json.loads(files["capture.json"])["timedOut"] is False

    bob = Person(configured, tmp_path / "bob", BOB)
    refused = bob.run("diagnostics", lease["id"])
    assert refused.returncode == 4 and "not found" in refused.stderr
