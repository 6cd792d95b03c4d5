"""Running kubectl against a cluster, local or existing, with one calling convention."""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from lessor.controlplane.errors import ControlPlaneError


class Cluster(Protocol):
    """What tests and tools need of a cluster, whoever runs it."""

    @property
    def kubeconfig(self) -> Path: ...

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]: ...


def run_kubectl(
    kubectl: str,
    kubeconfig: Path,
    *args: str,
    input: str | None = None,
    check: bool = True,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run kubectl; with `check`, a failure raises with kubectl's own message."""
    argv = [kubectl, "--kubeconfig", str(kubeconfig), *args]
    result = subprocess.run(
        argv, input=input, capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and result.returncode != 0:
        raise ControlPlaneError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
    return result


_ESTABLISHED = (
    '{range .items[*]}{.metadata.name}{"="}'
    '{.status.conditions[?(@.type=="Established")].status}{"\\n"}{end}'
)


def wait_established(cluster: Cluster, *names: str, timeout: float = 120.0) -> None:
    """Return once the named CRDs (every CRD when none is named) are Established.

    Not `kubectl wait --for=condition=Established`: on a CRD created a moment ago, whose
    status the API server has not written yet, it fails at once (`.status.conditions accessor
    error`) instead of waiting, and a busy machine makes that moment longer."""
    deadline = time.monotonic() + timeout
    pending: list[str] = list(names)
    while time.monotonic() < deadline:
        listed = cluster.kubectl("get", "crd", "-o", f"jsonpath={_ESTABLISHED}", check=False)
        if listed.returncode == 0:
            state = dict(line.split("=", 1) for line in listed.stdout.splitlines() if "=" in line)
            pending = [n for n in names or state if state.get(n) != "True"]
            if not pending:
                return
        time.sleep(0.2)
    raise ControlPlaneError(f"CRDs not Established within {timeout:g}s: {', '.join(pending)}")


@dataclass(frozen=True)
class ExistingCluster:
    """A cluster someone else runs (kind, or any other), named by LESSOR_TEST_KUBECONFIG."""

    kubeconfig: Path
    kubectl_path: str

    @classmethod
    def from_kubeconfig(cls, kubeconfig: Path, cached_kubectl: Path | None) -> ExistingCluster:
        found = str(cached_kubectl) if cached_kubectl else shutil.which("kubectl")
        if found is None:
            raise ControlPlaneError("LESSOR_TEST_KUBECONFIG is set but no kubectl is on PATH")
        return cls(kubeconfig=kubeconfig, kubectl_path=found)

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return run_kubectl(
            self.kubectl_path, self.kubeconfig, *args, input=input, check=check, timeout=timeout
        )
