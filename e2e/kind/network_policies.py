"""A NetworkPolicy agent in kind, so that what lessor's policies allow and deny is enforced there.

The node's pod network is a static ptp configuration, which enforces nothing: without an agent,
every NetworkPolicy lessor ships or writes would be inert, and no test would notice. The agent
runs beside that network, on each node, as a DaemonSet: kube-router's firewall alone
(`--run-firewall`, no routing and no service proxy), the NetworkPolicy controller k3s embeds,
built from its Go module (`kubeRouter` in versions.json) on a Debian base with the iptables and
ipset it drives.

Why not kube-network-policies, the agent kind's own network uses: every release since v0.2
hands new connections to user space with nftables' `queue` statement, and these machines' kernel
is built without it (CONFIG_NFT_QUEUE is not set; nfnetlink_queue and the xtables NFQUEUE target
are there); v0.1.0's iptables path hooks only FORWARD, so a pod's connection to its own node (the
kubelet's port) would go unfiltered. kube-router filters a pod's traffic in INPUT, FORWARD and
OUTPUT, with ipsets and iptables the kernel has.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from e2e.kind.cluster import KindCluster
from e2e.kind.components import KindVersions
from e2e.kind.lessor_image import say
from e2e.kind.node_image import imported
from e2e.kind.rootfs import ensure_rootfs
from e2e.kind.sandboxes import build_image
from lessor.controlplane.binaries import Progress, build_once, cache_root, run_go, wrapper_module

Kubectl = Callable[..., subprocess.CompletedProcess[str]]

MODULE = "github.com/cloudnativelabs/kube-router/v2"
MISSING_GO = "the Go toolchain (go 1.25 or newer) is needed to build kube-router's image"
PACKAGES = ("iptables", "ipset")
NAME = "kube-router"
NAMESPACE = "kube-system"


def pinned_version() -> str:
    data: dict[str, str] = json.loads(
        resources.files("e2e.kind").joinpath("versions.json").read_text()
    )
    return data["kubeRouter"]


def image() -> str:
    return f"lessor-kube-router:{pinned_version()}"


def ensure_kube_router(progress: Progress = say) -> Path:
    """The directory holding `kube-router`, built into the cache on first use (minutes)."""
    version = pinned_version()
    target = cache_root() / "kube-router" / f"kube-router-{version}"

    def build(go: str, work: Path, out: Path) -> None:
        module = work / NAME
        wrapper_module(module, "lessor.dev/localcp/kuberouter", ["go 1.25"])
        run_go(go, ["get", f"{MODULE}/cmd/kube-router@{version}"], module, progress)
        ldflags = f"-s -w -X {MODULE}/pkg/version.Version={version}"
        command = ["build", "-trimpath", "-ldflags", ldflags, "-o", str(out / NAME),
                   f"{MODULE}/cmd/kube-router"]  # fmt: skip
        run_go(go, command, module, progress)

    return build_once(
        target,
        (target / NAME).is_file,
        build,
        what=f"kube-router {version}",
        missing_go=MISSING_GO,
        progress=progress,
    )


def build(progress: Progress = say) -> str:
    """`lessor-kube-router:<version>`: the binary on Debian with iptables and ipset."""
    rootfs = ensure_rootfs("netpol", KindVersions.pinned().debian, PACKAGES, progress)
    base = imported(rootfs, "lessor-netpol-base", progress)
    binary = (ensure_kube_router(progress) / NAME).read_bytes()
    dockerfile = f'COPY {NAME} /usr/local/bin/{NAME}\nENTRYPOINT ["/usr/local/bin/{NAME}"]\n'
    return build_image(image(), base, {NAME: binary}, dockerfile, progress)


def manifests(agent_image: str) -> list[dict[str, Any]]:
    """kube-router's firewall as a DaemonSet, with the read rights its controller needs."""
    labels = {"app.kubernetes.io/name": NAME}
    read = ["get", "list", "watch"]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": NAME, "namespace": NAMESPACE}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "lessor-e2e-kube-router"},
            "rules": [
                {"apiGroups": [""], "resources": ["namespaces", "pods", "services", "nodes",
                                                  "endpoints"], "verbs": read},
                {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
                 "verbs": read},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                 "verbs": read},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "lessor-e2e-kube-router"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "lessor-e2e-kube-router"},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
        },
        {
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": labels},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": NAME,
                        "hostNetwork": True,
                        "priorityClassName": "system-node-critical",
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [{
                            "name": NAME,
                            "image": agent_image,
                            "imagePullPolicy": "Never",
                            "args": ["--run-firewall=true", "--run-router=false",
                                     "--run-service-proxy=false", "--health-port=20244"],
                            "env": [{"name": "NODE_NAME",
                                     "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                            "securityContext": {"privileged": True},
                            "readinessProbe": {"httpGet": {"path": "/healthz", "port": 20244},
                                               "periodSeconds": 2},
                            "volumeMounts": [{"name": "xtables-lock",
                                              "mountPath": "/run/xtables.lock"}],
                        }],
                        "volumes": [{"name": "xtables-lock", "hostPath": {
                            "path": "/run/xtables.lock", "type": "FileOrCreate"}}],
                    },
                },
            },
        },
    ]  # fmt: skip


def install(kubectl: Kubectl, cluster: KindCluster, progress: Progress = say) -> None:
    """kube-router's firewall running on every node of `cluster`, enforcing NetworkPolicy."""
    agent_image = build(progress)
    cluster.load(agent_image)
    listed = json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests(agent_image)})
    kubectl("apply", "-f", "-", input=listed)
    kubectl("rollout", "status", f"daemonset/{NAME}", "-n", NAMESPACE, "--timeout=300s")
    progress(f"kube-router {pinned_version()} enforces NetworkPolicy in {cluster.name}")
