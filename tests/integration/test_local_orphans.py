"""`local` clusters end with their host: `controlplane stop` stops the host's clusters, the operator
stops clusters whose ClusterInstance is gone, and `gc` stops those of a host that no longer
answers, never those of one that does. Processes are counted by the directory on their command
line, independently of any record."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lessor.controlplane.binaries import ensure_binaries
from lessor.controlplane.cluster import LocalControlPlane
from lessor.controlplane.kubectl import Cluster, wait_established
from lessor.controlplane.local_clusters import Host, every_cluster
from lessor.controlplane.processes import processes_mentioning
from lessor.operator.backends.base import InstanceRef
from lessor.operator.backends.local import LocalBackend
from tests.integration.operator_harness import (
    Objects,
    Operator,
    alive,
    destroy_local_clusters,
    pids_of,
    wait_for,
)
from tests.integration.service_accounts import install_rbac

pytestmark = pytest.mark.integration
CRDS = Path(__file__).resolve().parents[2] / "crds"


def host_of(cluster: LocalControlPlane) -> Host:
    uid = cluster.kubectl("get", "namespace", "kube-system", "-o", "jsonpath={.metadata.uid}")
    return Host(uid.stdout.strip(), cluster.server, (cluster.pki / "ca.crt").read_bytes())


@pytest.fixture
def second_host(tmp_path: Path) -> Iterator[LocalControlPlane]:
    """A host of its own (control plane only: nothing here needs a node), stopped even if the
    test fails; its processes also die with the test process (not detached)."""
    host = LocalControlPlane(tmp_path / "host")
    host.start(ensure_binaries(), with_node=False)
    try:
        yield host
    finally:
        host.destroy()


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    """The local backend directory; whatever cluster is left in it is stopped at the end."""
    directory = tmp_path / "instances"
    try:
        yield directory
    finally:
        destroy_local_clusters(directory)


def provision(host: Host, root: Path, count: int) -> list[Path]:
    """`count` running local clusters of `host`, as the operator's backend starts them."""
    backend = LocalBackend.of_host(host, root)
    refs = [InstanceRef("pools", f"c{n}", str(uuid.uuid4())) for n in range(count)]
    for ref in refs:
        asyncio.run(backend.provision(ref))
    return [root / host.uid / LocalBackend.name(ref) for ref in refs]


def running(directory: Path) -> int:
    return len(processes_mentioning(str(directory)))


