"""A kind cluster of the node image built here: `python -m e2e.kind.cluster up|down`.

`up` builds (or reuses) the node image and the kind CLI, creates the cluster unless it runs
already, and proves it works: the node Ready, CoreDNS available, and a pod resolving the API
server's Service name through CoreDNS. When creation fails, kind's logs are saved under the cache
so the failure can be read after the node is gone.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from e2e.kind.components import KindVersions, ensure_components, kind_cache, kind_cli
from e2e.kind.docker_setup import exit_code
from e2e.kind.node_image import build, kubeadm_images, say
from lessor.controlplane.binaries import Progress
from lessor.controlplane.errors import ControlPlaneError
from lessor.controlplane.kubectl import run_kubectl

DEFAULT_NAME = "lessor-e2e"
READY_TIMEOUT = "180s"
PROBE_POD = "lessor-dns-probe"


@dataclass(frozen=True)
class KindCluster:
    """A running kind cluster and the tools to reach it."""

    name: str
    kind: Path
    kubectl: Path
    kubeconfig: Path

    def load(self, image: str) -> None:
        """A docker image of this machine into the node's containerd (no registry to pull from)."""
        subprocess.run(
            [str(self.kind), "load", "docker-image", image, "--name", self.name],
            capture_output=True, check=True,
        )  # fmt: skip

    def kubectl_run(self, *args: str, stdin: str | None = None) -> str:
        command = [str(self.kubectl), "--kubeconfig", str(self.kubeconfig), *args]
        result = subprocess.run(command, input=stdin, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise ControlPlaneError(f"`kubectl {' '.join(args)}` failed: {result.stderr.strip()}")
        return result.stdout

    def run(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """kubectl against this cluster in the shape the scenarios' helpers take (the
        CompletedProcess, `check` to raise on failure)."""
        return run_kubectl(
            str(self.kubectl), self.kubeconfig, *args, input=input, check=check, timeout=timeout
        )


def kubeconfig_path(name: str) -> Path:
    """The cluster's own kubeconfig, so `up` never edits the user's ~/.kube/config."""
    return kind_cache() / "clusters" / f"{name}.kubeconfig"


def listed(kind: Path) -> list[str]:
    return subprocess.run(
        [str(kind), "get", "clusters"], capture_output=True, text=True, check=True
    ).stdout.split()


def exists(kind: Path, name: str) -> bool:
    return name in listed(kind)


def names(progress: Progress = say) -> list[str]:
    """The kind clusters on this machine (kind built first if need be)."""
    return listed(kind_cli(KindVersions.pinned(), progress) / "kind")


def save_logs(kind: Path, name: str, output: str, progress: Progress) -> Path:
    """What kind said and its logs of the node (journal, containerd, kubelet), in the cache."""
    directory = kind_cache() / "logs" / f"{name}-{time.strftime('%Y%m%dT%H%M%S')}"
    directory.mkdir(parents=True)
    (directory / "kind-create.log").write_text(output)
    exported = subprocess.run(
        [str(kind), "export", "logs", str(directory / "nodes"), "--name", name],
        capture_output=True,
        text=True,
        check=False,
    )
    if exported.returncode != 0:
        (directory / "kind-export-logs.log").write_text(exported.stdout + exported.stderr)
    progress(f"kind's logs saved in {directory}")
    return directory


def failure_line(output: str) -> str:
    """kind's own error line (it prints `ERROR: ...`), else its last line."""
    lines = output.strip().splitlines() or ["no output"]
    errors = [line for line in lines if line.startswith("ERROR:")]
    return (errors or lines)[-1].removeprefix("ERROR: ")


def create(kind: Path, name: str, image: str, kubeconfig: Path, progress: Progress) -> None:
    """`kind create cluster`, keeping the node on failure long enough to save its logs."""
    kubeconfig.parent.mkdir(parents=True, exist_ok=True)
    progress(f"creating kind cluster {name} from {image}")
    result = subprocess.run(
        [str(kind), "create", "cluster", "--name", name, "--image", image,
         "--kubeconfig", str(kubeconfig), "--retain", "--wait", READY_TIMEOUT],
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    if result.returncode != 0:
        logs = save_logs(kind, name, result.stdout + result.stderr, progress)
        subprocess.run(
            [str(kind), "delete", "cluster", "--name", name], capture_output=True, check=False
        )
        raise ControlPlaneError(
            f"kind could not create {name}: {failure_line(result.stderr)} (logs: {logs})"
        )


def prove(cluster: KindCluster, probe_image: str, progress: Progress) -> None:
    """Node Ready, CoreDNS available, and a pod that resolves a Service name through it."""
    cluster.kubectl_run(
        "wait", "--for=condition=Ready", "node", "--all", f"--timeout={READY_TIMEOUT}"
    )
    cluster.kubectl_run(
        "-n", "kube-system", "wait", "--for=condition=Available", "deployment/coredns",
        f"--timeout={READY_TIMEOUT}",
    )  # fmt: skip
    progress("node Ready, CoreDNS available; running a pod that resolves a Service name")
    cluster.kubectl_run("delete", "pod", PROBE_POD, "--ignore-not-found", "--wait")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": PROBE_POD},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "probe",
                    "image": probe_image,
                    "imagePullPolicy": "Never",
                    "command": ["getent", "hosts", "kubernetes.default.svc.cluster.local"],
                }
            ],
        },
    }
    cluster.kubectl_run("apply", "-f", "-", stdin=json.dumps(pod))
    cluster.kubectl_run(
        "wait", "--for=jsonpath={.status.phase}=Succeeded", f"pod/{PROBE_POD}",
        f"--timeout={READY_TIMEOUT}",
    )  # fmt: skip
    answer = cluster.kubectl_run("logs", PROBE_POD).strip()
    cluster.kubectl_run("delete", "pod", PROBE_POD, "--wait=false")
    progress(f"the pod resolved it: {answer}")


