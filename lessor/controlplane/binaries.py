"""The local control plane's binaries, built once from pinned Go modules into a cache outside the
repository.

Most tests want a real cluster in seconds, not a kind node in a minute: building the real
components from their Go modules gives them the real Kubernetes API server, controllers and
scheduler on loopback, and kwok for fake nodes (kind, built from the same Go build, is for the
e2e suite's installed path: e2e/kind). No registry is reachable from the machines this project is
developed and tested on, so nothing is downloaded prebuilt. The build takes minutes, so its output
is kept in a cache directory keyed by the pinned versions and reused.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from lessor.controlplane.errors import ControlPlaneError

Progress = Callable[[str], None]

KUBERNETES_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
ALL_BINARIES = (*KUBERNETES_COMMANDS, "etcd", "kwok")


@dataclass(frozen=True)
class Versions:
    kubernetes: str
    etcd: str
    kwok: str

    @classmethod
    def pinned(cls) -> Versions:
        text = resources.files("lessor.controlplane").joinpath("versions.json").read_text()
        data = json.loads(text)
        return cls(kubernetes=data["kubernetes"], etcd=data["etcd"], kwok=data["kwok"])

    @property
    def cache_key(self) -> str:
        return f"kubernetes-{self.kubernetes}_etcd-{self.etcd}_kwok-{self.kwok}"


def cache_root() -> Path:
    """Where expensive build output lives: never inside the repository, so clean clones reuse it."""
    explicit = os.environ.get("LESSOR_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "lessor"


def binary_dir(versions: Versions | None = None) -> Path:
    return cache_root() / "bin" / (versions or Versions.pinned()).cache_key


def find_binaries(versions: Versions | None = None) -> Path | None:
    """The cached binary directory if every binary is present, else None."""
    directory = binary_dir(versions)
    if all((directory / name).is_file() for name in ALL_BINARIES):
        return directory
    return None


def ensure_binaries(progress: Progress = print) -> Path:
    """Return the directory holding every binary, building what is missing."""
    versions = Versions.pinned()

    def build(go: str, work: Path, out: Path) -> None:
        build_kubernetes(go, versions.kubernetes, work / "kubernetes", out, progress)
        build_etcd(go, versions.etcd, work / "etcd", out, progress)
        _build_kwok(go, versions, work / "kwok", out, progress)

    return build_once(
        binary_dir(versions),
        lambda: find_binaries(versions) is not None,
        build,
        what=f"the local control plane ({versions.cache_key})",
        missing_go=(
            "the Go toolchain (go 1.25 or newer) is needed to build the local control plane "
            "but `go` is not on PATH; install Go, or set LESSOR_TEST_KUBECONFIG to the "
            "kubeconfig of an existing cluster (kind or any other) to use that instead"
        ),
        progress=progress,
    )


def build_once(
    target: Path,
    complete: Callable[[], bool],
    build: Callable[[str, Path, Path], None],
    *,
    what: str,
    missing_go: str,
    progress: Progress,
) -> Path:
    """Build `target` in the cache unless `complete()` says it is there already.

    A file lock serialises concurrent callers (parallel test sessions, CI and a developer shell),
    and `build(go, scratch, out)` fills `out` in a temporary directory that is renamed into place,
    so a crash never leaves a half-built cache that looks complete.
    """
    if complete():
        return target
    go = shutil.which("go")
    if go is None:
        raise ControlPlaneError(missing_go)
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with file_lock(root / "build.lock"):
        if complete():
            return target
        started = time.monotonic()
        progress(f"building {what} into {target}")
        with tempfile.TemporaryDirectory(prefix="build-", dir=root) as scratch:
            work = Path(scratch)
            out = work / "out"
            out.mkdir()
            build(go, work, out)
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists():
                shutil.rmtree(target)
            out.rename(target)
        progress(f"built {what} in {time.monotonic() - started:.0f}s")
    return target


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_go(
    go: str, args: list[str], cwd: Path, progress: Progress, env: dict[str, str] | None = None
) -> str:
    env = {**os.environ, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0", **(env or {})}
    progress(f"  go {' '.join(args[:3])}{' ...' if len(args) > 3 else ''}")
    result = subprocess.run(
        [go, *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise ControlPlaneError(
            f"`go {' '.join(args)}` failed in {cwd}:\n{result.stderr.strip()[-4000:]}"
        )
    return result.stdout


def _module_info(go: str, module: str, cwd: Path, progress: Progress) -> dict[str, str]:
    info: dict[str, str] = json.loads(
        run_go(go, ["mod", "download", "-json", module], cwd, progress)
    )
    return info


def wrapper_module(directory: Path, name: str, go_mod_lines: list[str]) -> None:
    """A throwaway module that pins the component's version.

    Kubernetes and etcd cannot be built with `go install pkg@version`: their go.mod files carry
    replace directives (staging modules, sibling directories), which `go install` refuses. A module
    of our own that requires them, with those replaces pointed at the published versions, builds
    the same sources.
    """
    directory.mkdir(parents=True)
    (directory / "go.mod").write_text("\n".join([f"module {name}", *go_mod_lines, ""]))


def build_kubernetes(
    go: str,
    version: str,
    work: Path,
    out: Path,
    progress: Progress,
    *,
    commands: tuple[str, ...] = KUBERNETES_COMMANDS,
) -> None:
    """Build `commands` of k8s.io/kubernetes at `version` into `out` (kind's node reuses this)."""
    work.mkdir(parents=True)
    info = _module_info(go, f"k8s.io/kubernetes@{version}", work, progress)
    upstream = Path(info["GoMod"]).read_text()
    staging = re.findall(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/", upstream, re.MULTILINE)
    if not staging:
        raise ControlPlaneError(f"no staging replaces found in k8s.io/kubernetes@{version} go.mod")
    minor_version = "v0." + version.removeprefix("v1.")
    go_line = re.search(r"^go\s+\S+", upstream, re.MULTILINE)
    godebug = re.findall(r"^godebug\s+.+$", upstream, re.MULTILINE)
    lines = [
        go_line.group(0) if go_line else "go 1.25.0",
        *godebug,
        f"require k8s.io/kubernetes {version}",
        *(f"replace {module} => {module} {minor_version}" for module in staging),
    ]
    module_dir = work / "module"
    wrapper_module(module_dir, "lessor.dev/localcp/kubernetes", lines)
    packages = [f"k8s.io/kubernetes/cmd/{name}" for name in commands]
    run_go(go, ["get", *(f"{p}@{version}" for p in packages)], module_dir, progress)
    major, minor = version.removeprefix("v").split(".")[:2]
    stamp = {
        "gitVersion": version,
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
    }
    ldflags = ["-s", "-w"]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        ldflags += [f"-X {package}.{key}={value}" for key, value in stamp.items()]
    build = ["build", "-trimpath", "-ldflags", " ".join(ldflags), "-o", f"{out}/", *packages]
    run_go(go, build, module_dir, progress)


def build_etcd(go: str, version: str, work: Path, out: Path, progress: Progress) -> None:
    """Build etcd `version` into `out` (kind's node image reuses this for its own pin)."""
    lines = ["go 1.24", f"require go.etcd.io/etcd/server/v3 {version}"]
    wrapper_module(work, "lessor.dev/localcp/etcd", lines)
    run_go(go, ["get", f"go.etcd.io/etcd/server/v3@{version}"], work, progress)
    for sibling in ("api/v3", "client/pkg/v3", "client/v3", "pkg/v3"):
        run_go(go, ["get", f"go.etcd.io/etcd/{sibling}@{version}"], work, progress)
    build = [
        "build",
        "-trimpath",
        "-ldflags",
        "-s -w",
        "-o",
        str(out / "etcd"),
        "go.etcd.io/etcd/server/v3",
    ]
    run_go(go, build, work, progress)


def _build_kwok(go: str, versions: Versions, work: Path, out: Path, progress: Progress) -> None:
    version = versions.kwok
    wrapper_module(
        work, "lessor.dev/localcp/kwok", ["go 1.24", f"require sigs.k8s.io/kwok {version}"]
    )
    run_go(go, ["get", f"sigs.k8s.io/kwok/cmd/kwok@{version}"], work, progress)
    ldflags = f"-s -w -X sigs.k8s.io/kwok/pkg/consts.Version={version.removeprefix('v')}"
    build = [
        "build",
        "-trimpath",
        "-ldflags",
        ldflags,
        "-o",
        str(out / "kwok"),
        "sigs.k8s.io/kwok/cmd/kwok",
    ]
    run_go(go, build, work, progress)
