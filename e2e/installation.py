"""An installed lessor for the e2e scenarios, on one of two kinds of cluster.

- `local` (default): the local control plane. `kubectl apply -k manifests/overlays/dev`
  installs everything; the Deployments have no node to run on, so the operator (two replicas,
  leader election) and the API server (two replicas on one address with SO_REUSEPORT) run as
  local processes, authenticated with tokens of the ServiceAccounts the manifests create:
  the manifests' RBAC is what they get. Pools use the `local` backend.
- `kind` (LESSOR_E2E_CLUSTER=kind): a kind cluster of the node image built here (e2e/kind),
  and lessor installed by running docs/install.md (e2e/kind/platform_install.py): the release
  built, its image and chart pushed to a registry of the session, the chart installed from
  `oci://` and the image pulled by the node with a pull secret, after an upgrade from the
  previous release's chart. The operator and the API server run as pods, as a platform team runs
  them. The API is reached through a NodePort Service on the node's address; pools use the
  `apiserver` backend (kube-apiserver and etcd as a pod, its kubeconfig reaching it through a
  NodePort).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from e2e.kind import (
    chart,
    gateway,
    lessor_image,
    network_policies,
    platform_install,
    sandboxes,
    vcluster,
)
from e2e.kind import cluster as kind_cluster
from e2e.kind import registry as kind_registry
from e2e.kind.components import KindVersions
from e2e.kind.lessor_image import say
from lessor.controlplane.cluster import LocalControlPlane
from lessor.controlplane.kubectl import Cluster, ExistingCluster, wait_established
from lessor.controlplane.ports import PortReservation

ROOT = Path(__file__).resolve().parents[1]
OVERLAY = ROOT / "manifests" / "overlays" / "dev"
NAMESPACE = "lessor-system"
Kubectl = Callable[..., subprocess.CompletedProcess[str]]


def wait_for(
    what: str, probe: Callable[[], Any], timeout: float = 120.0, every: float = 0.2
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def healthy(endpoint: str) -> bool:
    try:
        with urllib.request.urlopen(f"{endpoint}/healthz", timeout=2) as answer:  # noqa: S310
            return bool(answer.status == 200)
    except OSError:
        return False


@dataclass
class Process:
    argv: list[str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        with self.log.open("ab") as output:
            self.popen = subprocess.Popen(self.argv, stdout=output, stderr=subprocess.STDOUT)
        return self

    def stop(self, signum: int = signal.SIGTERM) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signum)
            self.popen.wait(timeout=60)

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None


@dataclass
class Installation:
    kind: str
    kubectl: Kubectl
    endpoint: str
    backend: str
    work: Path
    operators: list[Process] = field(default_factory=list)
    apis: list[Process] = field(default_factory=list)
    cleanup: list[Callable[[], None]] = field(default_factory=list)
    # The ports of the processes above, held while installed: restarted replicas find them
    # free, and no other process on the machine is handed them (lessor.controlplane.ports).
    ports: PortReservation = field(default_factory=PortReservation)
    # Where sandboxes are real containers (kind): the image with python3 and lessor-runner.
    sandbox_image: str | None = None
    # Where pods run on real nodes (kind): vcluster's image, built here (e2e/kind/vcluster.py).
    vcluster_image: str | None = None
    # Where a Gateway implementation runs (kind): Traefik's, TLS passthrough (e2e/kind/gateway.py).
    gateway: gateway.Gateway | None = None
    # The host cluster, as an administrator's kubectl reaches it (its admin kubeconfig).
    host: Cluster | None = None
    # Where lessor is a Helm release (kind): helm against the host cluster.
    helm: chart.Helm | None = None
    # Where lessor was installed from a registry (kind): the session's, and the doc's reader.
    registry: kind_registry.Registry | None = None
    platform: platform_install.PlatformInstall | None = None
    # The kind cluster itself (kind): images of the tests' own components are loaded into it.
    cluster: kind_cluster.KindCluster | None = None

    def apply(self, document: dict[str, Any]) -> None:
        document.setdefault("metadata", {}).setdefault("namespace", NAMESPACE)
        self.kubectl("apply", "-f", "-", input=json.dumps(document))

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        result = self.kubectl("get", kind, name, "-n", NAMESPACE, "-o", "json", check=False)
        return json.loads(result.stdout) if result.returncode == 0 else None

    def snapshot(self, pool: str) -> str:
        """What an administrator would look at when a pool's lease does not bind: the pool's
        status, its instances' phases and conditions, the pods that are not running and the
        last warnings, as text for a failing test's message."""

        def items(*argv: str) -> list[dict[str, Any]]:
            result = self.kubectl(*argv, "-o", "json", check=False)
            return json.loads(result.stdout)["items"] if result.returncode == 0 else []

        lines = [f"pool {pool}: {json.dumps((self.get('clusterpool', pool) or {}).get('status'))}"]
        for instance in items("get", "clusterinstances", "-n", NAMESPACE):
            status = instance.get("status", {})
            conditions = [(c["type"], c["status"], c.get("reason"), c.get("message", "")[:200])
                          for c in status.get("conditions", [])]  # fmt: skip
            lines.append(f"instance {instance['metadata']['name']}: {status.get('phase')} "
                         f"{conditions}")  # fmt: skip
        for pod in items("get", "pods", "-A"):
            if pod["status"].get("phase") != "Running":
                meta = pod["metadata"]
                lines.append(f"pod {meta['namespace']}/{meta['name']}: {pod['status'].get('phase')}"
                             f" {pod['status'].get('conditions')}")  # fmt: skip
        for event in items("get", "events", "-A", "--field-selector", "type=Warning")[-30:]:
            lines.append(f"event {event['involvedObject'].get('name')}: {event.get('reason')} "
                         f"{event.get('message', '')[:300]}")  # fmt: skip
        return "\n".join(lines)

    def vcluster_backend(self) -> dict[str, Any]:
        """A pool's `backend` of vcluster clusters as they run in kind: vcluster's image built
        here, the node's CoreDNS, each cluster reached through the Gateway by its own name."""
        passthrough = self.gateway
        if self.vcluster_image is None or passthrough is None:
            raise AssertionError("vcluster pools run in kind, with its Gateway")
        image = self.vcluster_image
        return {
            "type": "vcluster",
            "vcluster": {
                "image": image, "kubernetesImage": image,
                "corednsImage": f"registry.k8s.io/coredns/coredns:{KindVersions.pinned().coredns}",
                "cpu": "50m", "memory": "128Mi",
                "exposure": {
                    "type": "TLSRoute",
                    "gateway": {"name": passthrough.name, "namespace": passthrough.namespace,
                                "sectionName": passthrough.section},
                    "domain": gateway.DOMAIN, "port": passthrough.port,
                    "host": passthrough.address,
                },
            },
        }  # fmt: skip

    def leader(self) -> str:
        lease = self.get("leases.coordination.k8s.io", "lessor-operator") or {}
        return str(lease.get("spec", {}).get("holderIdentity", ""))

    def stop(self) -> None:
        for process in self.apis + self.operators:
            process.stop()
        self.ports.release()
        run_all(self.cleanup)


