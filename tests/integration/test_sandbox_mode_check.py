"""`agentSandbox.mode` against the real agent-sandbox v0.5.6 CRDs (from its Go module) on the
real API server: the read-only compatibility check, and what the API serves in each mode.

These tests delete and re-create the agent-sandbox CRDs under the session's agent-sandbox
controller, so this module's name sorts after the other Sandbox modules (pytest runs modules in
name order), and it leaves the CRDs installed."""

from __future__ import annotations

import json
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lessor.agentsandbox.compat import FINGERPRINTS, check
from lessor.apiserver.state.kube import Kube
from lessor.controlplane.agent_sandbox import agent_sandbox_crds, install_agent_sandbox
from tests.integration.operator_harness import Objects, Operator, wait_for
from tests.integration.test_apiserver import ALICE, Stack, stack, start_api  # noqa: F401

pytestmark = pytest.mark.integration
WARM_POOLS = "sandboxwarmpools.extensions.agents.x-k8s.io"


def quiet(_: str) -> None:
    pass


@pytest.fixture(scope="module")
def crds(stack: Stack) -> Iterator[list[Path]]:  # noqa: F811
    files = agent_sandbox_crds(lambda _: None)
    yield files
    # Left installed, as a cluster with agent-sandbox has them.
    install_agent_sandbox(stack.cluster, quiet)


def test_the_check_reads_the_crds_and_tells_0_5_6_from_older(
    stack: Stack,  # noqa: F811 - the fixture
    crds: list[Path],
) -> None:
    kube = Kube(str(stack.cluster.kubeconfig), stack.namespace)
    for path in crds:
        stack.cluster.kubectl("delete", "-f", str(path), "--ignore-not-found", "--wait")
    absent = check(kube.crd)
    assert not absent.ok
    assert sorted(absent.problems) == sorted(f"CRD {n} is not installed" for n in FINGERPRINTS)

    install_agent_sandbox(stack.cluster, quiet)
    assert check(kube.crd).ok, check(kube.crd).reason

    # What v0.5.5 looked like: the same CRDs without SandboxWarmPool status.observedGeneration.
    crd = json.loads(stack.cluster.kubectl("get", "crd", WARM_POOLS, "-o", "json").stdout)
    index = next(i for i, v in enumerate(crd["spec"]["versions"]) if v["name"] == "v1beta1")
    path = f"/spec/versions/{index}/schema/openAPIV3Schema/properties/status/properties"
    stack.cluster.kubectl(
        "patch", "crd", WARM_POOLS, "--type=json",
        "-p", json.dumps([{"op": "remove", "path": f"{path}/observedGeneration"}]),
    )  # fmt: skip
    older = check(kube.crd)
    assert older.problems == [
        f"CRD {WARM_POOLS} v1beta1 lacks status.observedGeneration (an older release?)"
    ]
    install_agent_sandbox(stack.cluster, quiet)
    assert check(kube.crd).ok


def test_disabled_mode_has_no_sandbox_routes(stack: Stack) -> None:  # noqa: F811
    for path in ("/v1/sandbox-leases", "/v1/sandbox-leases/x", "/v1/sandbox-leases/x/logs"):
        response = stack.api.call("GET", path, token=ALICE)
        assert (response.status, response.body["reason"]) == (404, "not_found"), path
    assert stack.api.call("GET", "/v1/status").body["sandbox"] == {
        "mode": "disabled",
        "served": False,
    }