def python_m(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_controlplane_stop_stops_the_hosts_local_clusters(
    second_host: LocalControlPlane, root: Path
) -> None:
    host = host_of(second_host)
    clusters = provision(host, root, 2)
    assert [running(c) for c in clusters] == [2, 2], "etcd and kube-apiserver each"

    stopped = python_m(
        "lessor.controlplane",
        f"--dir={second_host.directory}",
        "stop",
        f"--local-backend-dir={root}",
    )

    assert stopped.returncode == 0, stopped.stderr
    assert "stopped 2 local cluster(s)" in stopped.stderr
    assert running(root) == 0
    assert running(second_host.directory) == 0
    assert not (root / host.uid).exists()


def test_gc_keeps_the_clusters_of_a_live_host_and_stops_those_of_a_gone_one(
    second_host: LocalControlPlane, root: Path
) -> None:
    host = host_of(second_host)
    [cluster] = provision(host, root, 1)
    unknown = root / "pools_old_0000"  # the layout before hosts; a record-less directory
    unknown.mkdir()

    def gc(*args: str) -> list[dict[str, object]]:
        result = python_m(
            "lessor.controlplane.local_clusters", "gc", f"--local-backend-dir={root}", *args
        )
        assert result.returncode == 0, result.stderr
        findings: list[dict[str, object]] = json.loads(result.stdout)
        return findings

    by_verdict = {f["verdict"]: f for f in gc("-o", "json")}
    assert by_verdict["answers"]["action"] == "kept"
    assert by_verdict["answers"]["clusters"] == [str(cluster)]
    assert by_verdict["unknown host"]["action"] == "kept"
    assert running(cluster) == 2
    text = python_m("lessor.controlplane.local_clusters", "gc", f"--local-backend-dir={root}")
    assert f"host {host.uid} ({host.server}) still answers" in text.stdout

    # The host is deleted as a crash or `kill -9` would: its processes, not its record, go.
    state = second_host.state()
    assert state is not None
    for process in state.processes:
        subprocess.run(["kill", "-9", str(process.pid)], check=True)
    wait_for("the host's processes to go", lambda: running(second_host.directory) == 0)

    assert {f["verdict"]: f["action"] for f in gc("--dry-run", "-o", "json")}["gone"] == (
        "would stop"
    )
    assert running(cluster) == 2, "a dry run stops nothing"
    by_verdict = {f["verdict"]: f for f in gc("-o", "json")}
    assert by_verdict["gone"]["action"] == "stopped"
    assert running(root) == 0
    assert not (root / host.uid).exists()
    assert unknown.exists(), "an unknown host's cluster needs --include-unknown-host"
    assert gc("--include-unknown-host", "-o", "json")[0]["action"] == "stopped"
    assert not unknown.exists()


@pytest.fixture
def objects(control_plane: Cluster) -> Iterator[Objects]:
    control_plane.kubectl("apply", "-f", str(CRDS))
    wait_established(control_plane)
    namespace = f"orphans-{uuid.uuid4().hex[:8]}"
    control_plane.kubectl("create", "namespace", namespace)
    try:
        yield Objects(control_plane, namespace)
    finally:
        control_plane.kubectl("delete", "namespace", namespace, "--wait=false")


def test_the_operator_stops_the_cluster_of_an_instance_deleted_while_it_was_down(
    control_plane: Cluster, objects: Objects, root: Path, tmp_path: Path
) -> None:
    operator = Operator(
        kubeconfig=control_plane.kubeconfig,
        namespace=objects.namespace,
        backend_dir=root,
        log_path=tmp_path / "operator.log",
        leader_election=False,
        extra=["--local-orphan-grace=3"],
    )
    try:
        operator.start()
        objects.pool("p", warmTarget=2)
        wait_for("2 ready", lambda: objects.pool_status("p").get("ready") == 2)
        doomed, kept = objects.list("clusterinstances")
        operator.kill(signal.SIGKILL)

        name = doomed["metadata"]["name"]
        objects.cluster.kubectl(
            "delete", "clusterinstance", name, "-n", objects.namespace, "--wait=false"
        )
        objects.patch("clusterinstance", name, {"metadata": {"finalizers": None}})
        wait_for("the instance to go", lambda: objects.get("clusterinstance", name) is None)
        [directory] = [d for d in every_cluster(root) if doomed["metadata"]["uid"] in d.name]
        assert running(directory) == 2, "nothing tore its cluster down"

        operator.start()
        wait_for("the orphan to stop", lambda: running(directory) == 0 and not directory.exists())
        assert all(alive(pid) for pid in pids_of(kept)), "a live instance's cluster is left alone"
        assert objects.get("clusterinstance", kept["metadata"]["name"]) is not None
        assert operator.metric("lessor_local_orphans_stopped_total") == 1
        assert "has no ClusterInstance" in operator.log_path.read_text()
    finally:
        if operator.process is not None and operator.process.poll() is None:
            operator.kill(signal.SIGKILL)


def test_an_operator_without_the_local_backends_rights_says_so_and_recovers_once_granted(
    control_plane: Cluster, objects: Objects, root: Path, tmp_path: Path
) -> None:
    """The shipped RBAC (manifests/base) grants nothing cluster-wide for `local` pools: the
    operator starts and serves all the same, a `local` instance says what is missing, and
    granting manifests/local-backend is enough, with no restart."""
    if not isinstance(control_plane, LocalControlPlane):
        pytest.skip("ServiceAccount kubeconfigs are made with the local control plane's CA")
    accounts = install_rbac(control_plane, objects.namespace, tmp_path)
    operator = Operator(
        kubeconfig=accounts["lessor-operator"],
        namespace=objects.namespace,
        backend_dir=root,
        log_path=tmp_path / "operator.log",
        leader_election=False,
    )
    try:
        operator.start()
        objects.pool("p", warmTarget=1)
        refusing_since = time.monotonic()

        def message() -> str:
            instances = objects.list("clusterinstances")
            return str(instances[0].get("status", {}).get("message", "")) if instances else ""

        wait_for("the instance to say why", lambda: "kube-system" in message())
        assert "manifests/local-backend" in message()
        assert not every_cluster(root), "no cluster is started for an unnamed host"
        assert operator.serving()

        refused_for = time.monotonic() - refusing_since
        install_rbac(control_plane, objects.namespace, tmp_path, local_backend=True)
        # The failing provision was retried with exponential backoff, so the next try may be
        # as far off as the failures lasted: the hang guard grows with them.
        wait_for(
            "a warm cluster",
            lambda: objects.pool_status("p").get("ready") == 1,
            timeout=max(120.0, 3 * refused_for),
        )
        assert [d.parent.name for d in every_cluster(root)] == [host_of(control_plane).uid]
    finally:
        if operator.process is not None and operator.process.poll() is None:
            operator.kill(signal.SIGKILL)
