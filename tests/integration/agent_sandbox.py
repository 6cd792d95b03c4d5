"""The real agent-sandbox v0.5.6 on the local control plane, for tests: its CRDs from the Go
module, and its controller built from the module (about 90 s the first time, then cached) and
run as a local process; kwok runs the pods of its sandboxes."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from lessor.agentsandbox.compat import FINGERPRINTS
from lessor.controlplane.agent_sandbox import CONTROLLER, ensure_agent_sandbox
from lessor.controlplane.kubectl import Cluster


def install(cluster: Cluster, files: list[Path]) -> None:
    for path in files:  # server-side: the CRDs are too big for the last-applied annotation
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    cluster.kubectl("wait", "--for=condition=Established", *[f"crd/{n}" for n in FINGERPRINTS])


@contextlib.contextmanager
def controller(cluster: Cluster, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    binary = ensure_agent_sandbox(lambda _: None) / CONTROLLER
    with log.open("ab") as output:
        process = subprocess.Popen(
            [str(binary), "--extensions", "--enable-webhook=false", "--leader-elect=false",
             "--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0"],
            env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
            stdout=output, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        yield process
    finally:
        process.terminate()
        process.wait(timeout=60)
