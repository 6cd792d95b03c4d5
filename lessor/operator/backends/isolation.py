"""What keeps one tenant's cluster from the others, from lessor and from the host: the
NetworkPolicies, ResourceQuota and LimitRange of a cluster's own namespace.

They are created before anything that runs (lessor.operator.backends.pod_cluster), so no pod of
the cluster ever runs without them. NetworkPolicies only allow, and what several allow adds up,
so two policies say it all:

- `lessor-isolation` selects every pod of the namespace: traffic among them is allowed, and out
  of it only DNS (the host's kube-dns) and the pool's `network.egress` ranges (by default the
  public internet: not the private, shared, link-local or loopback ranges, where the host's
  nodes, pods, Services, lessor and the cloud metadata address are). Nothing comes in from
  outside the namespace.
- `lessor-cluster-api` selects the cluster's own pod (never a pod a vcluster syncs from its
  tenants: those carry vcluster's managed-by label): its API port is open to every source,
  since the exposure (a NodePort, a load balancer, a Gateway's pods) is what reaches it, and the
  host's API server (the addresses of the `kubernetes` Service's EndpointSlice) is reachable on
  its port, since vcluster's syncer and k3s's kubeconfig publisher work through it.

vcluster's own `sync.toHost.networkPolicies` stays off: a tenant's policy copied into this
namespace would add to what these allow (policies are a union), and so could undo the isolation.

The quota bounds what the namespace's pods may take of the host in all; the LimitRange gives a
container that says nothing a request and a limit, so that the quota can count it.
"""

from __future__ import annotations

import ipaddress

from lessor.operator.backends.base import BackendError, InstanceRef
from lessor.operator.backends.owned import Manifest, labels, metadata
from lessor.operator.runtime.client import ApiError, KubeClient
from lessor.resources.cluster import Network, Quota

ISOLATION = "lessor-isolation"
CLUSTER_API = "lessor-cluster-api"
QUOTA = "lessor-quota"
LIMITS = "lessor-limits"
HOST_API_SLICE = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes"
# Every pod a vcluster syncs from its virtual cluster carries this label; the cluster's own pod
# never does.
SYNCED_POD = "vcluster.loft.sh/managed-by"
DNS: list[Manifest] = [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
KUBE_DNS: Manifest = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
}
# What a container that sets no request asks for: small, so that tenants' pods schedule.
DEFAULT_REQUEST = {"cpu": "50m", "memory": "64Mi", "ephemeral-storage": "64Mi"}


async def host_api(client: KubeClient) -> list[tuple[str, int]]:
    """The addresses and port the host's API server answers on, as its pods' traffic reaches it
    (after the Service's translation, where NetworkPolicies look)."""
    try:
        found = await client.get(HOST_API_SLICE)
    except ApiError as error:
        raise BackendError(
            f"reading the host API server's addresses failed: {error} (the operator needs "
            "manifests/instance-namespaces)"
        ) from error
    ports = [int(p["port"]) for p in found.get("ports") or [] if p.get("port")]
    addresses = [
        str(address)
        for endpoint in found.get("endpoints") or []
        for address in endpoint.get("addresses") or []
    ]
    if not ports or not addresses:
        raise BackendError("the host API server's EndpointSlice names no address")
    return [(address, ports[0]) for address in addresses]


def _host(address: str) -> str:
    return f"{address}/{ipaddress.ip_address(address).max_prefixlen}"


def _egress(network: Network) -> list[Manifest]:
    rules: list[Manifest] = []
    for rule in network.egress:
        block: Manifest = {"cidr": rule.cidr}
        if rule.except_:
            block["except"] = list(rule.except_)
        allowed: Manifest = {"to": [{"ipBlock": block}]}
        if rule.ports:
            allowed["ports"] = [
                {"protocol": protocol, "port": port}
                for port in rule.ports
                for protocol in ("TCP", "UDP")
            ]
        rules.append(allowed)
    return rules


def network_policies(
    instance: InstanceRef,
    namespace: str,
    network: Network,
    api_port: int,
    host_api_peers: list[tuple[str, int]],
) -> list[Manifest]:
    """The namespace's two NetworkPolicies (the module's docstring says what each allows)."""
    own_pod: Manifest = {
        "matchLabels": labels(instance),
        "matchExpressions": [{"key": SYNCED_POD, "operator": "DoesNotExist"}],
    }
    within: Manifest = {"podSelector": {}}
    return [
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": metadata(instance, ISOLATION, namespace),
            "spec": {
                "podSelector": {},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"from": [within]}],
                "egress": [
                    {"to": [within]},
                    {"to": [KUBE_DNS], "ports": DNS},
                    *_egress(network),
                ],
            },
        },
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": metadata(instance, CLUSTER_API, namespace),
            "spec": {
                "podSelector": own_pod,
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"ports": [{"protocol": "TCP", "port": api_port}]}],
                "egress": [
                    {
                        "to": [{"ipBlock": {"cidr": _host(address)}}],
                        "ports": [{"protocol": "TCP", "port": port}],
                    }
                    for address, port in host_api_peers
                ],
            },
        },
    ]


def quota(instance: InstanceRef, namespace: str, bounds: Quota) -> list[Manifest]:
    """The namespace's ResourceQuota and LimitRange."""
    return [
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": metadata(instance, QUOTA, namespace),
            "spec": {
                "hard": {
                    "pods": str(bounds.pods),
                    "requests.cpu": bounds.cpu,
                    "requests.memory": bounds.memory,
                    "limits.memory": bounds.memory,
                    "requests.ephemeral-storage": bounds.ephemeral_storage,
                    "persistentvolumeclaims": str(bounds.persistent_volume_claims),
                    "requests.storage": bounds.storage,
                }
            },
        },
        {
            "apiVersion": "v1",
            "kind": "LimitRange",
            "metadata": metadata(instance, LIMITS, namespace),
            "spec": {
                "limits": [
                    {
                        "type": "Container",
                        "defaultRequest": DEFAULT_REQUEST,
                        "default": {
                            "memory": bounds.default_memory,
                            "ephemeral-storage": bounds.default_ephemeral_storage,
                        },
                    }
                ]
            },
        },
    ]
