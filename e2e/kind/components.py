"""The binaries of a kind node, built from pinned Go modules (and pause from its C source).

kind's published images cannot be pulled here (no registry is reachable), so every program the
node runs is built from the module proxy: kubelet, kubeadm and kube-proxy the way the local
control plane's binaries are, the rest with `go install module@version` (their go.mod files have
no replace directives). Each component lands in its own cache directory keyed by its version, so
changing one pin rebuilds only that component.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from lessor.controlplane.binaries import (
    Progress,
    Versions,
    build_etcd,
    build_kubernetes,
    build_once,
    cache_root,
    ensure_binaries,
    run_go,
)
from lessor.controlplane.errors import ControlPlaneError

NODE_COMMANDS = ("kubelet", "kubeadm", "kube-proxy")
CONTROL_PLANE_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
CNI_PLUGINS = ("main/ptp", "main/bridge", "main/loopback", "ipam/host-local", "meta/portmap")
MISSING_GO = "the Go toolchain (go 1.25 or newer) is needed to build the kind node image"


@dataclass(frozen=True)
class KindVersions:
    kubernetes: str
    kind: str
    debian: str
    etcd: str
    coredns: str
    pause: str
    cni_plugins: str
    local_path_provisioner: str

    @classmethod
    def pinned(cls) -> KindVersions:
        data = json.loads(resources.files("e2e.kind").joinpath("versions.json").read_text())
        return cls(
            kubernetes=Versions.pinned().kubernetes,
            kind=data["kind"],
            debian=data["debian"],
            etcd=data["etcd"],
            coredns=data["coredns"],
            pause=data["pause"],
            cni_plugins=data["cniPlugins"],
            local_path_provisioner=data["localPathProvisioner"],
        )


def kind_cache() -> Path:
    return cache_root() / "kind"


def module_dir(go: str, module: str, progress: Progress) -> Path:
    """The module's source in the Go module cache: kind's image recipe, pause's C source."""
    scratch = kind_cache()
    scratch.mkdir(parents=True, exist_ok=True)
    info = json.loads(run_go(go, ["mod", "download", "-json", module], scratch, progress))
    return Path(info["Dir"])


def require_go() -> str:
    go = shutil.which("go")
    if go is None:
        raise ControlPlaneError(MISSING_GO)
    return go


def go_install(go: str, packages: list[str], out: Path, progress: Progress, ldflags: str) -> None:
    """`go install pkg@version` into `out`: the module's own go.mod decides every dependency."""
    env = {**os.environ, "GOBIN": str(out), "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    progress(f"  go install {' '.join(packages)}")
    result = subprocess.run(
        [go, "install", "-trimpath", "-ldflags", ldflags, *packages],
        cwd=out,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise ControlPlaneError(
            f"`go install {' '.join(packages)}` failed:\n{result.stderr[-4000:]}"
        )


def cached(
    name: str,
    names: tuple[str, ...],
    build: Callable[[str, Path, Path], None],
    progress: Progress,
) -> Path:
    """Build one component into `kind/bin/<name>` unless every file in `names` is there."""
    target = kind_cache() / "bin" / name
    return build_once(
        target,
        lambda: all((target / file).is_file() for file in names),
        build,
        what=name,
        missing_go=MISSING_GO,
        progress=progress,
    )


def node_kubernetes(versions: KindVersions, progress: Progress) -> Path:
    def build(go: str, work: Path, out: Path) -> None:
        build_kubernetes(
            go, versions.kubernetes, work / "k8s", out, progress, commands=NODE_COMMANDS
        )

    return cached(f"kubernetes-node-{versions.kubernetes}", NODE_COMMANDS, build, progress)


def etcd(versions: KindVersions, progress: Progress) -> Path:
    def build(go: str, work: Path, out: Path) -> None:
        build_etcd(go, versions.etcd, work / "etcd", out, progress)

    return cached(f"etcd-{versions.etcd}", ("etcd",), build, progress)


def coredns(versions: KindVersions, progress: Progress) -> Path:
    def build(go: str, work: Path, out: Path) -> None:
        package = f"github.com/coredns/coredns@{versions.coredns}"
        go_install(go, [package], out, progress, "-s -w")

    return cached(f"coredns-{versions.coredns}", ("coredns",), build, progress)


def cni_plugins(versions: KindVersions, progress: Progress) -> Path:
    names = tuple(plugin.split("/")[1] for plugin in CNI_PLUGINS)

    def build(go: str, work: Path, out: Path) -> None:
        module = "github.com/containernetworking/plugins/plugins"
        packages = [f"{module}/{plugin}@{versions.cni_plugins}" for plugin in CNI_PLUGINS]
        go_install(go, packages, out, progress, "-s -w")

    return cached(f"cni-plugins-{versions.cni_plugins}", names, build, progress)


def local_path_provisioner(versions: KindVersions, progress: Progress) -> Path:
    """kind's default storage: rancher's local-path-provisioner, as kind's image builds it."""
    version = versions.local_path_provisioner

    def build(go: str, work: Path, out: Path) -> None:
        package = f"github.com/rancher/local-path-provisioner@{version}"
        go_install(go, [package], out, progress, f"-s -w -X main.VERSION={version}")

    names = ("local-path-provisioner",)
    return cached(f"local-path-provisioner-{version}", names, build, progress)


def kind_cli(versions: KindVersions, progress: Progress) -> Path:
    def build(go: str, work: Path, out: Path) -> None:
        go_install(go, [f"sigs.k8s.io/kind@{versions.kind}"], out, progress, "-s -w")

    return cached(f"kind-{versions.kind}", ("kind",), build, progress)


def pause(versions: KindVersions, progress: Progress) -> Path:
    """pause is C: built static from the pause.c of the pinned k8s.io/kubernetes module."""

    def build(go: str, work: Path, out: Path) -> None:
        source = module_dir(go, f"k8s.io/kubernetes@{versions.kubernetes}", progress)
        cc = shutil.which("gcc") or shutil.which("cc")
        if cc is None:
            raise ControlPlaneError("a C compiler (gcc) is needed to build the pause image")
        command = [
            cc, "-Os", "-Wall", "-Werror", "-static", f"-DVERSION=v{versions.pause}",
            "-o", str(out / "pause"), str(source / "build" / "pause" / "linux" / "pause.c"),
        ]  # fmt: skip
        progress(f"  {' '.join(command)}")
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise ControlPlaneError(f"building pause failed:\n{result.stderr[-2000:]}")

    return cached(f"pause-{versions.pause}", ("pause",), build, progress)


@dataclass(frozen=True)
class Components:
    """Where each built program is."""

    control_plane: Path
    node: Path
    etcd: Path
    coredns: Path
    cni: Path
    kind: Path
    pause: Path
    local_path_provisioner: Path


def ensure_components(versions: KindVersions, progress: Progress) -> Components:
    return Components(
        control_plane=ensure_binaries(progress),
        node=node_kubernetes(versions, progress),
        etcd=etcd(versions, progress),
        coredns=coredns(versions, progress),
        cni=cni_plugins(versions, progress),
        kind=kind_cli(versions, progress),
        pause=pause(versions, progress),
        local_path_provisioner=local_path_provisioner(versions, progress),
    )
