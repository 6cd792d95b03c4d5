"""The `apiserver` backend against a real API server, with the operator's own ServiceAccount
(the shipped RBAC, not an admin) in a namespace that enforces Pod Security `restricted`, as
lessor-system does: its objects are accepted, its pod admitted and scheduled, a replay creates
nothing twice and keeps the keys, readiness follows the StatefulSet and the node port, and the
teardown is verified. A cluster whose Secret lacks the CA's key (made before lessor kept it)
is never ready: no lease credential could be issued for it.

kwok marks the pod running without running it, so kube-apiserver itself and the kubeconfig's use
are proven in kind (e2e/test_scenarios.py), where the same backend serves every lease."""

from __future__ import annotations

import asyncio
import datetime
import json
import socket
import uuid
from pathlib import Path

import pytest
import yaml

from lessor.controlplane.cluster import LocalControlPlane
from lessor.controlplane.kubectl import Cluster
from lessor.controlplane.pki import CertificateAuthority
from lessor.operator.backends import apiserver_manifests as manifests
from lessor.operator.backends.apiserver import UNSIGNABLE, ApiserverBackend
from lessor.operator.backends.base import BackendError, LeaseRef
from lessor.operator.backends.exposure import answers_through
from lessor.operator.backends.owned import label_selector
from lessor.operator.runtime.client import KubeClient
from lessor.resources.cluster import Backend
from tests.integration.backend_helpers import restricted_namespace, until
from tests.integration.owned_instances import owned_instance
from tests.integration.service_accounts import install_rbac

pytestmark = pytest.mark.integration


def test_objects_under_the_shipped_rbac_readiness_kubeconfig_and_verified_teardown(
    control_plane: Cluster, tmp_path: Path
) -> None:
    if not isinstance(control_plane, LocalControlPlane):
        pytest.skip("needs the local control plane's kwok node; kind runs it for real (e2e)")
    namespace = restricted_namespace(control_plane, "apiserver")
    kubeconfigs = install_rbac(control_plane, namespace, tmp_path)
    instance = owned_instance(control_plane, namespace, "apiserver")
    secret = f"secret/{manifests.pki_secret_name(instance)}"

    def keys() -> str:
        found = control_plane.kubectl("get", secret, "-n", namespace, "-o", "json").stdout
        return str(json.loads(found)["data"]["ca.crt"])

    async def scenario() -> None:
        client = await KubeClient.connect(str(kubeconfigs["lessor-operator"]))
        backend = ApiserverBackend(client, Backend(type="apiserver"))
        await backend.provision(instance)
        first_keys = keys()
        await backend.provision(instance)  # a replay after a crash
        assert keys() == first_keys, "a replay must keep the keys kubeconfigs were made with"

        async def ready_but_for_kube_proxy() -> bool:
            # kwok reports the pod Ready but runs nothing and no kube-proxy serves its node
            # port: every other step of readiness is seen to pass.
            readiness = await backend.readiness(instance)
            return readiness.message == "kube-apiserver not reachable from outside yet"

        await until(ready_but_for_kube_proxy, "the pod to be admitted, scheduled and ready")
        document = yaml.safe_load(await backend.kubeconfig(instance))
        cluster = document["clusters"][0]["cluster"]
        assert cluster["server"].startswith("https://127.0.0.1:")  # kwok's node address
        assert cluster["tls-server-name"] == manifests.service_host(instance)
        user = document["users"][0]["user"]
        assert {"client-certificate-data", "client-key-data"} <= set(user)

        control_plane.kubectl(
            "patch", secret, "-n", namespace, "--type=json",
            "-p", json.dumps([{"op": "remove", "path": "/data/ca.key"}]),
        )  # fmt: skip
        assert (await backend.readiness(instance)).message == UNSIGNABLE
        lease = LeaseRef("l1", datetime.datetime.now(datetime.UTC))
        with pytest.raises(BackendError, match="kept no CA key"):
            await backend.lease_kubeconfig(instance, "unused", lease)

        await backend.teardown(instance)

        async def verified() -> bool:
            return (await backend.verify_teardown(instance)).verified

        await until(verified, "the teardown to be verified")
        await backend.teardown(instance)  # a replay of a finished teardown is no error

    asyncio.run(scenario())
    left = control_plane.kubectl(
        "get", "statefulsets,pods,services,secrets", "-n", namespace,
        "-l", label_selector(instance), "-o", "name",
    )  # fmt: skip
    assert left.stdout.strip() == ""


def test_reachability_needs_the_clusters_ca_and_the_name_it_was_issued_for(
    control_plane: Cluster,
) -> None:
    """The check readiness makes through the node port, against a real kube-apiserver."""
    if not isinstance(control_plane, LocalControlPlane):
        pytest.skip("needs the local control plane's CA")
    port = int(control_plane.server.rsplit(":", 1)[1])
    ca = (control_plane.pki / "ca.crt").read_text()
    assert answers_through("127.0.0.1", port, ca, "localhost")
    other_ca = CertificateAuthority("another cluster").cert_pem.decode()
    assert not answers_through("127.0.0.1", port, other_ca, "localhost")
    assert not answers_through("127.0.0.1", port, ca, "apiserver-x.elsewhere.svc")
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        assert not answers_through("127.0.0.1", unused.getsockname()[1], ca, "localhost")


def test_a_load_balancer_service_is_reached_at_the_address_its_load_balancer_gets(
    control_plane: Cluster, tmp_path: Path
) -> None:
    """`exposure.type: LoadBalancer`: the Service asks for a load balancer, readiness waits for
    its address, and the kubeconfig points there with the Service's name to verify. No cloud
    runs here: the test writes the address into the Service's status, as a cloud's controller
    (or MetalLB) does; that it forwards is the cloud's part."""
    if not isinstance(control_plane, LocalControlPlane):
        pytest.skip("needs the local control plane's kwok node")
    namespace = f"apiserver-lb-{uuid.uuid4().hex[:6]}"
    control_plane.kubectl("create", "namespace", namespace)
    kubeconfigs = install_rbac(control_plane, namespace, tmp_path)
    instance = owned_instance(control_plane, namespace, "apiserver")
    spec = Backend.model_validate(
        {"type": "apiserver", "apiserver": {"exposure": {"type": "LoadBalancer"}}}
    )
    service = manifests.object_name(instance)

    async def scenario() -> None:
        client = await KubeClient.connect(str(kubeconfigs["lessor-operator"]))
        backend = ApiserverBackend(client, spec)
        await backend.provision(instance)

        async def waiting_for_an_address() -> bool:
            return (await backend.readiness(instance)).message == "no load balancer address yet"

        await until(waiting_for_an_address, "the pod ready, the load balancer not yet")
        address = {"status": {"loadBalancer": {"ingress": [{"ip": "127.0.0.1"}]}}}
        control_plane.kubectl(
            "patch", "service", service, "-n", namespace, "--subresource=status",
            "--type=merge", "-p", json.dumps(address),
        )  # fmt: skip

        async def checking_the_address() -> bool:
            message = (await backend.readiness(instance)).message
            return message == "kube-apiserver not reachable from outside yet"

        await until(checking_the_address, "readiness to try the load balancer's address")
        document = yaml.safe_load(await backend.kubeconfig(instance))
        cluster = document["clusters"][0]["cluster"]
        assert cluster["server"] == f"https://127.0.0.1:{manifests.PORT}"
        assert cluster["tls-server-name"] == manifests.service_host(instance)
        await backend.teardown(instance)

    asyncio.run(scenario())
    found = control_plane.kubectl("get", "service", service, "-n", namespace, check=False)
    assert found.returncode != 0
