"""How a cluster living in the host cluster is reached from outside it: a Service in front of its
API server, of type NodePort (a node's address, or the name an administrator gives for the nodes)
or LoadBalancer (the address the cloud's load balancer gets), with the certificate checked against
the Service's DNS name (`tls-server-name`) whatever address the kubeconfig connects to; or a host
name of its own on a shared Gateway (`Route`): a TLSRoute passes the TLS connection, unopened,
to the cluster's Service, chosen by the name the client asks for (SNI), so one address serves
every cluster and each is still verified against its own CA.

Shared by the backends whose clusters are pods (`apiserver`, `k3s`, `vcluster`): where the
kubeconfig points, and whether a client can get there yet. A pod being Ready is not enough: the
port answers only once the Service's endpoints have reached kube-proxy (and, for a load balancer,
once it has an address and forwards), and a kubeconfig handed out before would be refused.

Which fits which network: NodePort when clients reach the nodes (CI runners beside the cluster or
in its network; `exposure.host` a DNS name or address in front of the nodes); LoadBalancer where
clients reach only load balancers (a cloud, or MetalLB), one per cluster; TLSRoute where one
address is all there is (one load balancer, one firewall opening, one wildcard DNS record and
its certificate-free passthrough), at the cost of a Gateway implementation installed.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass

from lessor.operator.backends.owned import Manifest
from lessor.operator.runtime.client import KubeClient
from lessor.resources.cluster import Exposure

TLS_ROUTES = "apis/gateway.networking.k8s.io/v1/namespaces/{ns}/tlsroutes"


@dataclass(frozen=True)
class Route:
    """Exposure through a Gateway's TLS listener in Passthrough mode."""

    gateway: str
    gateway_namespace: str
    section: str | None
    domain: str
    port: int

    def hostname(self, label: str) -> str:
        """The cluster's own name: a DNS label unique to it (its namespace) under the domain."""
        return f"{label}.{self.domain}"

    def manifest(self, name: str, namespace: str, hostname: str, service_port: int) -> Manifest:
        """The TLSRoute from `hostname` on the Gateway to port `service_port` of the Service
        `name` (the route takes the Service's name)."""
        parent: Manifest = {"name": self.gateway, "namespace": self.gateway_namespace}
        if self.section:
            parent["sectionName"] = self.section
        return {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "TLSRoute",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "parentRefs": [parent],
                "hostnames": [hostname],
                "rules": [{"backendRefs": [{"name": name, "port": service_port}]}],
            },
        }


def route(settings: Exposure) -> Route | None:
    """The Gateway route a pool's `exposure` asks for, or None: it asks for its own Service."""
    if settings.gateway is None or settings.domain is None:
        return None
    gateway = settings.gateway
    return Route(
        gateway.name, gateway.namespace, gateway.section_name, settings.domain, settings.port
    )


def service_type(settings: Exposure) -> str:
    """The type of the cluster's own Service: behind a Gateway the Service need not be reachable
    from outside by itself."""
    return "ClusterIP" if settings.type == "TLSRoute" else settings.type


def shape(service: Manifest, settings: Exposure) -> Manifest:
    """`service` with the pool's annotations (a cloud's settings for it), and its source ranges
    where a load balancer admits clients (a NodePort is reached through the nodes, whose
    firewall decides)."""
    if settings.annotations:
        metadata = service["metadata"]
        metadata["annotations"] = {**metadata.get("annotations", {}), **settings.annotations}
    if settings.source_ranges and service["spec"]["type"] == "LoadBalancer":
        service["spec"]["loadBalancerSourceRanges"] = list(settings.source_ranges)
    return service


async def endpoint(
    client: KubeClient, namespace: str, service: str, pod: str, host: str | None
) -> tuple[str, int] | str:
    """(host, port) clients connect to, or why there is none yet, by the Service's type.
    `host`, the name or address the administrator gave, replaces the address found."""
    found = await client.get(f"/api/v1/namespaces/{namespace}/services/{service}")
    spec = found.get("spec", {})
    port = (spec.get("ports") or [{}])[0]
    if spec.get("type") == "LoadBalancer":
        ingress = (found.get("status", {}).get("loadBalancer", {}).get("ingress") or [{}])[0]
        address = ingress.get("ip") or ingress.get("hostname")
        if not address:
            return "no load balancer address yet"
        return host or str(address), int(port["port"])
    node_port = port.get("nodePort")
    if not node_port:
        return "no node port allocated yet"
    if host:
        return host, int(node_port)
    running = await client.get(f"/api/v1/namespaces/{namespace}/pods/{pod}")
    node = running.get("status", {}).get("hostIP")
    if not node:
        return "the cluster's pod is not on a node yet"
    return str(node), int(node_port)


def server_url(host: str, port: int) -> str:
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


def answers_through(host: str, port: int, ca: str, server_name: str) -> bool:
    """Whether https://host:port answers HTTP behind a certificate of `ca` issued for
    `server_name`, as a kubeconfig with that `tls-server-name` would see it; bounded in time
    and in what is read. Any status counts: this is about reaching the cluster (its health is
    the pod's readiness probe), and a tenant may well have closed /readyz to anonymous callers."""
    try:
        context = ssl.create_default_context(cadata=ca)
        with (
            socket.create_connection((host, port), timeout=2) as raw,
            context.wrap_socket(raw, server_hostname=server_name) as connection,
        ):
            connection.sendall(
                f"GET /readyz HTTP/1.1\r\nHost: {server_name}\r\nConnection: close\r\n\r\n".encode()
            )
            status_line = connection.recv(64).split(b"\r\n", 1)[0]
    except (OSError, ValueError):
        return False
    return status_line.startswith(b"HTTP/1.1 ")
