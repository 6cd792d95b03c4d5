"""Running kubectl against a cluster, local or existing, with one calling convention."""

from __future__ import annotations

import shutil
import subprocess
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
