"""lessor as a Helm release in kind: helm against the kind cluster, for what the scenarios do
to the release once docs/install.md has installed it (e2e/kind/platform_install.py) from the
packaged chart in the session's registry: a value changed with `helm upgrade --reuse-values`,
the release's status and manifest read.

The e2e suite on the local control plane installs the kustomize overlay (manifests/overlays/dev);
tests/integration/test_helm_chart.py holds the chart's rendering equal to kustomize's object for
object, so each suite proves the objects they share, and this one also proves what only Helm
does: the CRDs from the chart's crds/, a release installed from an OCI registry and upgraded.
Helm is built from its Go module into the cache (lessor/controlplane/helm.py).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "lessor"
RELEASE = "lessor"


@dataclass(frozen=True)
class Helm:
    """The helm command against one cluster and one release, its own state (repository cache,
    configuration) under `home` instead of the user's home directory. `chart` is where the
    release's chart comes from (an `oci://` reference, at `version`), `flags` what reaching it
    takes (a registry's credentials and CA)."""

    binary: Path
    kubeconfig: Path
    home: Path
    chart: str
    version: str
    namespace: str
    flags: tuple[str, ...] = ()

    def __call__(self, *args: str, timeout: float = 600) -> str:
        env = {
            **os.environ,
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_DATA_HOME": str(self.home / "data"),
        }
        argv = [str(self.binary), "--kubeconfig", str(self.kubeconfig)]
        result = subprocess.run(
            [*argv, "--namespace", self.namespace, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if result.returncode != 0:
            raise AssertionError(f"`helm {' '.join(args)}` failed:\n{result.stderr.strip()}")
        return result.stdout

    def release(self) -> tuple[str, int, str]:
        """The release's status, revision and chart (`deployed`, 2, `lessor-0.2.0`), as
        `helm list` shows them (`helm status` names no chart)."""
        listed = json.loads(self("list", "--filter", f"^{RELEASE}$", "--output", "json"))
        if len(listed) != 1:
            raise AssertionError(f"helm lists {listed} as the release {RELEASE}")
        return listed[0]["status"], int(listed[0]["revision"]), listed[0]["chart"]

    def set_values(self, *assignments: str) -> None:
        """`helm upgrade --reuse-values --set ...`: how a Helm user changes one setting. A
        changed config.yaml changes the pods' checksum annotation, so both Deployments roll."""
        sets = [f"--set={assignment}" for assignment in assignments]
        self(
            "upgrade", RELEASE, self.chart, "--version", self.version, *self.flags,
            "--reuse-values", *sets,
        )  # fmt: skip
