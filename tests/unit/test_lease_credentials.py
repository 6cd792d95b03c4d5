"""A lease's own credential, checked without a cluster: the certificate lessor signs ends at the
lease's expiry to the second; the CertificateSigningRequest a k3s or vcluster cluster signs asks
for the right signer, usages and duration (the signer's 600 s floor and its 5-minute backdate of
long certificates accounted for); the kubeconfig carries the cluster's address and CA and the
lease's certificate, and nothing else the admin kubeconfig held. The CSR path runs against a real
kube-controller-manager in tests/integration/test_lease_credentials.py, and for vcluster in kind
(e2e/test_backend_conformance.py)."""

from __future__ import annotations

import base64
import datetime

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from lessor.controlplane.pki import CertificateAuthority, KeyPair, certificate_request
from lessor.operator.backends import csr_signing
from lessor.operator.backends.base import BackendError, LeaseRef
from lessor.operator.backends.lease_credentials import GROUP, kubeconfig_for, parsed, user_name

NOW = datetime.datetime(2026, 11, 27, 10, 0, 0, 400000, tzinfo=datetime.UTC)


def subject(name: x509.Name) -> tuple[str, str]:
    common = name.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    organization = name.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value
    return str(common), str(organization)


def test_a_certificate_lessor_signs_ends_at_the_lease_expiry_to_the_second() -> None:
    authority = CertificateAuthority("a cluster")
    again = CertificateAuthority.from_pem(authority.cert_pem, authority.key_pem)
    now = datetime.datetime.now(datetime.UTC)
    expires = (now + datetime.timedelta(hours=1)).replace(microsecond=999999)
    pair = again.issue(user_name("pr-1"), organization=GROUP, client=True, not_after=expires)
    leaf = x509.load_pem_x509_certificate(pair.cert_pem)
    assert leaf.not_valid_after_utc == expires.replace(microsecond=0)
    assert subject(leaf.subject) == ("lessor-lease:pr-1", "lessor:lease-holders")
    # Signed by the cluster's CA, reloaded from PEM as the backends read it.
    leaf.verify_directly_issued_by(x509.load_pem_x509_certificate(authority.cert_pem))


def test_a_lease_met_after_its_expiry_gets_a_certificate_already_expired_not_an_error() -> None:
    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
    pair = CertificateAuthority("a cluster").issue("late", client=True, not_after=past)
    leaf = x509.load_pem_x509_certificate(pair.cert_pem)
    assert leaf.not_valid_before_utc < leaf.not_valid_after_utc <= past


@pytest.mark.parametrize(
    ("left", "asked"),
    [
        (datetime.timedelta(seconds=30), 600),  # the signer's floor: it outlives such a lease
        (datetime.timedelta(minutes=10), 600),
        (datetime.timedelta(hours=1, seconds=0.9), 3600),  # down to the second, never after
        (datetime.timedelta(hours=8) - datetime.timedelta(seconds=1), 8 * 3600 - 1),
        # From 8 h the signer ends a certificate 5 minutes early: asked for 5 minutes more.
        (datetime.timedelta(hours=8), 8 * 3600 + 300),
        (datetime.timedelta(days=3), 3 * 86400 + 300),
    ],
)
def test_the_duration_asked_of_the_cluster_ends_the_certificate_with_the_lease(
    left: datetime.timedelta, asked: int
) -> None:
    assert csr_signing.expiration_seconds(NOW + left, NOW) == asked


def test_the_signing_request_names_the_client_signer_and_the_lease() -> None:
    lease = LeaseRef("pr-1234", NOW + datetime.timedelta(minutes=30))
    request = certificate_request(user_name(lease.name), GROUP)
    manifest = csr_signing.request_manifest(lease, request, NOW)
    assert manifest["metadata"] == {
        "generateName": "lessor-lease-pr-1234-",
        "labels": {"lessor.dev/lease": "pr-1234"},
    }
    spec = manifest["spec"]
    assert spec["signerName"] == "kubernetes.io/kube-apiserver-client"
    assert spec["expirationSeconds"] == 1800
    assert spec["usages"] == ["digital signature", "client auth"]
    csr = x509.load_pem_x509_csr(base64.b64decode(spec["request"]))
    assert csr.is_signature_valid
    # system:masters would be refused by CertificateSubjectRestriction, and bound by nothing.
    assert subject(csr.subject) == ("lessor-lease:pr-1234", "lessor:lease-holders")


def test_the_approval_adds_its_condition_to_what_the_request_has() -> None:
    lease = LeaseRef("pr-1", NOW)
    created = {"metadata": {"name": "lessor-lease-pr-1-abcde", "resourceVersion": "7"}}
    body = csr_signing.approved(created, lease)
    assert body["metadata"] == created["metadata"], "the resourceVersion fences the approval"
    [condition] = body["status"]["conditions"]
    assert (condition["type"], condition["status"]) == ("Approved", "True")
    assert "pr-1" in condition["message"]
    assert "status" not in created, "the request read is left as it was"


def admin_kubeconfig(cluster: dict[str, str]) -> str:
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "default", "cluster": cluster}],
        "users": [{"name": "admin", "user": {
            "client-certificate-data": "YWRtaW4tY2VydA==", "client-key-data": "YWRtaW4ta2V5",
            "exec": {"command": "steal"}}}],
        "contexts": [{"name": "default", "context": {"cluster": "default", "user": "admin"}}],
        "current-context": "default",
    })  # fmt: skip


def test_the_leases_kubeconfig_keeps_the_clusters_address_and_ca_and_nothing_of_the_admin() -> None:
    admin = admin_kubeconfig({
        "server": "https://172.18.0.2:31443", "certificate-authority-data": "Y2E=",
        "tls-server-name": "apiserver-c.lessor-system.svc", "proxy-url": "http://elsewhere:3128",
    })  # fmt: skip
    lease = LeaseRef("pr-1", NOW)
    document = yaml.safe_load(kubeconfig_for(parsed(admin), lease, KeyPair(b"cert", b"key")))
    [cluster] = document["clusters"]
    assert cluster["cluster"] == {
        "server": "https://172.18.0.2:31443",
        "certificate-authority-data": "Y2E=",
        "tls-server-name": "apiserver-c.lessor-system.svc",
    }
    [user] = document["users"]
    assert user == {
        "name": "lessor-lease:pr-1",
        "user": {"client-certificate-data": "Y2VydA==", "client-key-data": "a2V5"},
    }
    assert document["current-context"] == "lessor-pr-1"


def test_an_admin_kubeconfig_without_a_server_issues_nothing() -> None:
    with pytest.raises(BackendError, match="names no server"):
        kubeconfig_for(parsed("clusters: []"), LeaseRef("pr-1", NOW), KeyPair(b"c", b"k"))
    with pytest.raises(BackendError, match="not a kubeconfig"):
        parsed("- a list")
