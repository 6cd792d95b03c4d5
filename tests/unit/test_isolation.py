"""What a tenant's cluster may reach, and which privileged pools an operator serves (the objects
as rendered; they are admitted under the shipped RBAC in tests/integration/test_backend_*.py and
enforced in kind in e2e)."""

from __future__ import annotations

import ipaddress

import pytest
from pydantic import ValidationError

from lessor.operator.backends import isolation
from lessor.operator.backends.base import InstanceRef
from lessor.operator.backends.registry import PRIVILEGED_DISABLED, UNPINNED, unavailable
from lessor.operator.backends.vcluster import VclusterBackend
from lessor.resources.cluster import Backend, EgressRule, Network

INSTANCE = InstanceRef("lessor-system", "ci-abc", "0123456789abcdef")
HOST_API = [("172.18.0.2", 6443)]


def _policies(network: Network) -> dict[str, dict[str, object]]:
    rendered = isolation.network_policies(INSTANCE, "lessor-ci-abc", network, 8443, HOST_API)
    return {p["metadata"]["name"]: p["spec"] for p in rendered}


def _reachable(spec: dict[str, object], address: str) -> bool:
    """Whether an egress ipBlock rule of `spec` lets a pod open a connection to `address`."""
    ip = ipaddress.ip_address(address)
    for rule in spec["egress"]:  # type: ignore[attr-defined]
        for peer in rule.get("to", []):
            block = peer.get("ipBlock")
            if block is None or ip.version != ipaddress.ip_network(block["cidr"]).version:
                continue
            inside = ip in ipaddress.ip_network(block["cidr"])
            if inside and not any(ip in ipaddress.ip_network(c) for c in block.get("except", [])):
                return True
    return False


def test_by_default_a_tenant_reaches_the_internet_and_nothing_of_the_host() -> None:
    spec = _policies(Network())[isolation.ISOLATION]
    assert spec["podSelector"] == {} and spec["policyTypes"] == ["Ingress", "Egress"]
    assert _reachable(spec, "8.8.8.8") and _reachable(spec, "2001:4860::8888")
    for private in ("169.254.169.254", "10.244.1.7", "10.96.0.1", "172.18.0.2", "192.168.1.1",
                    "100.64.0.1", "127.0.0.1", "fd00::1", "fe80::1"):  # fmt: skip
        assert not _reachable(spec, private), private
    assert spec["ingress"] == [{"from": [{"podSelector": {}}]}], "nothing from outside comes in"


def test_a_pool_may_open_a_range_and_close_everything() -> None:
    opened = Network(egress=[EgressRule(cidr="10.20.0.0/16", ports=[5432])])
    spec = _policies(opened)[isolation.ISOLATION]
    assert _reachable(spec, "10.20.3.4") and not _reachable(spec, "8.8.8.8")
    assert {"protocol": "TCP", "port": 5432} in spec["egress"][-1]["ports"]  # type: ignore[index]
    closed = _policies(Network(egress=[]))[isolation.ISOLATION]
    assert not _reachable(closed, "8.8.8.8")


def test_only_the_clusters_own_pod_is_reachable_from_outside_and_reaches_the_host_api() -> None:
    spec = _policies(Network())[isolation.CLUSTER_API]
    selector = spec["podSelector"]
    assert selector["matchLabels"]["lessor.dev/instance-uid"] == INSTANCE.uid  # type: ignore[index]
    assert {"key": isolation.SYNCED_POD, "operator": "DoesNotExist"} in selector[
        "matchExpressions"  # type: ignore[index]
    ], "a pod a tenant has vcluster sync is never the cluster's own"
    assert spec["ingress"] == [{"ports": [{"protocol": "TCP", "port": 8443}]}]
    assert _reachable(spec, "172.18.0.2") and not _reachable(spec, "172.18.0.3")


def test_k3s_is_served_only_by_an_operator_that_allows_it_on_nodes_of_its_own() -> None:
    k3s = Backend.model_validate({"type": "k3s"})
    assert unavailable(k3s, test_backends=False, privileged=False) == PRIVILEGED_DISABLED
    assert unavailable(k3s, test_backends=False, privileged=True) == UNPINNED
    pinned = Backend.model_validate(
        {"type": "k3s", "placement": {"nodeSelector": {"lessor.dev/tenant-clusters": "k3s"}}}
    )
    assert unavailable(pinned, test_backends=False, privileged=True) is None
    shared = Backend.model_validate({"type": "k3s", "placement": {"sharedNodes": True}})
    assert unavailable(shared, test_backends=False, privileged=True) is None
    vcluster = Backend.model_validate({"type": "vcluster"})
    assert unavailable(vcluster, test_backends=False, privileged=False) is None


def test_a_memory_limit_below_the_request_is_refused() -> None:
    with pytest.raises(ValidationError, match="memoryLimit is below memory"):
        Backend.model_validate({"type": "k3s", "k3s": {"memory": "3Gi", "memoryLimit": "2Gi"}})
    Backend.model_validate(
        {"type": "vcluster", "vcluster": {"memory": "1Gi", "memoryLimit": "1Gi"}}
    )


def test_a_load_balancer_admits_only_the_pools_source_ranges() -> None:
    exposure = {"type": "LoadBalancer", "sourceRanges": ["203.0.113.0/24"],
                "annotations": {"cloud.example/internal": "true"}}  # fmt: skip
    backend = Backend.model_validate({"type": "vcluster", "vcluster": {"exposure": exposure}})
    rendered = VclusterBackend(None, backend).render(INSTANCE, "lessor-ci-abc")  # type: ignore[arg-type]
    services = [o for o in rendered if o["kind"] == "Service"]
    [service] = services
    assert service["spec"]["loadBalancerSourceRanges"] == ["203.0.113.0/24"]
    assert service["metadata"]["annotations"]["cloud.example/internal"] == "true"
    with pytest.raises(ValidationError, match="sourceRanges is for type LoadBalancer"):
        Backend.model_validate(
            {"type": "k3s", "k3s": {"exposure": {"type": "NodePort", "sourceRanges": ["::/0"]}}}
        )
