"""Tenants cannot reach each other, lessor or the host: two vcluster clusters leased from the
installed lessor in kind, where a NetworkPolicy agent enforces (e2e/kind/network_policies.py).

A pod in tenant A's cluster opens TCP connections, for real, to:
- tenant B's server pod: refused, while B's own pod reaches it;
- lessor's API, API metrics and operator ports (the pods' addresses), and the node's kubelet:
  refused;
- its own API server by name (DNS and the cluster's own API): reached;
- an address outside the host cluster that the pool allows (a listener of this test on the
  kind network's gateway, this machine), and the same address on a port the pool does not
  allow: reached, refused.
Then lessor's policies are deleted from both namespaces and A reaches B and the kubelet: the
refusals were the policies', not a dead server's.

Not run here: the cloud metadata address (nothing answers 169.254.169.254 on these machines, so
a refusal could not be told from silence; tests/unit/test_isolation.py holds the ranges).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from e2e.installation import NAMESPACE, Installation, wait_for
from e2e.kind.registry import kind_gateway
from e2e.kind.sandboxes import SANDBOX_IMAGE
from e2e.test_scenarios import kubectl_binary
from lessor.operator.backends import isolation
from lessor.operator.backends.base import InstanceRef
from lessor.operator.backends.instance_namespace import namespace_name

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        os.environ.get("LESSOR_E2E_CLUSTER", "local") != "kind",
        reason="needs pods on real nodes and an enforcing NetworkPolicy agent (kind)",
    ),
]
POOL = "e2e-isolated"
SERVER_PORT = 8080
# Tries a TCP connection to each HOST:PORT argument; prints "HOST:PORT open|closed" per line.
PROBE = """
import socket, sys
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
        print(target, "open")
    except OSError:
        print(target, "closed")
