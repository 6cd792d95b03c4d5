"""Debian root filesystems made with mmdebstrap: the node's base, and a small one for images.

No base image can be pulled here, but Debian's package mirror answers, so the root filesystems
come from Debian packages. mmdebstrap takes minutes, so each tarball is cached under a name keyed
by the suite and the package list and made again only when one of them changes.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from e2e.kind.components import kind_cache
from lessor.controlplane.binaries import Progress, file_lock
from lessor.controlplane.errors import ControlPlaneError

# What kind's images/base installs, less what only rootless or remote storage needs, plus
# Debian's containerd and runc (kind builds its own; Debian's run pods on these machines).
NODE_PACKAGES = (
    "systemd", "systemd-sysv", "dbus", "conntrack", "iptables", "nftables", "iproute2",
    "ethtool", "util-linux", "mount", "kmod", "libseccomp2", "pigz", "bash", "ca-certificates",
    "curl", "jq", "procps", "containerd", "runc", "socat", "ebtables",
)  # fmt: skip
# The base of the images that need a userland: kube-proxy programs iptables and conntrack, and
# local-path-provisioner's helper pods run sh, mkdir and rm.
TOOLS_PACKAGES = ("iptables", "conntrack")
DPKG_EXCLUDES = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/locale/*")


def ensure_mmdebstrap(progress: Progress) -> str:
    found = shutil.which("mmdebstrap")
    if found:
        return found
    progress("installing mmdebstrap with apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    result = subprocess.run(
        ["apt-get", "install", "-y", "mmdebstrap"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    found = shutil.which("mmdebstrap")
    if result.returncode != 0 or found is None:
        raise ControlPlaneError(f"could not install mmdebstrap: {result.stderr.strip()[-500:]}")
    return found


def rootfs_path(name: str, suite: str, packages: tuple[str, ...]) -> Path:
    key = hashlib.sha256(" ".join([suite, *sorted(packages)]).encode()).hexdigest()[:12]
    return kind_cache() / "rootfs" / f"{name}-{suite}-{key}.tar"


def ensure_rootfs(name: str, suite: str, packages: tuple[str, ...], progress: Progress) -> Path:
    """A tarball of a minimal Debian `suite` with `packages`, made once."""
    target = rootfs_path(name, suite, packages)
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(target.parent / "rootfs.lock"):
        if target.is_file():
            return target
        mmdebstrap = ensure_mmdebstrap(progress)
        progress(f"making the {name} root filesystem with mmdebstrap ({suite}, minutes)")
        # mmdebstrap picks its output format from the name: keep ".tar" at the end.
        partial = target.with_name(f"{target.stem}.partial.tar")
        command = [
            mmdebstrap,
            "--variant=minbase",
            "--aptopt=APT::Install-Recommends false",
            *(f"--dpkgopt=path-exclude={pattern}" for pattern in DPKG_EXCLUDES),
            f"--include={','.join(packages)}",
            suite,
            str(partial),
        ]
        run_showing_steps(command, progress)
        partial.rename(target)
    return target


def run_showing_steps(command: list[str], progress: Progress) -> None:
    """Run mmdebstrap, passing on its step lines ("I: ...") so a long run shows progress."""
    with subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    ) as process:
        assert process.stderr is not None
        tail: list[str] = []
        for line in process.stderr:
            tail = [*tail[-20:], line.rstrip()]
            if line.startswith("I: "):
                progress(f"  mmdebstrap: {line[3:].strip()}")
    if process.returncode != 0:
        detail = "\n".join(tail)
        raise ControlPlaneError(f"mmdebstrap failed (exit {process.returncode}):\n{detail}")
