"""What the `apiserver` backend asks the host cluster to run, checked without a cluster: the pod
passes Pod Security `restricted` (lessor's namespace enforces it), the certificate names every
address a kubeconfig may use, and neither the admin credentials nor the CA's key (kept for the
operator to sign each lease's certificate) reach the pod. The objects run
for real in kind (e2e/test_scenarios.py)."""

from __future__ import annotations

import base64

import yaml
from cryptography import x509

from lessor.operator.backends import apiserver_manifests as manifests
from lessor.operator.backends.apiserver import ApiserverBackend
from lessor.operator.backends.base import InstanceRef
from lessor.protocol.kubeconfig import kubeconfig
from lessor.resources.cluster import ApiserverBackendConfig, Backend, Exposure, Placement

INSTANCE = InstanceRef(namespace="lessor-system", name="ci-x7k2p", uid="0f1e2d3c")


def rendered(settings: ApiserverBackendConfig | None = None) -> dict[str, dict[str, object]]:
    settings = settings or ApiserverBackendConfig()
    pki = manifests.make_pki(INSTANCE, settings)
    return {m["kind"]: m for m in manifests.render(INSTANCE, settings, Placement(), pki)}


def san(pem: bytes) -> set[str]:
    names = x509.load_pem_x509_certificate(pem).extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    return {str(n.value) for n in names.value}


def test_the_pod_passes_pod_security_restricted() -> None:
    pod = rendered()["StatefulSet"]["spec"]["template"]["spec"]  # type: ignore[index]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    for container in pod["containers"]:
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert context["readOnlyRootFilesystem"] is True
    assert not any("hostPath" in volume for volume in pod["volumes"])


def test_the_pod_mounts_the_serving_keys_but_never_the_admin_credentials_or_the_ca_key() -> None:
    objects = rendered()
    secret_keys = set(objects["Secret"]["data"])  # type: ignore[arg-type]
    assert {"admin.crt", "admin.key", "ca.crt", "ca.key", "apiserver.key"} <= secret_keys
    pod = objects["StatefulSet"]["spec"]["template"]["spec"]  # type: ignore[index]
    [pki] = [v for v in pod["volumes"] if v["name"] == "pki"]
    mounted = {item["key"] for item in pki["secret"]["items"]}
    assert mounted == secret_keys - {"admin.crt", "admin.key", "ca.key"}


def test_the_certificate_names_the_service_and_a_chosen_host() -> None:
    default = manifests.make_pki(INSTANCE, ApiserverBackendConfig())
    assert manifests.service_host(INSTANCE) in san(default["apiserver.crt"])
    assert "ci.example.com" not in san(default["apiserver.crt"])
    chosen = manifests.make_pki(
        INSTANCE, ApiserverBackendConfig(exposure=Exposure(host="ci.example.com"))
    )
    assert "ci.example.com" in san(chosen["apiserver.crt"])
    admin = x509.load_pem_x509_certificate(chosen["admin.crt"])
    assert "O=system:masters" in admin.subject.rfc4514_string()


def test_a_node_address_kubeconfig_checks_the_certificate_against_the_service_name() -> None:
    document = yaml.safe_load(
        kubeconfig(
            "c", "https://172.18.0.2:31443", "u", {"token": "t"},
            ca_data=base64.b64encode(b"ca").decode(), server_name="apiserver-c.ns.svc",
        )
    )  # fmt: skip
    assert document["clusters"][0]["cluster"]["tls-server-name"] == "apiserver-c.ns.svc"
    plain = yaml.safe_load(kubeconfig("c", "https://h:1", "u", {"token": "t"}))
    assert "tls-server-name" not in plain["clusters"][0]["cluster"]


def test_a_pool_spec_reaches_the_backend_and_no_block_means_the_blocks_defaults() -> None:
    spec = Backend.model_validate(
        {"type": "apiserver", "apiserver": {"cpu": "50m", "exposure": {"host": "nodes.example"}}}
    )
    backend = ApiserverBackend(None, spec)  # type: ignore[arg-type]
    assert (backend.settings.cpu, backend.host) == ("50m", "nodes.example")
    default = ApiserverBackend(None, Backend(type="apiserver"))  # type: ignore[arg-type]
    assert default.settings == ApiserverBackendConfig()
