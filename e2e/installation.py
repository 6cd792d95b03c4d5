"""An installed lessor for the e2e scenarios, on one of two kinds of cluster.

- `local` (default): the local control plane. `kubectl apply -k manifests/overlays/dev`
  installs everything; the Deployments have no node to run on, so the operator (two replicas,
  leader election) and the API server (two replicas on one address with SO_REUSEPORT) run as
  local processes, authenticated with tokens of the ServiceAccounts the manifests create:
  the manifests' RBAC is what they get. Pools use the `local` backend.
- `kind` (LESSOR_E2E_CLUSTER=kind, needs docker and kind): a kind cluster, the image built
  and loaded, the same overlay applied and rolled out, the API reached through
  `kubectl port-forward`; pools use the `k3s` backend.
"""

from __future__ import annotations

import json
import os
import re
import shutil
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

from lessor.controlplane.cluster import LocalControlPlane
from lessor.controlplane.kubectl import run_kubectl, wait_established
from lessor.controlplane.ports import PortReservation

ROOT = Path(__file__).resolve().parents[1]
OVERLAY = ROOT / "manifests" / "overlays" / "dev"
NAMESPACE = "lessor-system"
Kubectl = Callable[..., subprocess.CompletedProcess[str]]


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.2)
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

    def apply(self, document: dict[str, Any]) -> None:
        document.setdefault("metadata", {}).setdefault("namespace", NAMESPACE)
        self.kubectl("apply", "-f", "-", input=json.dumps(document))

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        result = self.kubectl("get", kind, name, "-n", NAMESPACE, "-o", "json", check=False)
        return json.loads(result.stdout) if result.returncode == 0 else None

    def leader(self) -> str:
        lease = self.get("leases.coordination.k8s.io", "lessor-operator") or {}
        return str(lease.get("spec", {}).get("holderIdentity", ""))

    def stop(self) -> None:
        for process in self.apis + self.operators:
            process.stop()
        self.ports.release()
        for step in reversed(self.cleanup):
            step()


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
        "local", kubectl, f"http://127.0.0.1:{port}", "local", work, ports=ports
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


def install_kind(work: Path) -> Installation:
    """Unverified on this project's machine (no Docker there); kept to the same steps."""
    name = f"lessor-e2e-{os.getpid()}"
    kubeconfig = work / "kind.kubeconfig"
    subprocess.run(
        ["kind", "create", "cluster", "--name", name, "--kubeconfig", str(kubeconfig),
         "--wait", "120s"],
        check=True,
    )  # fmt: skip
    cleanup = [lambda: subprocess.run(["kind", "delete", "cluster", "--name", name], check=False)]
    kubectl_binary = shutil.which("kubectl") or "kubectl"

    def kubectl(
        *args: str, input: str | None = None, check: bool = True, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        return run_kubectl(
            kubectl_binary, kubeconfig, *args, input=input, check=check, timeout=timeout
        )

    subprocess.run(["docker", "build", "-t", "lessor:dev", str(ROOT)], check=True)
    subprocess.run(["kind", "load", "docker-image", "lessor:dev", "--name", name], check=True)
    kubectl("apply", "-k", str(OVERLAY))
    for deployment in ("lessor-operator", "lessor-apiserver"):
        kubectl("rollout", "status", f"deployment/{deployment}", "-n", NAMESPACE, "--timeout=300s")
    forward_log = work / "port-forward.log"
    with forward_log.open("ab") as output:  # a file: its lines per connection never fill a pipe
        forward = subprocess.Popen(
            [kubectl_binary, "--kubeconfig", str(kubeconfig), "port-forward", "-n", NAMESPACE,
             "svc/lessor-apiserver", ":80"],
            stdout=output, stderr=subprocess.STDOUT,
        )  # fmt: skip
    cleanup.append(forward.terminate)
    # kubectl picks the local port itself and says which: nothing to race for.
    found = wait_for(
        "kubectl port-forward to listen",
        lambda: re.search(r"Forwarding from 127\.0\.0\.1:(\d+) -> ", forward_log.read_text()),
        timeout=120,
    )
    port = int(found[1])
    installation = Installation(
        "kind", kubectl, f"http://127.0.0.1:{port}", "k3s", work, cleanup=cleanup
    )
    wait_for("the API through port-forward", lambda: healthy(installation.endpoint), timeout=120)
    return installation


def pid_of(identity: str) -> int | None:
    found = re.match(r".*_(\d+)_[0-9a-f]+$", identity)
    return int(found.group(1)) if found else None
