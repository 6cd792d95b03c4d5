"""The external agent-sandbox controller (kubernetes-sigs/agent-sandbox) at its pinned version,
for tests and the local stack: its CRDs and its controller binary, from the Go module.

lessor integrates with agent-sandbox but ships none of it: the CRDs and the controller come from
the module `sigs.k8s.io/agent-sandbox` at the version pinned in versions.json (`agentSandbox`),
fetched through the Go module proxy and built into the cache beside the control plane's
binaries (`<cache>/agent-sandbox/<version>/`: `crds/` and `agent-sandbox-controller`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

from lessor.agentsandbox.compat import FINGERPRINTS
from lessor.controlplane.binaries import (
    Progress,
    build_once,
    cache_root,
    run_go,
    wrapper_module,
)
from lessor.controlplane.errors import ControlPlaneError
from lessor.controlplane.kubectl import Cluster, wait_established

MODULE = "sigs.k8s.io/agent-sandbox"
CONTROLLER = "agent-sandbox-controller"


def pinned_version() -> str:
    text = resources.files("lessor.controlplane").joinpath("versions.json").read_text()
    version: str = json.loads(text)["agentSandbox"]
    return version


def agent_sandbox_dir(version: str | None = None) -> Path:
    return cache_root() / "agent-sandbox" / (version or pinned_version())


def find_agent_sandbox(version: str | None = None) -> Path | None:
    directory = agent_sandbox_dir(version)
    complete = (directory / CONTROLLER).is_file() and len(list(directory.glob("crds/*.yaml"))) == 4
    return directory if complete else None


def agent_sandbox_crds(progress: Progress = print) -> list[Path]:
    """The four CRD files of the pinned release, from the Go module cache (a download of a few
    MiB the first time; no build)."""
    go = shutil.which("go")
    if go is None:
        raise ControlPlaneError("the Go toolchain is needed to fetch the agent-sandbox module")
    version = pinned_version()
    with tempfile.TemporaryDirectory(prefix="lessor-agent-sandbox-") as scratch:
        work = Path(scratch) / "module"
        wrapper_module(work, "lessor.dev/localcp/agent-sandbox", ["go 1.26"])
        download = ["mod", "download", "-json", f"{MODULE}@{version}"]
        info = json.loads(run_go(go, download, work, progress))
    crds = sorted((Path(info["Dir"]) / "k8s" / "crds").glob("*.yaml"))
    if len(crds) != 4:
        raise ControlPlaneError(f"{MODULE}@{version} has {len(crds)} CRDs under k8s/crds, not 4")
    return crds


def ensure_agent_sandbox(progress: Progress = print) -> Path:
    """The directory with `crds/` (the four CRDs of the pinned release) and the controller,
    building them the first time (about two minutes), under the same lock as the control plane."""
    version = pinned_version()

    def build(go: str, work: Path, out: Path) -> None:
        module = work / "module"
        wrapper_module(module, "lessor.dev/localcp/agent-sandbox", ["go 1.26"])
        run_go(go, ["get", f"{MODULE}/cmd/{CONTROLLER}@{version}"], module, progress)
        (out / "crds").mkdir()
        for crd in agent_sandbox_crds(progress):
            shutil.copyfile(crd, out / "crds" / crd.name)
        command = ["build", "-trimpath", "-ldflags", "-s -w", "-o", str(out / CONTROLLER),
                   f"{MODULE}/cmd/{CONTROLLER}"]  # fmt: skip
        run_go(go, command, module, progress)

    return build_once(
        agent_sandbox_dir(version),
        lambda: find_agent_sandbox(version) is not None,
        build,
        what=f"agent-sandbox {version}",
        missing_go="the Go toolchain is needed to build the agent-sandbox controller",
        progress=progress,
    )


def install_agent_sandbox(cluster: Cluster, progress: Progress = print) -> None:
    """Its CRDs, server-side (too big for the last-applied annotation), Established."""
    for path in agent_sandbox_crds(progress):
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    wait_established(cluster, *FINGERPRINTS)


@contextlib.contextmanager
def run_agent_sandbox(
    kubeconfig: Path, log: Path, progress: Progress = print
) -> Iterator[subprocess.Popen[bytes]]:
    """The controller, with its extensions (claims, templates, warm pools), against the cluster
    of `kubeconfig`: no webhook, no leader election, metrics and probes on free ports."""
    binary = ensure_agent_sandbox(progress) / CONTROLLER
    with log.open("ab") as output:
        process = subprocess.Popen(
            [str(binary), "--extensions", "--enable-webhook=false", "--leader-elect=false",
             "--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0"],
            env={**os.environ, "KUBECONFIG": str(kubeconfig)},
            stdout=output, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        yield process
    finally:
        process.terminate()
        process.wait(timeout=60)
