"""Certificates and keys for a control plane on loopback, and for the leases of clusters whose CA
lessor holds.

Every local cluster gets its own CA, so a kubeconfig of one cluster is worthless against another.
Certificates use ECDSA P-256 because generating them is fast enough to do per cluster (and per
lease) in milliseconds; the service-account signing key is RSA so that tokens are RS256, the
algorithm every OIDC client accepts by default.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class KeyPair:
    cert_pem: bytes
    key_pem: bytes


@dataclass(frozen=True)
class SigningRequest:
    """A PKCS#10 request and the private key it was made with (which never leaves lessor)."""

    csr_pem: bytes
    key_pem: bytes


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(parts)


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


class CertificateAuthority:
    """A throwaway CA that signs the serving and client certificates of one cluster."""

    def __init__(self, common_name: str) -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        subject = _name(common_name)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )

    @classmethod
    def from_pem(cls, cert_pem: bytes, key_pem: bytes) -> CertificateAuthority:
        """The CA of a running cluster, to sign more certificates with (a lease's)."""
        key = serialization.load_pem_private_key(key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError("the CA's key is not an ECDSA key")
        authority = cls.__new__(cls)
        authority._key = key
        authority._cert = x509.load_pem_x509_certificate(cert_pem)
        return authority

    @property
    def cert_pem(self) -> bytes:
        return self._cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return _key_pem(self._key)

    def issue(
        self,
        common_name: str,
        *,
        organization: str | None = None,
        server_names: tuple[str, ...] = (),
        client: bool = False,
        not_after: datetime.datetime | None = None,
    ) -> KeyPair:
        """Sign a leaf certificate: serving when `server_names` is given, client when `client`;
        valid for a year, or until `not_after` (to the second: X.509 keeps no fraction)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        after = (not_after or now + _VALIDITY).replace(microsecond=0)
        # An expiry already past (a lease's, met late) still gets a certificate: one that is
        # refused from the start, never an error that stops the reconcile issuing it.
        before = min(now - datetime.timedelta(minutes=5), after - datetime.timedelta(seconds=1))
        usages = []
        if server_names:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organization))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(before)
            .not_valid_after(after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        if server_names:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([_general_name(n) for n in server_names]),
                critical=False,
            )
        cert = builder.sign(self._key, hashes.SHA256())
        return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def certificate_request(common_name: str, organization: str) -> SigningRequest:
    """A fresh key and a request for a client certificate of that subject, for a signer that
    holds the CA itself (a cluster's own, through the certificates.k8s.io API)."""
    key = ec.generate_private_key(ec.SECP256R1())
    request = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(_name(common_name, organization))
        .sign(key, hashes.SHA256())
    )
    return SigningRequest(request.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def service_account_key() -> KeyPair:
    """RSA key whose public half the API server publishes as its OIDC issuer's JWKS."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return KeyPair(cert_pem=public, key_pem=_key_pem(key))


def write_private(path: Path, data: bytes) -> None:
    """Write a secret file readable by its owner only, created with that mode (no window)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
