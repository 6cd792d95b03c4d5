"""The `vcluster` backend against a real API server, driven with the operator's own ServiceAccount
under the shipped RBAC (manifests/base and manifests/instance-namespaces), from a namespace that
enforces `restricted` as lessor-system does: the cluster's namespace at its pool's Pod Security
level, every object admitted, the vcluster pod scheduled on the kwok node, the syncer's
ServiceAccount able to do its work in that namespace and nothing outside it, readiness up to the
node port, the kubeconfig pointed at it, and a teardown verified by the namespace being gone.
Its isolation is there before its pod (NetworkPolicies, quota), and the quota holds a tenant's
500-replica Deployment while lessor's own pods still schedule.

kwok runs no containers: vcluster itself runs in kind (e2e/test_vcluster.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from lessor.controlplane.cluster import LocalControlPlane
from lessor.controlplane.kubectl import Cluster
from lessor.operator.backends import isolation
from lessor.operator.backends import vcluster_manifests as manifests
from lessor.operator.backends.instance_namespace import namespace_name
from lessor.operator.backends.vcluster import VclusterBackend
from lessor.operator.runtime.client import KubeClient
from lessor.resources.cluster import Backend, Quota
from tests.integration.backend_helpers import published_kubeconfig, restricted_namespace, until
from tests.integration.owned_instances import owned_instance
from tests.integration.service_accounts import install_rbac

pytestmark = pytest.mark.integration


def test_objects_under_the_shipped_rbac_readiness_kubeconfig_and_verified_teardown(
    control_plane: Cluster, tmp_path: Path
) -> None:
    if not isinstance(control_plane, LocalControlPlane):
        pytest.skip("needs the local control plane's kwok node; kind runs vcluster (e2e)")
    namespace = restricted_namespace(control_plane, "vc")
    kubeconfigs = install_rbac(control_plane, namespace, tmp_path, instance_namespaces=True)
    instance = owned_instance(control_plane, namespace, "vcluster")
    own = namespace_name(instance)
    name = manifests.vcluster_name(instance)

    def kubectl(*args: str, check: bool = True, **kwargs: str) -> tuple[int, str, str]:
        done = control_plane.kubectl(*args, check=check, **kwargs)  # type: ignore[arg-type]
        return done.returncode, done.stdout, done.stderr

    async def scenario() -> None:
        client = await KubeClient.connect(str(kubeconfigs["lessor-operator"]))
        spec = Backend.model_validate(
            {"type": "vcluster", "vcluster": {"podSecurity": "restricted"}, "quota": {"pods": 8}}
        )
        backend = VclusterBackend(client, spec)
        await backend.provision(instance)
        await backend.provision(instance)  # a replay after a crash
        _, found, _ = kubectl("get", "networkpolicies,resourcequotas,limitranges,statefulsets",
                              "-n", own, "-o", "json")  # fmt: skip
        made = {o["metadata"]["name"]: o for o in json.loads(found)["items"]}
        assert {
            isolation.ISOLATION,
            isolation.CLUSTER_API,
            isolation.QUOTA,
            isolation.LIMITS,
        } <= set(made)
        assert (
            max(
                made[n]["metadata"]["creationTimestamp"]
                for n in (isolation.ISOLATION, isolation.CLUSTER_API, isolation.QUOTA)
            )
            <= made[name]["metadata"]["creationTimestamp"]
        ), "isolation before the pod"
        _, found, _ = kubectl("get", "endpointslice", "kubernetes", "-n", "default", "-o", "json")
        host_api = {f"{a}/32" for e in json.loads(found)["endpoints"] for a in e["addresses"]}
        egress = made[isolation.CLUSTER_API]["spec"]["egress"]
        assert {rule["to"][0]["ipBlock"]["cidr"] for rule in egress} == host_api

        async def waiting_for_kubeconfig() -> bool:
            readiness = await backend.readiness(instance)
            return readiness.message == "kubeconfig not published yet"

        await until(waiting_for_kubeconfig, "the pod to be admitted (restricted), scheduled, ready")
        _, found, _ = kubectl("get", "namespace", own, "-o", "json")
        labels = json.loads(found)["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == "restricted"

        # The syncer, as its own ServiceAccount: its work in its namespace, nothing beyond.
        token = kubectl("create", "token", f"vc-{name}", "-n", own)[1].strip()
        syncer = ("--token", token, "--kubeconfig", "/dev/null", "--server", control_plane.server,
                  "--certificate-authority", str(control_plane.pki / "ca.crt"))  # fmt: skip
        for verb, resource in (("create", "pods"), ("update", "secrets"), ("create", "events")):
            allowed = kubectl("auth", "can-i", verb, resource, "-n", own, *syncer, check=False)
            assert allowed[1].strip() == "yes", (verb, resource)
            elsewhere = kubectl("auth", "can-i", verb, resource, "-n", namespace, *syncer,
                                check=False)  # fmt: skip
            assert elsewhere[1].strip() == "no", (verb, resource)
        assert kubectl("auth", "can-i", "list", "nodes", *syncer, check=False)[1].strip() == "no"
        secret = {
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": manifests.kubeconfig_secret_name(instance), "namespace": own},
            "stringData": {"config": published_kubeconfig()},
        }  # fmt: skip
        kubectl("apply", "-f", "-", *syncer, input=json.dumps(secret))
        await _hold_a_flood(kubectl, own, namespace)

        async def ready_but_for_kube_proxy() -> bool:
            readiness = await backend.readiness(instance)
            return readiness.message == "vcluster not reachable from outside yet"

        await until(ready_but_for_kube_proxy, "readiness up to the node port")
        document = yaml.safe_load(await backend.kubeconfig(instance))
        cluster = document["clusters"][0]["cluster"]
        assert cluster["server"].startswith("https://127.0.0.1:")  # kwok's node address
        assert cluster["tls-server-name"] == f"{name}.{own}.svc"

        await backend.teardown(instance)

        async def verified() -> bool:
            return (await backend.verify_teardown(instance)).verified

        await until(verified, "the namespace to be gone")

    asyncio.run(scenario())
    assert kubectl("get", "namespace", own, check=False)[0] != 0


RESTRICTED_POD = {
    "securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                        "seccompProfile": {"type": "RuntimeDefault"}},
    "containers": [{
        "name": "c", "image": "busybox",
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }],
}  # fmt: skip


async def _hold_a_flood(kubectl: Any, own: str, lessors: str) -> None:
    """A tenant's 500 replicas (as the syncer would copy them) stop at the quota's pods, each
    given the LimitRange's bounds; a pod of lessor's namespace still schedules."""
    flood = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "flood", "namespace": own},
        "spec": {
            "replicas": 500, "selector": {"matchLabels": {"app": "flood"}},
            "template": {"metadata": {"labels": {"app": "flood"}}, "spec": RESTRICTED_POD},
        },
    }  # fmt: skip
    kubectl("apply", "-f", "-", input=json.dumps(flood))

    def refused() -> bool:
        _, found, _ = kubectl("get", "events", "-n", own, "-o", "json")
        return any("exceeded quota" in e.get("message", "") for e in json.loads(found)["items"])

    await until(_async(refused), "the quota to refuse the flood's pods")
    _, found, _ = kubectl("get", "pods", "-n", own, "-o", "json")
    pods = json.loads(found)["items"]
    assert len(pods) <= 8, "the quota's pods, the cluster's own included"
    flooded = [p for p in pods if p["metadata"].get("labels", {}).get("app") == "flood"]
    assert flooded, "pods within the quota run"
    limits = flooded[0]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["memory"] == Quota().default_memory
    theirs = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "lessor-like",
              "namespace": lessors}, "spec": RESTRICTED_POD}  # fmt: skip
    kubectl("apply", "-f", "-", input=json.dumps(theirs))

    def scheduled() -> bool:
        _, node, _ = kubectl("get", "pod", "lessor-like", "-n", lessors,
                             "-o", "jsonpath={.spec.nodeName}")  # fmt: skip
        return bool(node.strip())

    await until(_async(scheduled), "lessor's pod to schedule")


def _async(check: Any) -> Any:
    async def waited() -> bool:
        return bool(check())

    return waited
