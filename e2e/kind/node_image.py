"""A kind node image built offline: `python -m e2e.kind.node_image build|up|down`.

kind's published node image cannot be pulled here, and as shipped it would not run either: its runc
needs CAP_SYS_RESOURCE, which these machines lack. This builds the image the way kind's
images/base and pkg/build/nodeimage do, from their files in the pinned kind module, on a Debian
root filesystem, with every Kubernetes image the node needs loaded into its containerd. The
result is tagged `lessor-kind-node:<kubernetes version>` and labelled with a key of every pin and
recipe file, so it is rebuilt only when one of them changes.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from e2e.kind import oci
from e2e.kind.components import (
    Components,
    KindVersions,
    ensure_components,
    kind_cache,
    module_dir,
    require_go,
)
from e2e.kind.docker_setup import ensure_docker, exit_code
from e2e.kind.rootfs import NODE_PACKAGES, TOOLS_PACKAGES, ensure_rootfs
from lessor.controlplane.binaries import Progress, file_lock
from lessor.controlplane.errors import ControlPlaneError

HERE = Path(__file__).parent
RECIPE_FILES = ("node_image.py", "oci.py", "rootfs.py", "components.py", "runc-wrapper")
KEY_LABEL = "dev.lessor.kind-node-key"
NODE_RUNC = "/usr/local/sbin/lessor-runc"
POD_SUBNET = "10.244.0.0/16"
REGISTRY_TABLE = '[plugins."io.containerd.grpc.v1.cri".registry]'
CERTS_D = "/etc/containerd/certs.d"
STARTED = time.monotonic()


def say(message: str) -> None:
    print(f"[{time.monotonic() - STARTED:6.1f}s] {message}", flush=True)


def node_tag(versions: KindVersions) -> str:
    return f"lessor-kind-node:{versions.kubernetes}"


def node_key(versions: KindVersions) -> str:
    """Every pin and every file of the recipe: a change to any of them makes a new image."""
    digest = hashlib.sha256(json.dumps(asdict(versions), sort_keys=True).encode())
    for name in RECIPE_FILES:
        digest.update((HERE / name).read_bytes())
    digest.update(" ".join(NODE_PACKAGES + TOOLS_PACKAGES).encode())
    return digest.hexdigest()[:16]


def docker(*args: str, stdin: bytes | None = None) -> str:
    """Run a docker command; a failure raises with docker's own last line."""
    result = subprocess.run(["docker", *args], input=stdin, capture_output=True, check=False)
    if result.returncode != 0:
        last = (result.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        raise ControlPlaneError(f"`docker {' '.join(args[:3])} ...` failed: {last}")
    return result.stdout.decode(errors="replace")


def image_key(tag: str) -> str | None:
    result = subprocess.run(
        [
            "docker",
            "image",
            "inspect",
            "--format",
            f'{{{{index .Config.Labels "{KEY_LABEL}"}}}}',
            tag,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    return result.stdout.strip() if result.returncode == 0 else None


def image_id(tag: str) -> str | None:
    result = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", tag],
        capture_output=True,
        text=True,
        check=False,
    )
    return result.stdout.strip() if result.returncode == 0 else None


def kubeadm_images(components: Components, versions: KindVersions) -> dict[str, str]:
    """The images kubeadm of this version asks for, by component name (the repository's last
    part), checked against the pins so the node holds exactly what kubeadm will run."""
    listing = subprocess.run(
        [
            str(components.node / "kubeadm"),
            "config",
            "images",
            "list",
            "--kubernetes-version",
            versions.kubernetes,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    images = {image.rsplit(":", 1)[0].rsplit("/", 1)[1]: image for image in listing}
    wanted = {"etcd": versions.etcd, "coredns": versions.coredns, "pause": versions.pause}
    for name, pin in wanted.items():
        # etcd's tags carry a build suffix ("3.6.6-0"); the others are the bare version.
        tag = images[name].rsplit(":", 1)[1].removeprefix("v").split("-")[0]
        if tag != pin.removeprefix("v"):
            raise ControlPlaneError(
                f"kubeadm {versions.kubernetes} wants {images[name]} but e2e/kind/versions.json "
                f"pins {name} {pin}: change the pin"
            )
    return images


def component_images(
    components: Components, versions: KindVersions, kind_dir: Path, work: Path, progress: Progress
) -> list[Path]:
    """One OCI archive per image kubeadm runs, each holding the binary built here."""
    images = kubeadm_images(components, versions)
    tools = ensure_rootfs("tools", versions.debian, TOOLS_PACKAGES, progress)
    control_plane = {
        "kube-apiserver": components.control_plane,
        "kube-controller-manager": components.control_plane,
        "kube-scheduler": components.control_plane,
        "kube-proxy": components.node,
        "etcd": components.etcd,
    }
    recipes: list[oci.Image] = []
    for name, directory in control_plane.items():
        path = f"/usr/local/bin/{name}"
        layer = oci.binary_layer(work / f"{name}.layer.tar", {path: directory / name})
        layers = (tools, layer) if name == "kube-proxy" else (layer,)
        recipes.append(oci.Image(images[name], layers, entrypoint=(path,)))
    coredns = oci.binary_layer(
        work / "coredns.layer.tar", {"/coredns": components.coredns / "coredns"}
    )
    recipes.append(oci.Image(images["coredns"], (coredns,), entrypoint=("/coredns",)))
    pause = oci.binary_layer(work / "pause.layer.tar", {"/pause": components.pause / "pause"})
    recipes.append(oci.Image(images["pause"], (pause,), entrypoint=("/pause",), user="65535:65535"))
    recipes += storage_images(components, kind_dir, tools, work)
    archives = []
    for recipe in recipes:
        progress(f"  image {recipe.name}")
        file_name = recipe.name.replace("/", "_").replace(":", "_") + ".oci.tar"
        archives.append(oci.write_archive(recipe, work / file_name))
    return archives


def go_string_constants(source: str) -> dict[str, str]:
    """The string constants of a Go file: plain ones and raw ones joined with `+`.

    kind keeps its storage manifest and image names as Go constants; reading them from the pinned
    module keeps the node in step with the kind that will install them.
    """
    constants = dict(re.findall(r'^const (\w+) = "([^"]*)"$', source, re.MULTILINE))
    for match in re.finditer(r"^const (\w+) = `", source, re.MULTILINE):
        parts, position = [], match.end() - 1
        while True:
            if source[position] == "`":
                end = source.index("`", position + 1)
                parts.append(source[position + 1 : end])
                position = end + 1
            else:
                name = re.match(r"\w+", source[position:])
                if name is None:
                    break
                parts.append(constants[name.group(0)])
                position += name.end()
            joined = re.match(r"\s*\+\s*", source[position:])
            if joined is None:
                break
            position += joined.end()
        constants[match.group(1)] = "".join(parts)
    return constants


def storage_manifest(kind_dir: Path) -> tuple[str, dict[str, str]]:
    """kind's default storage manifest and its two images (provisioner, helper)."""
    constants = go_string_constants((kind_dir / "pkg/build/nodeimage/const_storage.go").read_text())
    images = {
        "provisioner": constants["storageProvisionerImage"],
        "helper": constants["storageHelperImage"],
    }
    return constants["defaultStorageManifest"], images


def storage_images(
    components: Components, kind_dir: Path, tools: Path, work: Path
) -> list[oci.Image]:
    """local-path-provisioner FROM scratch; its helper (sh, mkdir, rm) on the tools base."""
    _, images = storage_manifest(kind_dir)
    path = "/usr/local/bin/local-path-provisioner"
    source = components.local_path_provisioner / "local-path-provisioner"
    layer = oci.binary_layer(work / "local-path-provisioner.layer.tar", {path: source})
    return [
        oci.Image(images["provisioner"], (layer,), entrypoint=(path,)),
        oci.Image(images["helper"], (tools,)),
    ]


def containerd_config(kind_dir: Path, pause_image: str) -> str:
    """kind's containerd config, changed the three ways these machines need, and told where
    registry hosts are configured."""
    text = (kind_dir / "images/base/files/etc/containerd/config.toml").read_text()
    changes = {
        # Without CAP_SYS_RESOURCE no process may lower its oom_score_adj.
        "restrict_oom_score_adj = false": "restrict_oom_score_adj = true",
        # The pause image is the one built here, at the version kubeadm wants.
        'sandbox_image = "registry.k8s.io/pause:3.10"': f'sandbox_image = "{pause_image}"',
        # Privileged pods need runc without CAP_SYS_RESOURCE, like the node itself.
        "SystemdCgroup = true": f'SystemdCgroup = true\n    BinaryName = "{NODE_RUNC}"',
    }
    for old, new in changes.items():
        if old not in text:
            raise ControlPlaneError(f"kind's containerd config no longer has `{old}`")
        text = text.replace(old, new)
    # Registry hosts from /etc/containerd/certs.d/<host:port>/hosts.toml, read on each pull: how
    # a node trusts a registry's CA without a restart (e2e/kind/registry.py). kind's config has
    # no such table (kind users add it with containerdConfigPatches); without it Debian's
    # containerd 1.6 reads no hosts.toml at all.
    if REGISTRY_TABLE in text:
        raise ControlPlaneError(f"kind's containerd config has `{REGISTRY_TABLE}` now")
    return f"{text.rstrip()}\n\n{REGISTRY_TABLE}\n  config_path = {json.dumps(CERTS_D)}\n"


def cni_config() -> str:
    """ptp + host-local + portmap, as kindnet configures them: routed veths, so service traffic
    between pods of the node passes the node's iptables (a bridge would need br_netfilter)."""
    ptp = {
        "type": "ptp",
        "ipMasq": True,
        "ipam": {
            "type": "host-local",
            "dataDir": "/run/cni-ipam-state",
            "routes": [{"dst": "0.0.0.0/0"}],
            "ranges": [[{"subnet": POD_SUBNET}]],
        },
        "mtu": 1500,
    }
    portmap = {"type": "portmap", "capabilities": {"portMappings": True}}
    config = {"cniVersion": "0.3.1", "name": "lessor-ptp", "plugins": [ptp, portmap]}
    return json.dumps(config, indent=2) + "\n"


CNI_MANIFEST = """\
# The node's CNI is configured in the image (/etc/cni/net.d/10-lessor-ptp.conflist): a single
# node needs no daemon, so kind's kindnetd (which no registry here serves) is not installed.
apiVersion: v1
kind: ConfigMap
metadata:
  name: lessor-node-cni
  namespace: kube-system
data:
  conflist: /etc/cni/net.d/10-lessor-ptp.conflist
"""


class Overlay:
    """A tarball of files to lay over the base root filesystem, with explicit modes."""

    def __init__(self) -> None:
        self.buffer = io.BytesIO()
        self.archive = tarfile.open(fileobj=self.buffer, mode="w")  # noqa: SIM115
        self.directories: set[str] = set()

    def _parents(self, path: str) -> None:
        parts = path.strip("/").split("/")
        for depth in range(1, len(parts)):
            directory = "/".join(parts[:depth])
            if directory not in self.directories:
                info = tarfile.TarInfo(directory)
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                self.archive.addfile(info)
                self.directories.add(directory)

    def data(self, path: str, content: bytes, mode: int = 0o644) -> None:
        self._parents(path)
        info = tarfile.TarInfo(path.strip("/"))
        info.size, info.mode = len(content), mode
        self.archive.addfile(info, io.BytesIO(content))

    def file(self, path: str, source: Path, mode: int = 0o755) -> None:
        self.data(path, source.read_bytes(), mode)

    def symlink(self, path: str, target: str) -> None:
        self._parents(path)
        info = tarfile.TarInfo(path.strip("/"))
        info.type, info.linkname = tarfile.SYMTYPE, target
        self.archive.addfile(info)

    def tar(self) -> bytes:
        self.archive.close()
        return self.buffer.getvalue()


def kind_base_files(overlay: Overlay, kind_dir: Path) -> None:
    """kind's images/base/files, with the modes its Dockerfile gives them."""
    root = kind_dir / "images/base/files"
    for source in sorted(root.rglob("*")):
        if source.is_dir():
            continue
        relative = source.relative_to(root).as_posix()
        executable = relative.startswith(("usr/local/bin/", "kind/bin/"))
        overlay.data(relative, source.read_bytes(), 0o755 if executable else 0o644)


def node_overlay(
    components: Components, versions: KindVersions, kind_dir: Path, pause_image: str
) -> bytes:
    overlay = Overlay()
    kind_base_files(overlay, kind_dir)
    for name in ("kubelet", "kubeadm"):
        overlay.file(f"/usr/bin/{name}", components.node / name)
    overlay.file("/usr/bin/kubectl", components.control_plane / "kubectl")
    for plugin in sorted(components.cni.iterdir()):
        overlay.file(f"/opt/cni/bin/{plugin.name}", plugin)
    overlay.file(NODE_RUNC, HERE / "runc-wrapper")
    overlay.symlink("/usr/local/bin/containerd", "/usr/bin/containerd")
    overlay.data("/etc/containerd/config.toml", containerd_config(kind_dir, pause_image).encode())
    overlay.data("/etc/cni/net.d/10-lessor-ptp.conflist", cni_config().encode())
    kubelet_defaults = (kind_dir / "images/base/files/etc/default/kubelet").read_text().strip()
    # Kubernetes 1.35's kubelet refuses cgroup v1 unless told otherwise; these hosts are v1.
    overlay.data("/etc/default/kubelet", f"{kubelet_defaults} --fail-cgroupv1=false\n".encode())
    overlay.data("/kind/version", versions.kubernetes.encode())
    overlay.data("/kind/manifests/default-cni.yaml", CNI_MANIFEST.encode())
    manifest, _ = storage_manifest(kind_dir)
    overlay.data("/kind/manifests/default-storage.yaml", manifest.encode())
    return overlay.tar()


# The RUN steps of kind's images/base Dockerfile, on Debian's containerd.
SETUP_SCRIPT = """
set -eu
find /lib/systemd/system/sysinit.target.wants/ -name systemd-tmpfiles-setup.service -delete
rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \
  /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \
  /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/*
echo ReadKMsg=no >> /etc/systemd/journald.conf
systemctl enable kubelet.service containerd.service undo-mount-hacks.service
systemctl mask systemd-binfmt.service
mkdir -p /etc/kubernetes/manifests
hook='{"path": "/kind/bin/mount-product-files.sh"}'
ctr oci spec \
  | jq ".hooks.createContainer[.hooks.createContainer|length] |= . + $hook" \
  | jq 'del(.process.rlimits)' > /etc/containerd/cri-base.json
nohup containerd > /var/log/containerd-build.log 2>&1 &
for i in $(seq 1 30); do ctr version > /dev/null 2>&1 && exit 0; sleep 1; done
echo "containerd did not start: $(tail -n 3 /var/log/containerd-build.log)" >&2
exit 1
"""

# containerd's child exits as a zombie (sleep is PID 1 and reaps nothing): wait for live ones only.
STOP_CONTAINERD = """
pkill containerd
while pgrep -r R,S,D containerd > /dev/null; do sleep 1; done
rm -f /var/log/containerd-build.log
"""

IMPORT = [
    "ctr", "--namespace=k8s.io", "images", "import", "--label=io.cri-containerd.pinned=pinned",
    "--all-platforms", "--no-unpack", "--digests", "-",
]  # fmt: skip


def imported(rootfs: Path, repository: str, progress: Progress) -> str:
    """A root filesystem tarball as a docker image `repository:<its key>`, imported once."""
    tag = f"{repository}:{rootfs.stem.rsplit('-', 1)[1]}"
    if subprocess.run(
        ["docker", "image", "inspect", tag], capture_output=True, check=False
    ).returncode:
        progress(f"importing {rootfs.name} as {tag}")
        docker("import", str(rootfs), tag)
    return tag


def base_image(versions: KindVersions, progress: Progress) -> str:
    """The node's Debian root filesystem as a docker image."""
    rootfs = ensure_rootfs("node", versions.debian, NODE_PACKAGES, progress)
    return imported(rootfs, "lessor-kind-base", progress)


def assemble(
    base: str, overlay: bytes, archives: list[Path], *, tag: str, key: str, progress: Progress
) -> None:
    """Lay the files over the base in a container, load the images, commit it as the node.

    As kind's node image builder does: the images go into containerd's content store without
    unpacking (no snapshots on docker's overlay filesystem), and the container is committed.
    """
    name = f"lessor-kind-build-{key}"
    subprocess.run(["docker", "rm", "-f", "-v", name], capture_output=True, check=False)
    docker("run", "-d", "--privileged", "--name", name, "--tmpfs", "/run", "--tmpfs", "/tmp",  # noqa: S108 - the node's /tmp
           "--entrypoint", "sleep", base, "infinity")  # fmt: skip
    try:
        progress("laying kind's base files, kubelet, kubeadm, CNI plugins and configs over it")
        docker("cp", "-", f"{name}:/", stdin=overlay)
        docker("exec", "-i", name, "bash", "-s", stdin=SETUP_SCRIPT.encode())
        for archive in archives:
            progress(f"  loading {archive.name} into the node's containerd")
            docker("exec", "-i", name, *IMPORT, stdin=archive.read_bytes())
        docker(
            "exec",
            name,
            "bash",
            "-c",
            STOP_CONTAINERD,
        )
        progress(f"committing {tag}")
        stage = f"lessor-kind-node-stage:{key}"
        docker(
            "commit",
            "--change", 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]',
            "--change", "CMD []",
            "--change", "ENV container=docker",
            name, stage,
        )  # fmt: skip
        finish(stage, tag, key)
    finally:
        subprocess.run(["docker", "rm", "-f", "-v", name], capture_output=True, check=False)


def finish(stage: str, tag: str, key: str) -> None:
    """Set what `docker commit` of Debian's docker 20.10 cannot: the stop signal systemd wants.

    The legacy builder reads the Dockerfile from stdin and needs no context and no registry.
    """
    previous = image_id(tag)
    dockerfile = f"FROM {stage}\nSTOPSIGNAL SIGRTMIN+3\nLABEL {KEY_LABEL}={key}\n"
    result = subprocess.run(
        ["docker", "build", "-q", "-t", tag, "-"],
        input=dockerfile.encode(),
        env={**os.environ, "DOCKER_BUILDKIT": "0"},
        capture_output=True,
        check=False,
    )
    if result.returncode != 0:
        raise ControlPlaneError(f"`docker build` of {tag} failed: {result.stderr.decode()[-500:]}")
    docker("rmi", stage)
    if previous and previous != image_id(tag):
        # The image this one replaces; docker keeps it while a kind node still runs from it.
        subprocess.run(["docker", "rmi", previous], capture_output=True, check=False)


def build(progress: Progress = say) -> str:
    """The node image's tag, building whatever part of it is missing or out of date."""
    versions = KindVersions.pinned()
    ensure_docker(progress)
    tag = node_tag(versions)
    key = node_key(versions)
    if image_key(tag) == key:
        progress(f"{tag} is up to date (key {key})")
        return tag
    components = ensure_components(versions, progress)
    kind_dir = module_dir(require_go(), f"sigs.k8s.io/kind@{versions.kind}", progress)
    base = base_image(versions, progress)
    started = time.monotonic()
    with (
        file_lock(kind_cache() / "node.lock"),
        tempfile.TemporaryDirectory(prefix="node-", dir=kind_cache()) as scratch,
    ):
        progress(f"building {tag} (key {key})")
        archives = component_images(components, versions, kind_dir, Path(scratch), progress)
        pause_image = kubeadm_images(components, versions)["pause"]
        overlay = node_overlay(components, versions, kind_dir, pause_image)
        assemble(base, overlay, archives, tag=tag, key=key, progress=progress)
    progress(f"built {tag} in {time.monotonic() - started:.0f}s")
    return tag


def main(argv: list[str]) -> int:
    if (argv[0] if argv else "build") != "build":
        print("usage: python -m e2e.kind.node_image build", file=sys.stderr)
        return 2
    return exit_code("kind node image", build)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
