"""Execution overhead: the wall time of a wait-mode execution of `true` through the API
(POST /v1/sandbox-leases/:id/executions until its 200 answer), minus the same command run
locally, on the local control plane with the real agent-sandbox controller; kwok runs the
sandbox pod's exec as a local process, so what remains is lessor's and Kubernetes' share:
the API, the reservation objects, and the pods/exec round trips to the runner.

Also reported: one bare runner round trip through pods/exec (the floor of each step).

Usage: python -m bench.execution_overhead
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from typing import Any

from bench.stack import local_stack, percentiles, progress
from lessor.controlplane.agent_sandbox import install_agent_sandbox, run_agent_sandbox
from lessor.runner import runner
from lessor.runner.client import Runner, call_runner, configuration

EXTERNAL = ("--agent-sandbox-mode=external",)


def run(samples: int) -> dict[str, Any]:
    with local_stack(with_node=True, operator_args=EXTERNAL,
                     api_args=(*EXTERNAL, "--sandbox-admission-rate=1000")) as stack:  # fmt: skip
        install_agent_sandbox(stack.cluster, progress)
        with run_agent_sandbox(stack.cluster.kubeconfig, stack.work / "agent-sandbox.log"):
            script = stack.work / "lessor-runner"
            script.write_text(
                f"#!/bin/sh\nLESSOR_RUNNER_DIR={stack.work / 'runner'} "
                f"exec {sys.executable} {runner.__file__}\n"
            )
            script.chmod(0o755)
            lease = stack.sandbox_lease(runner={"path": str(script)})
            client = stack.static()
            api, local, floor = [], [], []
            path = f"/v1/sandbox-leases/{lease}/executions"
            for n in range(samples + 2):
                started = time.perf_counter()
                status, body = client.call(
                    "POST", path, {"command": ["true"], "idempotencyKey": str(uuid.uuid4())}
                )
                elapsed = time.perf_counter() - started
                assert status == 200 and body["state"] == "Succeeded", body
                if n >= 2:  # the first two warm the connections up
                    api.append(elapsed)
            for _ in range(samples):
                started = time.perf_counter()
                subprocess.run(["true"], check=True)
                local.append(time.perf_counter() - started)
            lease_object = json.loads(stack.cluster.kubectl(
                "get", "sandboxlease", lease, "-n", "bench", "-o", "json").stdout)  # fmt: skip
            settings = configuration(str(stack.cluster.kubeconfig))
            target = Runner("bench", lease_object["status"]["pod"]["name"], None, str(script))
            for _ in range(samples):
                started = time.perf_counter()
                call_runner(settings, target, {"op": "status", "id": "none"})
                floor.append(time.perf_counter() - started)
    api_p = percentiles(api, 1000, 1)
    local_p = percentiles(local, 1000, 2)
    return {
        "through_api_ms": api_p,
        "local_ms": local_p,
        "runner_round_trip_ms": percentiles(floor, 1000, 1),
        "overhead_p50_ms": round(api_p["p50"] - local_p["p50"], 1),
        "note": "wait mode; kwok runs the pod's exec as a local process (no container runtime)",
    }


def main() -> int:
    print(json.dumps(run(30), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
