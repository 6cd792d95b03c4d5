"""Helm, built from its pinned Go module into the cache outside the repository, for the chart
(`charts/lessor`): its tests render and lint it, and the kind e2e installs lessor with it.

lessor ships a Helm chart beside its kustomize base, for teams that install everything with
Helm; nothing in lessor runs Helm. Like MinIO (object_store.py) it is built with
`go install helm.sh/helm/v3/cmd/helm@<version>` (its go.mod has no replace directives), since no
release binary is downloaded where this project is developed and tested, and kept in
`<cache>/helm-<version>/helm`, keyed by the version pinned in versions.json (`helm`).

`python -m lessor.controlplane.helm` builds it when missing and prints its path.

Measured on two cores (go 1.26.8): the first build, downloading Helm's modules, took 2 min 23 s
(on a Go build cache that already held the Kubernetes client libraries of the control plane's
build); a rebuild with the module and build caches warm 4 s; finding it cached 0.1 s.
"""

from __future__ import annotations

import json
import re
import sys
from importlib import resources
from pathlib import Path

from lessor.controlplane.binaries import Progress, build_once, cache_root, run_go
from lessor.controlplane.errors import ControlPlaneError

HELM_MODULE = "helm.sh/helm/v3"


def helm_version() -> str:
    """The pinned Helm module version, from versions.json beside the control plane's pins."""
    text = resources.files("lessor.controlplane").joinpath("versions.json").read_text()
    return str(json.loads(text)["helm"])


def helm_dir(version: str | None = None) -> Path:
    return cache_root() / f"helm-{version or helm_version()}"


def find_helm(version: str | None = None) -> Path | None:
    """The cached helm binary if it is there, else None."""
    binary = helm_dir(version) / "helm"
    return binary if binary.is_file() else None


def kubernetes_version(go_mod: str) -> tuple[str, str]:
    """Kubernetes major and minor version of the client-go a go.mod requires (v0.35.1: 1, 35)."""
    found = re.search(r"^\s*k8s\.io/client-go\s+v0\.(\d+)\.", go_mod, re.MULTILINE)
    if found is None:
        raise ControlPlaneError("Helm's go.mod requires no k8s.io/client-go")
    return "1", found.group(1)


def ensure_helm(progress: Progress = print) -> Path:
    """Return the path of the pinned helm binary, building it first if it is not cached."""
    version = helm_version()

    def build(go: str, work: Path, out: Path) -> None:
        info = json.loads(
            run_go(go, ["mod", "download", "-json", f"{HELM_MODULE}@{version}"], work, progress)
        )
        major, minor = kubernetes_version(Path(info["GoMod"]).read_text())
        # What Helm's own Makefile stamps: its version, and the Kubernetes version of its
        # client-go, which `helm template` and `helm lint` assume of the cluster (unstamped, they
        # assume 1.20, and refuse a chart whose kubeVersion asks for more).
        stamps = {
            "internal/version.version": version,
            "pkg/chartutil.k8sVersionMajor": major,
            "pkg/chartutil.k8sVersionMinor": minor,
            "pkg/lint/rules.k8sVersionMajor": major,
            "pkg/lint/rules.k8sVersionMinor": minor,
        }
        ldflags = " ".join(f"-X {HELM_MODULE}/{name}={value}" for name, value in stamps.items())
        install = ["install", "-trimpath", f"-ldflags=-s -w {ldflags}"]
        # `go install` has no -o: GOBIN says where the binary goes.
        run_go(
            go,
            [*install, f"{HELM_MODULE}/cmd/helm@{version}"],
            work,
            progress,
            env={"GOBIN": str(out)},
        )

    directory = build_once(
        helm_dir(version),
        lambda: find_helm(version) is not None,
        build,
        what=f"Helm {version}",
        missing_go=(
            "the Go toolchain (go 1.25 or newer) is needed to build Helm, which the chart's "
            "tests and the kind e2e use, but `go` is not on PATH; install Go"
        ),
        progress=progress,
    )
    return directory / "helm"


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main() -> int:
    print(ensure_helm(_progress))
    return 0


if __name__ == "__main__":
    sys.exit(main())