def test_external_mode_serves_only_a_compatible_agent_sandbox(
    stack: Stack,  # noqa: F811
    crds: list[Path],
    tmp_path: Path,
) -> None:
    for path in crds:
        stack.cluster.kubectl("delete", "-f", str(path), "--ignore-not-found", "--wait")
    mode = ("--agent-sandbox-mode=external",)
    process, api = start_api(stack.cluster, stack.namespace, tmp_path / "a.log", mode)
    try:
        status = api.call("GET", "/v1/status").body["sandbox"]
        assert status["mode"] == "external" and status["served"] is False
        assert "is not installed" in status["reason"]
        # Spec 1: the Sandbox endpoints do not exist until the check passes, for anyone.
        for token in (None, ALICE):
            refused = api.call("POST", "/v1/sandbox-leases", token=token, body={"pool": "p"})
            assert (refused.status, refused.body["reason"]) == (404, "not_found")
            assert "is not installed" in refused.body["detail"]
        assert "not served" in (tmp_path / "a.log").read_text()
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    install_agent_sandbox(stack.cluster, quiet)
    process, api = start_api(stack.cluster, stack.namespace, tmp_path / "b.log", mode)
    try:
        assert api.call("GET", "/v1/status").body["sandbox"]["served"] is True
        answer = api.call("GET", "/v1/sandbox-leases", token=ALICE)
        assert (answer.status, answer.body) == (200, []), "past the gate: served"
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)


def test_a_sandbox_pool_becomes_a_template_and_a_warm_pool(
    stack: Stack,  # noqa: F811 - the fixture
    crds: list[Path],
    tmp_path: Path,
) -> None:
    cluster = stack.cluster
    for path in crds:
        cluster.kubectl("delete", "-f", str(path), "--ignore-not-found", "--wait")
    # A namespace of its own: in the stack's, this operator would reconcile the stack's
    # ClusterPools beside the stack's own operator (and start `local` clusters for them).
    namespace = f"sbpool-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", namespace)
    operator = Operator(
        cluster.kubeconfig, namespace, tmp_path / "instances", tmp_path / "op.log",
        extra=["--agent-sandbox-mode=external", "--no-leader-election"],
    ).start()  # fmt: skip
    objects = Objects(cluster, namespace)
    try:
        objects.apply(
            {
                "apiVersion": "lessor.dev/v1alpha1",
                "kind": "SandboxPool",
                "metadata": {"name": "agents"},
                "spec": {
                    "warm": 2,
                    "template": {"spec": {"containers": [{"name": "s", "image": "busybox"}]}},
                },
            }
        )

        def status() -> dict[str, Any]:
            return (objects.get("sandboxpool", "agents") or {}).get("status", {})

        wait_for("Unavailable", lambda: status().get("phase") == "Unavailable", timeout=120)
        conditions = {c["type"]: c for c in status()["conditions"]}
        condition = conditions["AgentSandboxCompatible"]
        assert condition["status"] == "False" and "is not installed" in condition["message"]
        assert conditions["Ready"]["message"] == condition["message"], "Ready says why not"

        install_agent_sandbox(cluster, quiet)
        wait_for("a warm pool", lambda: status().get("warmPoolRef"), timeout=120)
        template = objects.get("sandboxtemplate.extensions.agents.x-k8s.io", "lessor-agents")
        warm = objects.get("sandboxwarmpool.extensions.agents.x-k8s.io", "lessor-agents")
        assert template is not None and warm is not None
        assert template["spec"]["podTemplate"]["spec"]["containers"][0]["image"] == "busybox"
        assert warm["spec"] == {**warm["spec"], "replicas": 2,
                                "sandboxTemplateRef": {"name": "lessor-agents"}}  # fmt: skip
        pool = objects.get("sandboxpool", "agents")
        assert pool is not None
        assert warm["metadata"]["ownerReferences"][0]["uid"] == pool["metadata"]["uid"]
        assert status()["warmPoolRef"]["uid"] == warm["metadata"]["uid"]
        assert status()["templateRef"]["uid"] == template["metadata"]["uid"]
        assert {c["type"]: c["status"] for c in status()["conditions"]}[
            "AgentSandboxCompatible"
        ] == "True"

        objects.patch("sandboxpool", "agents", {"spec": {"warm": 3}})
        wait_for(
            "the warm pool resized",
            lambda: (
                (objects.get("sandboxwarmpool.extensions.agents.x-k8s.io", "lessor-agents") or {})
                .get("spec", {})
                .get("replicas")
                == 3
            ),
            timeout=120,
        )
    finally:
        operator.kill(signal.SIGTERM)
        cluster.kubectl("delete", "namespace", namespace, "--wait=false")
