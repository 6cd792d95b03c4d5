"""lessor installed in kind with its Helm chart (charts/lessor), as a team that installs
everything with Helm installs it.

The e2e suite on the local control plane installs the kustomize overlay (manifests/overlays/dev);
in kind it installs the chart with the dev overlay's values (charts/lessor/ci/dev-values.yaml).
tests/integration/test_helm_chart.py holds the two renderings equal object for object, so each
suite proves the objects they share, and this one also proves what only Helm does: the CRDs from
the chart's crds/, the release upgraded with one value changed. Helm is built from its Go module
into the cache (lessor/controlplane/helm.py).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "lessor"
VALUES = CHART / "ci" / "dev-values.yaml"
RELEASE = "lessor"
# The chart makes lessor's namespace itself (Pod Security `restricted`), which Helm could not do
# for the namespace it records the release in: the record is kept in `default`.
RELEASE_NAMESPACE = "default"


@dataclass(frozen=True)
class Helm:
    """The helm command against one cluster, its own state (repository cache, configuration)
    under `home` instead of the user's home directory."""

    binary: Path
    kubeconfig: Path
    home: Path

    def __call__(self, *args: str, timeout: float = 600) -> str:
        env = {
            **os.environ,
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_DATA_HOME": str(self.home / "data"),
        }
        argv = [str(self.binary), "--kubeconfig", str(self.kubeconfig)]
        result = subprocess.run(
            [*argv, "--namespace", RELEASE_NAMESPACE, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if result.returncode != 0:
            raise AssertionError(f"`helm {' '.join(args)}` failed:\n{result.stderr.strip()}")
        return result.stdout

    def install(self) -> None:
        """`helm install` of the chart with the dev overlay's values; the rollout is waited for
        by whoever changes the configuration next (install_kind's enable_sandboxes)."""
        self("install", RELEASE, str(CHART), "--values", str(VALUES))

    def set_values(self, *assignments: str) -> None:
        """`helm upgrade --reuse-values --set ...`: how a Helm user changes one setting. A
        changed config.yaml changes the pods' checksum annotation, so both Deployments roll."""
        sets = [f"--set={assignment}" for assignment in assignments]
        self("upgrade", RELEASE, str(CHART), "--reuse-values", *sets)
