"""A lease's own credential for its cluster: what its holder is handed instead of the cluster's
admin kubeconfig, which stays in lessor's namespace.

Each is a fresh key and a client certificate whose subject names the lease (CN
`lessor-lease:<lease>`, O `lessor:lease-holders`) and whose notAfter is the lease's expiry, so the
credential dies with the lease even where its cluster outlives it (an operator down at the
expiry, a teardown held and quarantined). The group is bound to `cluster-admin` inside the
cluster by the ClusterRoleBinding `lessor:lease-holders`, made with the admin credential before
the first certificate is handed out: the holder is administrator inside, as the spec promises,
yet not in `system:masters` (which no RBAC binding grants or takes away, and which the CSR API
refuses to sign for).

Who signs: lessor itself for the clusters whose CA it made and keeps (`local`: the key in the
cluster's directory; `apiserver`: in the cluster's PKI Secret), the cluster's own
kube-controller-manager for the others (lessor.operator.backends.csr_signing). The kubeconfig is
built here from the admin kubeconfig's server, CA and `tls-server-name` only, so nothing else a
cluster published (an exec plugin, a proxy) reaches the tenant.
"""

from __future__ import annotations

import base64

import yaml

from lessor.controlplane.pki import CertificateAuthority, KeyPair, certificate_request
from lessor.operator.backends import csr_signing
from lessor.operator.backends.base import BackendError, LeaseRef
from lessor.operator.backends.published_kubeconfig import Kubeconfig, cluster_entry
from lessor.operator.backends.tenant_api import TenantApi
from lessor.protocol.json_object import Json
from lessor.protocol.kubeconfig import kubeconfig

GROUP = "lessor:lease-holders"
BINDINGS = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
BINDING: Json = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRoleBinding",
    "metadata": {"name": GROUP, "labels": {"app.kubernetes.io/managed-by": "lessor"}},
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                "name": "cluster-admin"},
    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": GROUP}],
}  # fmt: skip


def user_name(lease: str) -> str:
    return f"lessor-lease:{lease}"


def parsed(admin: str) -> Kubeconfig:
    """The admin kubeconfig as data, read once for the requests and the lease's kubeconfig."""
    try:
        document = yaml.safe_load(admin)
    except yaml.YAMLError:
        document = None
    if not isinstance(document, dict):
        raise BackendError("the cluster's admin kubeconfig is not a kubeconfig")
    return document


def kubeconfig_for(admin: Kubeconfig, lease: LeaseRef, pair: KeyPair) -> str:
    """The lease's kubeconfig: the admin kubeconfig's cluster, the lease's certificate."""
    cluster = cluster_entry(admin)
    if not cluster.get("server"):
        raise BackendError("the cluster's admin kubeconfig names no server")
    credentials = {
        "client-certificate-data": base64.b64encode(pair.cert_pem).decode(),
        "client-key-data": base64.b64encode(pair.key_pem).decode(),
    }
    return kubeconfig(
        f"lessor-{lease.name}",
        str(cluster["server"]),
        user_name(lease.name),
        credentials,
        ca_data=cluster.get("certificate-authority-data"),
        server_name=cluster.get("tls-server-name"),
    )


async def _admit_lease_holders(api: TenantApi) -> None:
    """The binding that makes lease holders administrators; kept when it exists (a cluster
    leased before, a replay)."""
    await api.create(BINDINGS, BINDING)


async def signed_by_lessor(
    admin: str, ca_cert_pem: bytes, ca_key_pem: bytes, lease: LeaseRef
) -> str:
    """A kubeconfig for `lease` whose certificate lessor signs with the cluster's CA."""
    try:
        authority = CertificateAuthority.from_pem(ca_cert_pem, ca_key_pem)
    except ValueError as error:
        raise BackendError(f"the cluster's CA is unusable: {error}") from None
    pair = authority.issue(
        user_name(lease.name), organization=GROUP, client=True, not_after=lease.expires_at
    )
    document = parsed(admin)
    async with TenantApi(document) as api:
        await _admit_lease_holders(api)
    return kubeconfig_for(document, lease, pair)


async def signed_by_the_cluster(admin: str, lease: LeaseRef) -> str:
    """A kubeconfig for `lease` whose certificate the cluster signs (csr_signing)."""
    request = certificate_request(user_name(lease.name), GROUP)
    document = parsed(admin)
    async with TenantApi(document) as api:
        await _admit_lease_holders(api)
        certificate = await csr_signing.signed_by_the_cluster(api, lease, request)
    return kubeconfig_for(document, lease, KeyPair(certificate, request.key_pem))