def up(name: str = DEFAULT_NAME, progress: Progress = say) -> KindCluster:
    """A working kind cluster `name`, created unless it is there already."""
    image = build(progress)
    versions = KindVersions.pinned()
    components = ensure_components(versions, progress)
    kind = components.kind / "kind"
    cluster = KindCluster(name, kind, components.control_plane / "kubectl", kubeconfig_path(name))
    if exists(kind, name):
        progress(f"kind cluster {name} exists; checking it")
        subprocess.run(
            [str(kind), "export", "kubeconfig", "--name", name,
             "--kubeconfig", str(cluster.kubeconfig)],
            capture_output=True,
            check=True,
        )  # fmt: skip
    else:
        create(kind, name, image, cluster.kubeconfig, progress)
    # The kube-proxy image is the one image of the node with a shell's tools (Debian's getent).
    probe_image = kubeadm_images(components, versions)["kube-proxy"]
    prove(cluster, probe_image, progress)
    progress(f"kind cluster {name} is up; kubeconfig: {cluster.kubeconfig}")
    return cluster


FREEZER = Path("/sys/fs/cgroup/freezer/docker")


def thaw(container_ids: list[str]) -> list[Path]:
    """Thaw the cgroups the node's runc left FROZEN: runc's systemd driver freezes a container
    while it starts it, and a node killed just then (a cluster deleted while pods start) leaves
    its `runc init` frozen in D state, which no signal ends, so docker cannot remove the node."""
    thawed = []
    for container in container_ids:
        for state in (FREEZER / container).rglob("freezer.state"):
            if state.read_text().strip() != "THAWED":
                state.write_text("THAWED")
                thawed.append(state.parent)
    return thawed


def node_containers(name: str) -> list[str]:
    listed = subprocess.run(
        ["docker", "ps", "-a", "-q", "--no-trunc",
         "--filter", f"label=io.x-k8s.kind.cluster={name}"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return listed.stdout.split()


def down(name: str = DEFAULT_NAME, progress: Progress = say) -> None:
    kind = kind_cli(KindVersions.pinned(), progress) / "kind"
    containers = node_containers(name)
    for attempt in range(3):
        deleted = subprocess.run(
            [str(kind), "delete", "cluster", "--name", name],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if deleted.returncode == 0:
            kubeconfig_path(name).unlink(missing_ok=True)
            return
        progress(f"kind could not delete {name}: {failure_line(deleted.stderr)}")
        progress(f"thawed {[str(p) for p in thaw(containers)]}; trying again ({attempt + 1}/3)")
    raise ControlPlaneError(f"kind could not delete {name}: {failure_line(deleted.stderr)}")


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "up"
    name = argv[1] if len(argv) > 1 else DEFAULT_NAME
    actions = {"up": up, "down": down}
    if command not in actions:
        print("usage: python -m e2e.kind.cluster up|down [name]", file=sys.stderr)
        return 2
    return exit_code("kind cluster", lambda: actions[command](name))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
