"""An operator and an API server of their own, over one namespace with a warm `local` pool
(`mon-warm`) and a static token that may lease from it: the smallest real installation, for
tests that watch what the two components export (metrics, traces) while leases come and go."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lessor.controlplane.cluster import LocalControlPlane
from lessor.controlplane.kubectl import Cluster, wait_established
from tests.integration.operator_harness import Operator, destroy_local_clusters
from tests.integration.test_apiserver import Api, start_api

ROOT = Path(__file__).resolve().parents[2]
POOL = "mon-warm"
TOKEN = "mon-" + uuid.uuid4().hex


def access_policy(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "lessor.dev/v1alpha1",
        "kind": "AccessPolicy",
        "metadata": {"name": "monitoring", "namespace": namespace},
        "spec": {
            "auth": {
                "staticTokens": [
                    {"secretRef": {"name": "tokens", "key": "ops"}, "claims": {"sub": "ops"}}
                ]
            },
            "identity": "{sub}",
            "rules": [{"pools": ["mon-*"], "maxConcurrentLeases": 2}],
        },
    }


class Stack:
    def __init__(self, cluster: Cluster, directory: Path, env: dict[str, str]) -> None:
        self.cluster = cluster
        self.directory = directory
        self.env = env
        self.namespace = f"mon-{uuid.uuid4().hex[:8]}"
        self.operator = Operator(
            cluster.kubeconfig, self.namespace, directory / "instances", directory / "op.log",
            env=env,
        )  # fmt: skip
        self.api: Api | None = None
        self.api_process: subprocess.Popen[bytes] | None = None


@contextlib.contextmanager
def pool_stack(
    control_plane: Cluster, directory: Path, env: dict[str, str] | None = None
) -> Iterator[Stack]:
    """The stack, both components started with `env` beside the test's own environment."""
    if not isinstance(control_plane, LocalControlPlane):
        pytest.skip("needs the local backend of the local control plane")
    stack = Stack(control_plane, directory, env or {})
    control_plane.kubectl("apply", "-f", str(ROOT / "crds"))
    wait_established(control_plane)
    control_plane.kubectl("create", "namespace", stack.namespace)
    control_plane.kubectl(
        "create", "secret", "generic", "tokens", "-n", stack.namespace,
        f"--from-literal=ops={TOKEN}",
    )  # fmt: skip
    pool = {
        "apiVersion": "lessor.dev/v1alpha1",
        "kind": "ClusterPool",
        "metadata": {"name": POOL, "namespace": stack.namespace},
        "spec": {"warmTarget": 1, "ttl": "30m", "backend": {"type": "local"}},
    }
    for document in (access_policy(stack.namespace), pool):
        control_plane.kubectl("apply", "-f", "-", input=json.dumps(document))
    stack.operator.start()
    try:
        log = directory / "api.log"
        stack.api_process, stack.api = start_api(control_plane, stack.namespace, log, env=stack.env)
        yield stack
    finally:
        if stack.api_process is not None:
            stack.api_process.send_signal(signal.SIGTERM)
            stack.api_process.wait(timeout=60)
        stack.operator.kill(signal.SIGTERM)
        destroy_local_clusters(directory / "instances")
        control_plane.kubectl("delete", "namespace", stack.namespace, "--wait=false")
