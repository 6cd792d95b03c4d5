"""Exposure through a Gateway (TLSRoute), checked without a cluster: the pool's settings reach the
backend, the cluster's certificate names its host name, its Service stays inside, and its route
sends that host name to it. A Gateway passing the connection through is proven in kind
(e2e/test_backend_conformance.py)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from lessor.operator.backends import vcluster_manifests
from lessor.operator.backends.base import InstanceRef
from lessor.operator.backends.exposure import Route
from lessor.operator.backends.instance_namespace import namespace_name
from lessor.operator.backends.k3s import K3sBackend
from lessor.operator.backends.vcluster import VclusterBackend
from lessor.resources.cluster import Backend

INSTANCE = InstanceRef(namespace="lessor-system", name="ci-x7k2p", uid="0f1e2d3c-aaaa")
OWN = namespace_name(INSTANCE)
ROUTE = {
    "type": "TLSRoute",
    "gateway": {"name": "clusters", "namespace": "gateways", "sectionName": "tls"},
    "domain": "clusters.example.com",
    "port": 8443,
}


def of_kind(manifests: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [found] = [m for m in manifests if m["kind"] == kind]
    return found


def test_a_routed_vcluster_names_its_host_in_its_certificate_and_keeps_its_service_inside() -> None:
    backend = VclusterBackend(
        None,  # type: ignore[arg-type]
        Backend.model_validate({"type": "vcluster", "vcluster": {"exposure": ROUTE}}),
    )
    assert backend.route == Route("clusters", "gateways", "tls", "clusters.example.com", 8443)
    manifests = backend.render(INSTANCE, OWN)
    assert of_kind(manifests, "Service")["spec"]["type"] == "ClusterIP"
    secret = of_kind(manifests, "Secret")["stringData"]["config.yaml"]
    assert f"{OWN}.clusters.example.com" in secret


def test_a_routed_k3s_names_its_host_in_its_certificate() -> None:
    spec = Backend.model_validate({"type": "k3s", "k3s": {"exposure": ROUTE}})
    manifests = K3sBackend(None, spec).render(INSTANCE, OWN)  # type: ignore[arg-type]
    assert of_kind(manifests, "Service")["spec"]["type"] == "ClusterIP"
    [k3s] = of_kind(manifests, "StatefulSet")["spec"]["template"]["spec"]["containers"][:1]
    assert f"--tls-san={OWN}.clusters.example.com" in k3s["args"]


def test_the_route_sends_the_clusters_host_name_to_its_service() -> None:
    backend = VclusterBackend(
        None,  # type: ignore[arg-type]
        Backend.model_validate({"type": "vcluster", "vcluster": {"exposure": ROUTE}}),
    )
    assert backend.route is not None
    layout = backend.layout(INSTANCE, OWN)
    route = backend.route.manifest(
        layout.service, OWN, backend.route.hostname(OWN), layout.service_port
    )
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert route["metadata"] == {"name": layout.service, "namespace": OWN}
    assert route["spec"]["parentRefs"] == [
        {"name": "clusters", "namespace": "gateways", "sectionName": "tls"}
    ]
    assert route["spec"]["hostnames"] == [f"{OWN}.clusters.example.com"]
    assert route["spec"]["rules"] == [
        {"backendRefs": [{"name": layout.service, "port": vcluster_manifests.SERVICE_PORT}]}
    ]
    assert len(f"{OWN}.clusters.example.com".split(".")[0]) <= 63, "one DNS label"


@pytest.mark.parametrize(
    ("backend", "message"),
    [
        ({"type": "vcluster", "vcluster": {"exposure": {"type": "TLSRoute"}}}, "only with"),
        (
            {"type": "k3s", "k3s": {"exposure": {**ROUTE, "type": "NodePort"}}},
            "only with",
        ),
        ({"type": "apiserver", "apiserver": {"exposure": ROUTE}}, "NodePort or LoadBalancer"),
    ],
)
def test_route_settings_that_cannot_work_are_refused(backend: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Backend.model_validate(backend)
