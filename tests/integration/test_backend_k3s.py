"""The `k3s` backend against a real API server, driven with the operator's own ServiceAccount under
the shipped RBAC (manifests/base and manifests/instance-namespaces, its admission policy
included), with the instance in a namespace that enforces `restricted` as lessor-system does.

What runs here: the cluster's namespace is made at Pod Security `privileged`; every object is
admitted, the StatefulSet's privileged pod included, and scheduled on the kwok node; a replay
creates nothing twice and keeps the token; the sidecar's own ServiceAccount may publish the
kubeconfig Secret and nothing else; readiness follows the StatefulSet, the Secret and the node
port; the kubeconfig handed out points at the node port with the Service's name to verify; a
teardown under the same rights is verified once the namespace is gone.

What does not run here: k3s itself. Its image cannot be fetched on these machines (no registry is
reachable) and kwok runs no containers, so the server, its agent's node, the sidecar's script and
the node port answering are not exercised (docs/operations.md, "Backends").
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest
import yaml

from lessor.controlplane.cluster import LocalControlPlane
from lessor.controlplane.kubectl import Cluster
from lessor.operator.backends import k3s_manifests as manifests
from lessor.operator.backends.instance_namespace import namespace_name
from lessor.operator.backends.k3s import K3sBackend
from lessor.operator.runtime.client import KubeClient
from lessor.resources.cluster import Backend
from tests.integration.backend_helpers import published_kubeconfig, restricted_namespace, until
from tests.integration.owned_instances import owned_instance
from tests.integration.service_accounts import install_rbac

pytestmark = pytest.mark.integration
# The datastore in an emptyDir: the local control plane has no volume provisioner.
EPHEMERAL = Backend.model_validate({"type": "k3s", "k3s": {"persistent": False}})


def test_objects_under_the_shipped_rbac_readiness_kubeconfig_and_verified_teardown(
    control_plane: Cluster, tmp_path: Path
) -> None:
    if not isinstance(control_plane, LocalControlPlane):
        pytest.skip("needs the local control plane's kwok node (k3s's image is not reachable)")
    namespace = restricted_namespace(control_plane, "k3s")
    kubeconfigs = install_rbac(control_plane, namespace, tmp_path, instance_namespaces=True)
    instance = owned_instance(control_plane, namespace, "k3s")
    own = namespace_name(instance)
    token = f"secret/{manifests.token_secret_name(instance)}"

    def kubectl(*args: str, **kwargs: object) -> str:
        return control_plane.kubectl(*args, **kwargs).stdout  # type: ignore[arg-type]

    async def scenario() -> None:
        client = await KubeClient.connect(str(kubeconfigs["lessor-operator"]))
        backend = K3sBackend(client, EPHEMERAL)
        await backend.provision(instance)
        first = kubectl("get", token, "-n", own, "-o", "jsonpath={.data.token}")
        await backend.provision(instance)  # a replay after a crash
        assert kubectl("get", token, "-n", own, "-o", "jsonpath={.data.token}") == first

        async def waiting_for_kubeconfig() -> bool:
            readiness = await backend.readiness(instance)
            return readiness.message == "kubeconfig not published yet"

        await until(waiting_for_kubeconfig, "the privileged pod to be admitted, scheduled, ready")
        labels = json.loads(kubectl("get", "namespace", own, "-o", "json"))["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
        [pod] = json.loads(kubectl("get", "pods", "-n", own, "-o", "json"))["items"]
        [k3s] = [c for c in pod["spec"]["containers"] if c["name"] == "k3s"]
        assert k3s["securityContext"]["privileged"] is True
        assert "--disable-agent" not in k3s["args"], "the cluster has a node"
        assert not kubectl("get", "pods", "-n", namespace, "-o", "name").strip(), (
            "nothing of the cluster runs in the operator's namespace"
        )

        # The sidecar, as its own ServiceAccount: it may publish its Secret, and nothing more.
        publisher = f"{manifests.object_name(instance)}-publisher"
        sidecar_token = kubectl("create", "token", publisher, "-n", own).strip()
        secret = {
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": manifests.kubeconfig_secret_name(instance), "namespace": own},
            "stringData": {manifests.KUBECONFIG_KEY: published_kubeconfig()},
        }  # fmt: skip
        as_sidecar = ("--token", sidecar_token, "--kubeconfig", "/dev/null",
                      "--server", control_plane.server,
                      "--certificate-authority", str(control_plane.pki / "ca.crt"))  # fmt: skip
        control_plane.kubectl("apply", "-f", "-", *as_sidecar, input=json.dumps(secret))
        denied = control_plane.kubectl("get", "secrets", "-n", namespace, *as_sidecar, check=False)
        assert denied.returncode != 0 and "forbidden" in denied.stderr

        async def ready_but_for_kube_proxy() -> bool:
            # kwok runs nothing and no kube-proxy serves the node port: every other step passes.
            readiness = await backend.readiness(instance)
            return readiness.message == "k3s not reachable from outside yet"

        await until(ready_but_for_kube_proxy, "readiness up to the node port")
        document = yaml.safe_load(await backend.kubeconfig(instance))
        cluster = document["clusters"][0]["cluster"]
        assert cluster["server"].startswith("https://127.0.0.1:")  # kwok's node address
        assert cluster["tls-server-name"] == manifests.service_host(instance, own)
        assert document["users"][0]["user"]["client-certificate-data"]

        await backend.teardown(instance)

        async def verified() -> bool:
            return (await backend.verify_teardown(instance)).verified

        await until(verified, "the namespace to be gone")
        await backend.teardown(instance)  # a replay of a finished teardown is no error

    asyncio.run(scenario())
    assert control_plane.kubectl("get", "namespace", own, check=False).returncode != 0


def test_a_hostile_published_kubeconfig_is_refused_not_used(
    control_plane: Cluster, tmp_path: Path
) -> None:
    """The Secret is written from inside the tenant's cluster pod: too large or not a
    kubeconfig, it is a backend error (the instance stays Creating with the reason until it has
    failed to start), never a crash of the reconciler."""
    if not isinstance(control_plane, LocalControlPlane):
        pytest.skip("needs the local control plane's kwok node")
    namespace = f"k3s-{uuid.uuid4().hex[:6]}"
    control_plane.kubectl("create", "namespace", namespace)
    instance = owned_instance(control_plane, namespace, "k3s")
    own = namespace_name(instance)

    async def scenario() -> None:
        client = await KubeClient.connect(str(control_plane.kubeconfig))
        backend = K3sBackend(client, EPHEMERAL)
        await backend.provision(instance)

        async def published() -> bool:
            return (await backend.readiness(instance)).message == "kubeconfig not published yet"

        await until(published, "the StatefulSet to be ready")
        name = manifests.kubeconfig_secret_name(instance)
        for content, reason in (
            ("a" * 70_000, "too large"),
            ("- just\n- a list\n", "names no cluster"),
            ("{unclosed", "not YAML"),
        ):
            secret = {
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name, "namespace": own},
                "stringData": {manifests.KUBECONFIG_KEY: content},
            }  # fmt: skip
            control_plane.kubectl("apply", "-f", "-", input=json.dumps(secret))
            with pytest.raises(Exception, match=reason):
                await backend.readiness(instance)
        await backend.teardown(instance)

    asyncio.run(scenario())
