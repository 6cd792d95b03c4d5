"""The real Prometheus tools the monitoring tests check manifests/monitoring with: promtool, and
the Prometheus Operator's CRDs (PodMonitor, PrometheusRule), both from pinned Go modules.

Built and fetched with the local control plane's helper (lessor.controlplane.binaries: a lock,
a scratch directory renamed into place, the cache outside the repository), so there is one
mechanism for every pinned tool. promtool is built from source rather than taken from a distro
package: Debian's `prometheus` is 2.42 (2023), and which version a package manager offers is
the machine's choice, not this file's. Measured: the first build took 5 min 55 s on two busy
cores (module downloads included); every later run finds it in the cache.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from lessor.controlplane.binaries import build_once, cache_root, run_go, wrapper_module

PROMETHEUS = "v0.316.0"  # github.com/prometheus/prometheus: Prometheus 3.16's promtool
PROMETHEUS_OPERATOR = "v0.85.0"  # the root module's example/prometheus-operator-crd
OPERATOR_CRDS = ("podmonitors", "servicemonitors", "prometheusrules")
MISSING_GO = "the Go toolchain is needed to build promtool and fetch the Prometheus Operator CRDs"


def promtool() -> Path:
    """The promtool binary of PROMETHEUS, built once into the cache."""
    target = cache_root() / "bin" / f"promtool-{PROMETHEUS}"

    def build(go: str, work: Path, out: Path) -> None:
        module = work / "promtool"
        lines = ["go 1.25", f"require github.com/prometheus/prometheus {PROMETHEUS}"]
        wrapper_module(module, "lessor.dev/monitoring/promtool", lines)
        package = "github.com/prometheus/prometheus/cmd/promtool"
        run_go(go, ["get", f"{package}@{PROMETHEUS}"], module, print)
        stamp = f"-X github.com/prometheus/common/version.Version={PROMETHEUS.removeprefix('v')}"
        build = ["build", "-trimpath", "-ldflags", f"-s -w {stamp}", "-o", f"{out}/", package]
        run_go(go, build, module, print)

    directory = build_once(
        target,
        (target / "promtool").is_file,
        build,
        what=f"promtool {PROMETHEUS}",
        missing_go=MISSING_GO,
        progress=print,
    )
    return directory / "promtool"


def operator_crds() -> list[Path]:
    """The CRD files of OPERATOR_CRDS at PROMETHEUS_OPERATOR, copied once into the cache."""
    target = cache_root() / f"prometheus-operator-crds-{PROMETHEUS_OPERATOR}"
    names = [f"monitoring.coreos.com_{plural}.yaml" for plural in OPERATOR_CRDS]

    def fetch(go: str, work: Path, out: Path) -> None:
        wrapper_module(work / "module", "lessor.dev/monitoring/crds", ["go 1.25"])
        module = f"github.com/prometheus-operator/prometheus-operator@{PROMETHEUS_OPERATOR}"
        info = json.loads(run_go(go, ["mod", "download", "-json", module], work / "module", print))
        source = Path(info["Dir"]) / "example" / "prometheus-operator-crd"
        for name in names:
            shutil.copyfile(source / name, out / name)

    directory = build_once(
        target,
        lambda: all((target / name).is_file() for name in names),
        fetch,
        what=f"the Prometheus Operator CRDs {PROMETHEUS_OPERATOR}",
        missing_go=MISSING_GO,
        progress=print,
    )
    return [directory / name for name in names]
