"""vcluster's image, built here from its Go module, for the `vcluster` pools of the kind e2e path.

vcluster's published images cannot be pulled here (no registry is reachable), so the image a
`vcluster` pool runs is assembled from the same kind of Go builds as the control plane:

- `vcluster` (the syncer, `cmd/vcluster`, run as `vcluster start`) from
  github.com/loft-sh/vcluster at the pinned version. v0.30.0 is the newest release the module
  proxy serves here; its go.mod has no replace directives, and every flag it passes to
  kube-apiserver and kube-controller-manager is accepted by the v1.35.4 builds lessor pins
  (vcluster has no version gate; it was made for 1.34, one minor behind, within skew);
- `kine` (github.com/k3s-io/kine, the version vcluster's own image carries), vcluster's free
  backing store (SQLite behind an etcd API), built with cgo for SQLite and linked statically;
- kube-apiserver and kube-controller-manager: the local control plane's binaries.

The image is laid out as vcluster's own are: the syncer at /vcluster, kine at
/usr/local/bin/kine, and the Kubernetes binaries under /kubernetes, which an init container
copies into the pod's /binaries (as vcluster's kubernetes image is used), on lessor's Debian
base, which has the `cp` that takes. The virtual cluster's CoreDNS uses the CoreDNS image the
kind node already holds (kubeadm's, built for the node image).
"""

from __future__ import annotations

import json
import os
import subprocess
from importlib import resources
from pathlib import Path

from e2e.kind.lessor_image import say
from e2e.kind.sandboxes import build_image
from lessor.controlplane.binaries import (
    Progress,
    build_once,
    cache_root,
    ensure_binaries,
    run_go,
    wrapper_module,
)
from lessor.controlplane.errors import ControlPlaneError

MODULE = "github.com/loft-sh/vcluster"
KINE = "github.com/k3s-io/kine"
BINARIES = ("vcluster", "kine")
KUBERNETES = ("kube-apiserver", "kube-controller-manager")
MISSING_GO = "the Go toolchain (go 1.25 or newer) is needed to build vcluster's image"


def pins() -> dict[str, str]:
    data: dict[str, str] = json.loads(
        resources.files("e2e.kind").joinpath("versions.json").read_text()
    )
    return {"vcluster": data["vcluster"], "kine": data["kine"]}


def image() -> str:
    return f"lessor-vcluster:{pins()['vcluster']}"


def _build_kine(go: str, version: str, work: Path, out: Path, progress: Progress) -> None:
    """kine needs cgo (SQLite); linked statically, it runs on any base."""
    wrapper_module(work, "lessor.dev/localcp/kine", ["go 1.24", f"require {KINE} {version}"])
    run_go(go, ["get", f"{KINE}@{version}"], work, progress)
    env = {
        **os.environ,
        "GOFLAGS": "-mod=mod",
        "CGO_ENABLED": "1",
        "CGO_CFLAGS": "-DSQLITE_ENABLE_DBSTAT_VTAB=1 -DSQLITE_USE_ALLOCA=1",
    }
    ldflags = f"-s -w -extldflags -static -X {KINE}/pkg/version.Version={version}"
    command = [
        go, "build", "-trimpath", "-tags", "osusergo netgo sqlite_omit_load_extension",
        "-ldflags", ldflags, "-o", str(out / "kine"), KINE,
    ]  # fmt: skip
    progress("  go build kine (cgo, static)")
    result = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ControlPlaneError(f"building kine failed:\n{result.stderr.strip()[-4000:]}")


def ensure_vcluster(progress: Progress = say) -> Path:
    """The directory holding `vcluster` and `kine`, built into the cache on first use."""
    versions = pins()
    target = cache_root() / "vcluster" / f"vcluster-{versions['vcluster']}_kine-{versions['kine']}"

    def build(go: str, work: Path, out: Path) -> None:
        module = work / "vcluster"
        version = versions["vcluster"]
        wrapper_module(
            module, "lessor.dev/localcp/vcluster", ["go 1.25", f"require {MODULE} {version}"]
        )
        run_go(go, ["get", f"{MODULE}/cmd/vcluster@{version}"], module, progress)
        ldflags = f"-s -w -X {MODULE}/pkg/telemetry.SyncerVersion={version}"
        run_go(
            go,
            ["build", "-trimpath", "-ldflags", ldflags, "-o", str(out / "vcluster"),
             f"{MODULE}/cmd/vcluster"],
            module,
            progress,
        )  # fmt: skip
        _build_kine(go, versions["kine"], work / "kine", out, progress)

    return build_once(
        target,
        lambda: all((target / name).is_file() for name in BINARIES),
        build,
        what=f"vcluster {versions['vcluster']} and kine {versions['kine']}",
        missing_go=MISSING_GO,
        progress=progress,
    )


def build(base: str, progress: Progress = say) -> str:
    """`lessor-vcluster:<version>` on `base` (lessor's Debian python base), unless built from
    the same binaries already."""
    built = ensure_vcluster(progress)
    kubernetes = ensure_binaries(progress)
    files = {name: (built / name).read_bytes() for name in BINARIES}
    files |= {name: (kubernetes / name).read_bytes() for name in KUBERNETES}
    dockerfile = (
        "COPY vcluster /vcluster\n"
        "COPY kine /usr/local/bin/kine\n"
        f"COPY {' '.join(KUBERNETES)} /kubernetes/\n"
        "USER 65532:65532\n"
        'ENTRYPOINT ["/vcluster", "start"]\n'
    )
    return build_image(image(), base, files, dockerfile, progress)


if __name__ == "__main__":
    from e2e.kind.lessor_image import python_base

    print(build(python_base(say)))