"""
SERVE = (
    "import http.server as h; "
    f"h.HTTPServer(('', {SERVER_PORT}), h.BaseHTTPRequestHandler).serve_forever()"
)
HOLD = "import time; time.sleep(3600)"


@dataclass
class Tenant:
    kubeconfig: Path
    namespace: str  # the cluster's namespace in the host

    def kubectl(
        self, *args: str, check: bool = True, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        try:
            done = subprocess.run(
                [kubectl_binary(), "--kubeconfig", str(self.kubeconfig),
                 "--request-timeout=60s", *args],
                capture_output=True, text=True, timeout=timeout, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise AssertionError(f"kubectl {' '.join(args)}: no answer in {timeout:.0f}s") from None
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done

    def run_python(self, name: str, script: str) -> str:
        """A pod of the tenant running `script`, Ready; its address in the host's pod network.
        A pod that does not get there fails with what its cluster last said of it (its phase
        and conditions, or why the cluster did not answer)."""
        # A tenth of the namespace's default CPU request: three of these and two clusters join
        # every earlier scenario's pods on the kind node's two cores.
        small = {"spec": {"containers": [{
            "name": name, "image": SANDBOX_IMAGE, "imagePullPolicy": "IfNotPresent",
            "command": ["python3", "-c", script],
            "resources": {"requests": {"cpu": "5m", "memory": "32Mi"}},
        }]}}  # fmt: skip
        self.kubectl(
            "run", name, f"--image={SANDBOX_IMAGE}", "--restart=Never",
            f"--overrides={json.dumps(small)}",
        )  # fmt: skip
        seen: list[str] = []

        def ready() -> str | None:
            done = self.kubectl("get", "pod", name, "-o", "json", check=False, timeout=90)
            if done.returncode != 0:
                seen.append(done.stderr.strip()[:500])
                return None
            status = json.loads(done.stdout).get("status", {})
            seen.append(json.dumps({k: status.get(k) for k in ("phase", "conditions")})[:1500])
            conditions = {c["type"]: c["status"] for c in status.get("conditions", [])}
            return status.get("podIP") if conditions.get("Ready") == "True" else None

        try:
            return str(wait_for(f"pod {name} Ready", ready, timeout=300))
        except AssertionError as error:
            raise AssertionError(f"{error}; last seen: {seen[-1:]}") from None

    def probe(self, pod: str, targets: list[str]) -> dict[str, str]:
        done = self.kubectl("exec", pod, "--", "python3", "-c", PROBE, *targets)
        return dict(line.split(" ", 1) for line in done.stdout.splitlines())


def until_verdicts(
    tenant: Tenant, pod: str, expected: dict[str, str], timeout: float = 180
) -> None:
    """Probe until every target answers as expected (a new pod's rules reach the node a moment
    after it starts); the ceiling catches a policy that never holds, with the last verdicts."""
    deadline = time.monotonic() + timeout
    while (found := tenant.probe(pod, list(expected))) != expected:
        if time.monotonic() > deadline:
            raise AssertionError(f"expected {expected}, found {found}")
        time.sleep(2)


@dataclass(frozen=True)
class Outside:
    """Two TCP listeners of this test on the kind network's gateway, an address of this machine
    the nodes reach: a port the pool allows, and one it does not."""

    address: str
    allowed: int
    other: int


@pytest.fixture
def outside() -> Iterator[Outside]:
    """The listeners of `Outside`, accepting until the test ends."""
    address = kind_gateway()
    sockets = [socket.create_server((address, 0)) for _ in range(2)]
    stop = threading.Event()

    def accept(server: socket.socket) -> None:
        server.settimeout(0.5)
        while not stop.is_set():
            try:
                server.accept()[0].close()
            except TimeoutError:
                continue

    threads = [threading.Thread(target=accept, args=(s,), daemon=True) for s in sockets]
    for thread in threads:
        thread.start()
    try:
        yield Outside(address, sockets[0].getsockname()[1], sockets[1].getsockname()[1])
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        for server in sockets:
            server.close()


def lease(
    configured: Installation, pool: str, name: str, work: Path
) -> tuple[Tenant, dict[str, Any]]:
    """A lease of `pool`, Bound: its tenant (kubeconfig written into `work`) and its instance.
    A lease that does not bind fails with what an administrator would look at."""
    configured.apply(
        {
            "apiVersion": "lessor.dev/v1alpha1",
            "kind": "ClusterLease",
            "metadata": {"name": name},
            "spec": {"pool": pool, "ttl": "30m", "requester": f"{pool}/{name}"},
        }
    )

    def bound() -> dict[str, Any] | None:
        found = configured.get("clusterlease", name) or {}
        return found if found.get("status", {}).get("phase") == "Bound" else None

    try:
        found = wait_for(f"{name} Bound", bound, timeout=600)
    except AssertionError as timeout:
        raise AssertionError(f"{timeout}\n{configured.snapshot(pool)}") from None
    secret = configured.get("secret", found["status"]["kubeconfigSecret"])
    assert secret is not None
    kubeconfig = work / f"{name}.kubeconfig"
    kubeconfig.write_bytes(base64.b64decode(secret["data"]["kubeconfig"]))
    instance = configured.get("clusterinstance", found["status"]["instance"]["name"])
    assert instance is not None
    meta = instance["metadata"]
    namespace = namespace_name(InstanceRef(NAMESPACE, meta["name"], meta["uid"]))
    return Tenant(kubeconfig, namespace), instance


def _address(configured: Installation, selector: str) -> str:
    pods = json.loads(
        configured.kubectl("get", "pods", "-n", NAMESPACE, "-l", selector, "-o", "json").stdout
    )["items"]
    return str(next(p["status"]["podIP"] for p in pods if p["status"].get("podIP")))


def test_a_tenant_reaches_its_own_cluster_and_what_its_pool_allows_and_nothing_else(
    configured: Installation, tmp_path: Path, outside: Outside
) -> None:
    backend = configured.vcluster_backend()
    backend["network"] = {
        "egress": [
            {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
                                            "169.254.0.0/16", "100.64.0.0/10", "127.0.0.0/8"]},
            {"cidr": f"{outside.address}/32", "ports": [outside.allowed]},
        ]
    }  # fmt: skip
    configured.apply(
        {
            "apiVersion": "lessor.dev/v1alpha1",
            "kind": "ClusterPool",
            "metadata": {"name": POOL},
            # Two clusters, one per tenant, and no refill behind them: the kind node's two
            # cores hold every earlier scenario's pods as well.
            "spec": {"warmTarget": 2, "maxInstances": 2, "ttl": "30m", "backend": backend},
        }
    )
    suffix = uuid.uuid4().hex[:6]
    try:
        _isolated(configured, tmp_path, suffix, outside)
    finally:  # the clusters go, so that the scenarios after this one have the node to themselves
        configured.kubectl("delete", "clusterpool", POOL, "-n", NAMESPACE, "--wait=false")
        configured.kubectl(
            "delete", "clusterlease", f"tenant-a-{suffix}", f"tenant-b-{suffix}", "-n", NAMESPACE,
            "--wait=false", "--ignore-not-found",
        )  # fmt: skip


def _isolated(configured: Installation, tmp_path: Path, suffix: str, outside: Outside) -> None:
    a, _ = lease(configured, POOL, f"tenant-a-{suffix}", tmp_path)
    b, _ = lease(configured, POOL, f"tenant-b-{suffix}", tmp_path)
    b_server = f"{b.run_python('server', SERVE)}:{SERVER_PORT}"
    b.run_python("neighbour", HOLD)
    until_verdicts(b, "neighbour", {b_server: "open"})  # B's server answers its own

    node = json.loads(configured.kubectl("get", "nodes", "-o", "json").stdout)["items"][0]
    node_ip = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
    api = _address(
        configured, "app.kubernetes.io/component=apiserver,app.kubernetes.io/name=lessor"
    )
    operator = _address(configured, "app.kubernetes.io/component=operator")
    kubelet = f"{node_ip}:10250"
    a.run_python("probe", HOLD)
    until_verdicts(
        a, "probe",
        {
            "kubernetes.default.svc.cluster.local:443": "open",
            f"{outside.address}:{outside.allowed}": "open",
            f"{outside.address}:{outside.other}": "closed",
            b_server: "closed",
            f"{api}:8000": "closed",
            f"{api}:9090": "closed",
            f"{operator}:8080": "closed",
            kubelet: "closed",
        },
    )  # fmt: skip

    for tenant in (a, b):
        configured.kubectl(
            "delete", "networkpolicy", isolation.ISOLATION, isolation.CLUSTER_API,
            "-n", tenant.namespace,
        )  # fmt: skip
    until_verdicts(a, "probe", {b_server: "open", kubelet: "open"})
