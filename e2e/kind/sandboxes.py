"""Agent sandboxes in kind, as real containers.

Two images are built here on the Debian python3 base of lessor's image (no registry is
reachable): the agent-sandbox controller at its pinned version (the binary the local tests run,
built from its Go module), and a sandbox image with python3 and `lessor-runner` at the path a
SandboxPool names. `install` loads both into a kind cluster, applies agent-sandbox's own
kustomization from its module (core and extensions, its RBAC and CRDs) with the image built here,
and waits for the controller. Each image is rebuilt only when what it is made of changes.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml

from e2e.kind.cluster import KindCluster
from e2e.kind.lessor_image import say
from e2e.kind.node_image import KEY_LABEL, docker, image_key
from lessor.controlplane.agent_sandbox import (
    CONTROLLER,
    MODULE,
    agent_sandbox_crds,
    ensure_agent_sandbox,
    pinned_version,
)
from lessor.controlplane.binaries import Progress
from lessor.runner import runner

SANDBOX_IMAGE = "lessor-sandbox:dev"
RUNNER_PATH = "/usr/local/bin/lessor-runner"
CONTROLLER_NAMESPACE = "agent-sandbox-system"
PLACEHOLDER = f"ko://{MODULE}/cmd/{CONTROLLER}"


def controller_image() -> str:
    return f"lessor-agent-sandbox-controller:{pinned_version()}"


def build_image(
    tag: str, base: str, files: dict[str, bytes], dockerfile: str, progress: Progress
) -> str:
    """`docker build` of a context holding `files`, unless `tag` was built from the same."""
    digest = hashlib.sha256((base + dockerfile).encode())
    for name, content in sorted(files.items()):
        digest.update(name.encode() + b"\0" + content)
    key = digest.hexdigest()[:16]
    if image_key(tag) == key:
        return tag
    progress(f"building {tag} on {base}")
    with tempfile.TemporaryDirectory(prefix="lessor-image-") as scratch:
        context = Path(scratch)
        for name, content in files.items():
            (context / name).write_bytes(content)
            # COPY keeps the mode; the classic builder has no --chmod.
            (context / name).chmod(0o755)
        (context / "Dockerfile").write_text(f"FROM {base}\n{dockerfile}")
        docker("build", f"--label={KEY_LABEL}={key}", "--tag", tag, str(context))
    return tag


def build(base: str, progress: Progress = say) -> tuple[str, str]:
    """(the controller's image, the sandbox image), both on `base` (lessor's python3 base)."""
    binary = (ensure_agent_sandbox(progress) / CONTROLLER).read_bytes()
    controller = build_image(
        controller_image(), base, {CONTROLLER: binary},
        f"COPY {CONTROLLER} /usr/local/bin/{CONTROLLER}\n"
        f"USER 65532:65532\nENTRYPOINT [\"/usr/local/bin/{CONTROLLER}\"]\n",
        progress,
    )  # fmt: skip
    # The runner is one standard-library file; the image carries it as a script.
    script = b"#!/usr/bin/python3\n" + Path(runner.__file__).read_bytes()
    sandbox = build_image(
        SANDBOX_IMAGE, base, {"lessor-runner": script},
        f"COPY lessor-runner {RUNNER_PATH}\nUSER 65532:65532\nWORKDIR /tmp\n",
        progress,
    )  # fmt: skip
    return controller, sandbox


def manifests(kubectl: Any, image: str, progress: Progress) -> list[dict[str, Any]]:
    """agent-sandbox's kustomization (k8s/ of its module) rendered by kubectl's kustomize, the
    controller's image the one built here and its webhook off (nothing here registers it)."""
    module_k8s = agent_sandbox_crds(progress)[0].parents[1]
    with tempfile.TemporaryDirectory(prefix="lessor-agent-sandbox-k8s-") as scratch:
        copy = Path(scratch) / "k8s"
        shutil.copytree(module_k8s, copy)
        rendered = kubectl("kustomize", str(copy)).stdout
    documents = [d for d in yaml.safe_load_all(rendered.replace(PLACEHOLDER, image)) if d]
    for document in documents:
        if document["kind"] == "Deployment":
            [container] = document["spec"]["template"]["spec"]["containers"]
            container["args"] = [*container.get("args", []), "--enable-webhook=false"]
            container["imagePullPolicy"] = "Never"
    return documents


def install(kubectl: Any, cluster: KindCluster, base: str, progress: Progress = say) -> str:
    """agent-sandbox running in the cluster; returns the sandbox image, loaded into it."""
    controller, sandbox = build(base, progress)
    for image in (controller, sandbox):
        cluster.load(image)
    documents = manifests(kubectl, controller, progress)
    listed = json.dumps({"apiVersion": "v1", "kind": "List", "items": documents})
    # Server-side: the CRDs are too big for the last-applied annotation.
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=listed)
    kubectl(
        "rollout", "status", f"deployment/{CONTROLLER}", "-n", CONTROLLER_NAMESPACE,
        "--timeout=300s",
    )  # fmt: skip
    progress(f"agent-sandbox {pinned_version()} runs in {cluster.name}")
    return sandbox
