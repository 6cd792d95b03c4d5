"""A client certificate signed by the cluster itself, through its certificates.k8s.io/v1 API: how a
lease of a cluster whose CA lessor does not hold (k3s, vcluster) gets a credential of its own.

The request names the signer `kubernetes.io/kube-apiserver-client`, which the cluster's
kube-controller-manager serves with the CA its API server trusts for clients, and
`expirationSeconds` so that the certificate ends with the lease. The signer never signs for less
than 600 s (the API refuses a shorter request; kube-controller-manager's floor is the same): a
lease with less time left gets a certificate that outlives it by the difference, at most ten
minutes, which only the cluster's teardown then cuts short. It signs from its own clock, when it
gets to it (well under a second after the approval), so the end is the lease's expiry to that
precision, and never past the cluster's `--cluster-signing-duration` (a year by default).

The operator approves its own request with the cluster's admin credential (as `kubectl
certificate approve` does): nothing else in the cluster approves this signer's requests. Each
attempt is a new request with a new key under a generated name, so a replay after a crash never
reuses one whose key died with the crashed process; what is left of such an attempt is an unused
request that the cluster's CSR cleaner deletes within the hour.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import re

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import CertificatePublicKeyTypes

from lessor.controlplane.pki import SigningRequest
from lessor.operator.backends.base import BackendError, LeaseRef
from lessor.operator.backends.tenant_api import TenantApi
from lessor.protocol.json_object import Json
from lessor.protocol.timestamps import utcnow
from lessor.resources import labels as keys

SIGNER = "kubernetes.io/kube-apiserver-client"
REQUESTS = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
MINIMUM = datetime.timedelta(seconds=600)
# kube-controller-manager ends a certificate of at least SHORT `BACKDATE` early (its notBefore is
# backdated by as much for clock skew); below SHORT it ends exactly `expirationSeconds` on.
SHORT = datetime.timedelta(hours=8)
BACKDATE = datetime.timedelta(minutes=5)
WAIT = 30.0


def expiration_seconds(expires_at: datetime.datetime, now: datetime.datetime) -> int:
    """What to ask for so that the signer's certificate ends at `expires_at`, or as soon after
    it as the signer allows. Whole seconds, rounded down: it ends up to a second early, and late
    only by however long the signer takes to get to it."""
    left = expires_at - now
    if left >= SHORT:
        left += BACKDATE
    return int(max(left, MINIMUM).total_seconds())


def _prefix(lease: LeaseRef) -> str:
    """Of each request's name, the rest being the cluster's (`generateName`)."""
    return f"lessor-lease-{lease.name}-"


def request_manifest(lease: LeaseRef, request: SigningRequest, now: datetime.datetime) -> Json:
    """The CertificateSigningRequest for one lease's certificate."""
    return {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {
            "generateName": _prefix(lease),
            "labels": {keys.LEASE: lease.name},
        },
        "spec": {
            "request": base64.b64encode(request.csr_pem).decode(),
            "signerName": SIGNER,
            "expirationSeconds": expiration_seconds(lease.expires_at, now),
            "usages": ["digital signature", "client auth"],
        },
    }


def approved(created: Json, lease: LeaseRef) -> Json:
    """The request with the Approved condition, as the `approval` subresource takes it."""
    condition = {
        "type": "Approved",
        "status": "True",
        "reason": "LessorLease",
        "message": f"the credential of lease {lease.name}, issued by lessor",
    }
    status = created.get("status") or {}
    conditions = [*status.get("conditions", []), condition]
    return {**created, "status": {**status, "conditions": conditions}}


async def signed_by_the_cluster(api: TenantApi, lease: LeaseRef, request: SigningRequest) -> bytes:
    """The certificate (PEM) the cluster signs for `request`; BackendError when it refuses, or
    does not sign within WAIT seconds."""
    created = await api.create(REQUESTS, request_manifest(lease, request, utcnow()))
    if created is None:
        raise BackendError("the generated name of a certificate request was taken; trying again")
    name = (created.get("metadata") or {}).get("name")
    generated = re.escape(_prefix(lease)) + "[a-z0-9]{1,16}"
    if not isinstance(name, str) or not re.fullmatch(generated, name):
        raise BackendError(f"the cluster named the certificate request {str(name)[:100]!r}")
    await api.replace(f"{REQUESTS}/{name}/approval", approved(created, lease))
    certificate = await _issued(api, name)
    wanted = x509.load_pem_x509_csr(request.csr_pem).public_key()
    try:
        issued = x509.load_pem_x509_certificate(certificate).public_key()
    except ValueError as error:
        raise BackendError(f"certificate request {name}: not a certificate ({error})") from None
    if _spki(issued) != _spki(wanted):
        raise BackendError(f"certificate request {name}: the certificate is for another key")
    return certificate


def _spki(key: CertificatePublicKeyTypes) -> bytes:
    return key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


async def _issued(api: TenantApi, name: str) -> bytes:
    """Poll the request until the signer has written its certificate (usually within 100 ms)."""
    deadline = asyncio.get_running_loop().time() + WAIT
    pause = 0.05
    while True:
        status = (await api.get(f"{REQUESTS}/{name}")).get("status") or {}
        if status.get("certificate"):
            try:
                return base64.b64decode(status["certificate"])
            except ValueError:
                raise BackendError(f"certificate request {name}: not base64") from None
        refused = [
            f"{c.get('type')}: {c.get('message', '')}"[:200]
            for c in status.get("conditions", [])
            if c.get("type") in ("Denied", "Failed") and c.get("status") == "True"
        ]
        if refused:
            raise BackendError(f"certificate request {name}: {'; '.join(refused)}")
        if asyncio.get_running_loop().time() + pause > deadline:
            raise BackendError(f"certificate request {name}: not signed within {WAIT:.0f}s")
        await asyncio.sleep(pause)
        pause = min(pause * 2, 1.0)