def _service_account_kubeconfig(kubectl: Kubectl, cluster: LocalControlPlane, name: str) -> str:
    token = kubectl("create", "token", name, "-n", NAMESPACE, "--duration=6h").stdout.strip()
    ca = (cluster.pki / "ca.crt").resolve()
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "c",
                    "cluster": {"server": cluster.server, "certificate-authority": str(ca)},
                }
            ],
            "users": [{"name": name, "user": {"token": token}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": name}}],
            "current-context": "c",
        }
    )


def install_local(cluster: LocalControlPlane, work: Path) -> Installation:
    kubectl: Kubectl = cluster.kubectl
    kubectl("apply", "-k", str(OVERLAY))
    # The operators here run on this machine and serve `local` pools (docs/operator.md).
    kubectl("apply", "-k", str(ROOT / "manifests" / "local-backend"))
    wait_established(cluster)
    configmap = yaml.safe_load(
        kubectl("get", "configmap", "lessor-config", "-n", NAMESPACE, "-o", "yaml").stdout
    )
    config = work / "config.yaml"
    config.write_text(configmap["data"]["config.yaml"])
    kubeconfigs = {}
    for account in ("lessor-operator", "lessor-apiserver"):
        path = work / f"{account}.kubeconfig"
        path.write_text(_service_account_kubeconfig(kubectl, cluster, account))
        path.chmod(0o600)
        kubeconfigs[account] = path
    ports = PortReservation()
    port = ports.take()
    installation = Installation(
        "local", kubectl, f"http://127.0.0.1:{port}", "local", work, ports=ports, host=cluster
    )
    for n in range(2):
        installation.apis.append(
            Process(
                [
                    sys.executable, "-m", "lessor.apiserver", f"--config={config}",
                    f"--kubeconfig={kubeconfigs['lessor-apiserver']}",
                    f"--bind=127.0.0.1:{port}", "--reuse-port", "--workers=1",
                    f"--ssh-audience={installation.endpoint}",
                ],
                work / f"apiserver-{n}.log",
            ).start()
        )  # fmt: skip
    for n in range(2):
        installation.operators.append(
            operator_process(installation, config, kubeconfigs["lessor-operator"], n)
        )
    wait_for("the API server", lambda: healthy(installation.endpoint), timeout=120)
    return installation


