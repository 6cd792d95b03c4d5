"""The k3s backend against a real API server with a kwok node: its objects are accepted and
scheduled, readiness follows the StatefulSet and the published kubeconfig, and teardown is
verified by listing every kind by label.

kwok runs no containers, so k3s itself and its kubeconfig-publishing sidecar do not run here;
the test publishes the kubeconfig Secret the way the sidecar would. The same backend runs k3s
for real in kind (e2e)."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid

import pytest

from lessor.controlplane.cluster import LocalControlPlane
from lessor.controlplane.kubectl import Cluster
from lessor.operator.backends import k3s_manifests as manifests
from lessor.operator.backends import owned
from lessor.operator.backends.k3s import K3sBackend
from lessor.operator.runtime.client import KubeClient
from tests.integration.owned_instances import owned_instance

pytestmark = pytest.mark.integration


async def _until(predicate_coro, what: str, timeout: float = 120.0):  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        value = await predicate_coro()
        if value:
            return value
        await asyncio.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_k3s_objects_readiness_kubeconfig_and_verified_teardown(control_plane: Cluster) -> None:
    if not isinstance(control_plane, LocalControlPlane):
        pytest.skip("kind runs k3s for real in the e2e suite")
    namespace = f"k3s-{uuid.uuid4().hex[:6]}"
    control_plane.kubectl("create", "namespace", namespace)
    instance = owned_instance(control_plane, namespace, "k3s")

    async def scenario() -> None:
        client = await KubeClient.connect(str(control_plane.kubeconfig))
        backend = K3sBackend(client, manifests.K3sConfig(persistent=False))
        await backend.provision(instance)
        await backend.provision(instance)  # a replay after a crash creates nothing twice

        seen: list[str] = []

        async def waiting_for_kubeconfig() -> bool:
            readiness = await backend.readiness(instance)
            seen.append(readiness.message)
            return readiness.message == "kubeconfig not published yet"

        try:
            await _until(waiting_for_kubeconfig, "the StatefulSet to be ready")
        except AssertionError as error:
            pods = control_plane.kubectl("get", "events", "-n", namespace, check=False).stdout
            state = control_plane.state()
            dead = [p.name for p in state.processes if not p.is_running()] if state else []
            pods += f"\nexited control plane processes: {dead}"
            raise AssertionError(
                f"{error}; readiness said {sorted(set(seen))}; pods:\n{pods[-3000:]}"
            ) from None
        kubeconfig = "apiVersion: v1\nkind: Config\nclusters: []\n"
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": manifests.kubeconfig_secret_name(instance),
                "namespace": namespace,
                "labels": owned.labels(instance),
            },
            "data": {manifests.KUBECONFIG_KEY: base64.b64encode(kubeconfig.encode()).decode()},
        }
        control_plane.kubectl("apply", "-f", "-", input=json.dumps(secret))
        assert (await backend.readiness(instance)).ready
        assert await backend.kubeconfig(instance) == kubeconfig

        await backend.teardown(instance)

        async def verified() -> bool:
            return (await backend.verify_teardown(instance)).verified

        await _until(verified, "teardown to be verified")

    pods = control_plane.kubectl
    asyncio.run(scenario())
    leftover = pods(
        "get",
        "all,secrets,sa,roles,rolebindings,pvc",
        "-n",
        namespace,
        "-l",
        owned.label_selector(instance),
        "-o",
        "name",
    ).stdout
    assert leftover.strip() == ""