def operator_process(installation: Installation, config: Path, kubeconfig: Path, n: int) -> Process:
    return Process(
        [
            sys.executable, "-m", "lessor.operator", f"--config={config}",
            f"--kubeconfig={kubeconfig}", "--http-host=127.0.0.1",
            f"--http-port={installation.ports.take()}",
            f"--local-backend-dir={installation.work / 'instances'}",
            "--lease-duration=4", "--renew-deadline=3", "--retry-period=0.5", "--teardown-grace=5",
        ],
        installation.work / f"operator-{n}.log",
    ).start()  # fmt: skip


def run_all(cleanup: list[Callable[[], None]]) -> None:
    """Every cleanup step, the last added first, each one even when one before it failed (a
    failed uninstall must not keep the kind cluster alive); the first failure is raised."""
    failures: list[BaseException] = []
    for step in reversed(cleanup):
        try:
            step()
        except Exception as failure:  # raised below, once the others have run
            failures.append(failure)
    if failures:
        raise failures[0]


def install_kind(work: Path) -> Installation:
    """A kind cluster of the node image built here, agent-sandbox's controller running in it,
    lessor installed by docs/install.md from the session's registry (after an upgrade from the
    previous release), rolled out with sandboxes enabled, and the API reached the way a load
    balancer reaches it: a NodePort Service over the API pods, on the node's address. The doc's
    uninstall is the last cleanup step before the cluster goes."""
    forget_clusters_of_dead_runs()
    cluster = kind_cluster.up(f"{KIND_PREFIX}{os.getpid()}", progress=say)
    cleanup: list[Callable[[], None]] = [lambda: kind_cluster.down(cluster.name, say)]
    try:
        kubectl = cluster.run

        # Enforcing from the start: lessor runs under its own policies, as on a real cluster.
        network_policies.install(kubectl, cluster, say)
        registry = kind_registry.start(work, say)
        cleanup.append(registry.stop)
        registry.trust(cluster)
        platform = platform_install.prepare(cluster, kubectl, registry, work, say)
        platform.upgrade_from_previous(say)
        say("installing lessor as docs/install.md says")
        platform.run()

        def uninstall() -> None:
            say("uninstalling lessor as docs/install.md says")
            platform.run("at the end")

        cleanup.append(uninstall)
        base = lessor_image.python_base(say)
        sandbox_image = sandboxes.install(kubectl, cluster, base, say)
        vcluster_image = vcluster.build(base, say)
        cluster.load(vcluster_image)
        passthrough = gateway.install(kubectl, cluster, base, say)
        helm = platform.helm()
        enable_sandboxes(kubectl, helm)
        endpoint = _node_port_endpoint(kubectl)
        installation = Installation(
            "kind", kubectl, endpoint, "apiserver", work, cleanup=cleanup,
            sandbox_image=sandbox_image, vcluster_image=vcluster_image, gateway=passthrough,
            host=ExistingCluster.from_kubeconfig(cluster.kubeconfig, cluster.kubectl), helm=helm,
            registry=registry, platform=platform, cluster=cluster,
        )  # fmt: skip
        wait_for("the API through its Service", lambda: healthy(endpoint), timeout=120)
    except BaseException:
        run_all(cleanup)
        raise
    return installation


def enable_sandboxes(kubectl: Kubectl, helm: chart.Helm) -> None:
    """What docs/operations.md has an administrator do once agent-sandbox runs: the one
    configuration key, with Helm its value (`helm upgrade --reuse-values --set`), which rolls
    both Deployments out anew (the pods carry a checksum of config.yaml). The same upgrade
    halves the teardown grace to 60 s: the quarantine scenario waits it out whole, and every
    other release still has a minute to be verified."""
    configmap = json.loads(
        kubectl("get", "configmap", "lessor-config", "-n", NAMESPACE, "-o", "json").stdout
    )
    if yaml.safe_load(configmap["data"]["config.yaml"])["agentSandbox"]["mode"] != "disabled":
        raise AssertionError("the chart's values no longer say agentSandbox.mode: disabled")
    helm.set_values("config.agentSandbox.mode=external", "config.operator.teardownGrace=60")
    for deployment in ("lessor-operator", "lessor-apiserver"):
        kubectl("rollout", "status", f"deployment/{deployment}", "-n", NAMESPACE, "--timeout=300s")


KIND_PREFIX = "lessor-e2e-"
API_NODE_PORT_SERVICE = "lessor-apiserver-e2e"


def forget_clusters_of_dead_runs() -> None:
    """Delete the kind clusters of e2e runs whose process is gone (killed before its fixture
    could): a node container is no process the session's watchdog can see."""
    for name in kind_cluster.names():
        pid = name.removeprefix(KIND_PREFIX)
        if name.startswith(KIND_PREFIX) and pid.isdigit() and not Path(f"/proc/{pid}").exists():
            kind_cluster.down(name, say)


def _node_port_endpoint(kubectl: Kubectl) -> str:
    """What a platform team puts in front of the API pods (here a NodePort Service; an Ingress
    or a load balancer elsewhere): every request goes through kube-proxy to a Ready pod."""
    service = json.loads(
        kubectl("get", "service", "lessor-apiserver", "-n", NAMESPACE, "-o", "json").stdout
    )
    front = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": API_NODE_PORT_SERVICE, "namespace": NAMESPACE},
        "spec": {
            "type": "NodePort",
            "selector": service["spec"]["selector"],
            "ports": [{"name": "http", "port": 80, "targetPort": "http"}],
        },
    }
    applied = json.loads(kubectl("apply", "-f", "-", "-o", "json", input=json.dumps(front)).stdout)
    node_port = applied["spec"]["ports"][0]["nodePort"]
    address = kubectl(
        "get", "nodes", "-o",
        "jsonpath={.items[0].status.addresses[?(@.type=='InternalIP')].address}",
    ).stdout.strip()  # fmt: skip
    return f"http://{address}:{node_port}"


def pid_of(identity: str) -> int | None:
    found = re.match(r".*_(\d+)_[0-9a-f]+$", identity)
    return int(found.group(1)) if found else None
