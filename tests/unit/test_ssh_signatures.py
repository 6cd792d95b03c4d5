"""SSH request signatures: real Ed25519 keys, the documented canonical string, replay and skew."""

from __future__ import annotations

import base64
import secrets
import time

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from lessor.apiserver.auth.errors import AuthenticationError
from lessor.apiserver.auth.ssh import (
    NonceCache,
    ed25519_key_blob,
    ed25519_signature_blob,
    key_blob_from_openssh,
    parse_authorization,
    verify_request,
)
from lessor.protocol.ssh_signature import audience_of, canonical_request

HERE = "https://lessor.example.com"  # the deployment under test


def raw_public(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def header(
    key: Ed25519PrivateKey,
    method: str,
    target: str,
    body: bytes,
    *,
    timestamp: int | None = None,
    nonce: str | None = None,
    audience: str = HERE,
) -> str:
    ts = int(time.time()) if timestamp is None else timestamp
    nonce = nonce or secrets.token_urlsafe(24)
    signature = key.sign(
        canonical_request(audience, method, target, timestamp=ts, nonce=nonce, body=body)
    )
    key_b64 = base64.b64encode(ed25519_key_blob(raw_public(key))).decode()
    sig_b64 = base64.b64encode(ed25519_signature_blob(signature)).decode()
    return (
        f'Lessor-SSH key="{key_b64}", aud="{audience}", ts="{ts}", nonce="{nonce}", sig="{sig_b64}"'
    )


@pytest.fixture
def key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture
def authorized(key: Ed25519PrivateKey) -> dict[bytes, str]:
    openssh = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return {key_blob_from_openssh(openssh.decode() + " alice@laptop"): "alice"}


def check(value: str, authorized: dict[bytes, str], nonces: NonceCache, **request: object) -> str:
    params: dict[str, object] = {"method": "POST", "target": "/v1/leases?x=1", "body": b"{}"}
    params.update(request)
    params.setdefault("audiences", {HERE})
    return verify_request(
        parse_authorization(value), authorized_keys=authorized, nonces=nonces, **params
    )  # type: ignore[arg-type]


def test_a_signed_request_authenticates_as_the_keys_identity(
    key: Ed25519PrivateKey, authorized: dict[bytes, str]
) -> None:
    value = header(key, "POST", "/v1/leases?x=1", b"{}")
    assert check(value, authorized, NonceCache()) == "alice"


def test_a_replayed_nonce_is_refused(key: Ed25519PrivateKey, authorized: dict[bytes, str]) -> None:
    nonces = NonceCache()
    value = header(key, "POST", "/v1/leases?x=1", b"{}")
    check(value, authorized, nonces)
    with pytest.raises(AuthenticationError, match="replayed"):
        check(value, authorized, nonces)


@pytest.mark.parametrize("skew", [-301, 301])
def test_a_stale_or_future_timestamp_is_refused(
    key: Ed25519PrivateKey, authorized: dict[bytes, str], skew: int
) -> None:
    now = 1_800_000_000  # the verifier's clock, fixed: the skew is exactly what is tested
    value = header(key, "POST", "/v1/leases?x=1", b"{}", timestamp=now + skew)
    with pytest.raises(AuthenticationError, match="skew"):
        check(value, authorized, NonceCache(), clock=lambda: float(now))
    edge = header(key, "POST", "/v1/leases?x=1", b"{}", timestamp=now + (300 if skew > 0 else -300))
    assert check(edge, authorized, NonceCache(), clock=lambda: float(now)) == "alice", "within"


@pytest.mark.parametrize(
    "changed",
    [
        {"body": b'{"profile":"other"}'},
        {"target": "/v1/leases?x=2"},
        {"target": "/v1/leases"},
        {"method": "DELETE"},
    ],
)
def test_changing_anything_signed_breaks_the_signature(
    key: Ed25519PrivateKey, authorized: dict[bytes, str], changed: dict[str, object]
) -> None:
    value = header(key, "POST", "/v1/leases?x=1", b"{}")
    with pytest.raises(AuthenticationError, match="bad signature"):
        check(value, authorized, NonceCache(), **changed)


def test_a_signature_is_good_only_at_the_deployment_it_names(
    key: Ed25519PrivateKey, authorized: dict[bytes, str]
) -> None:
    elsewhere = header(key, "POST", "/v1/leases?x=1", b"{}", audience="https://staging.example")
    with pytest.raises(AuthenticationError, match="another deployment"):
        check(elsewhere, authorized, NonceCache())
    with pytest.raises(AuthenticationError, match="another deployment"):
        check(header(key, "POST", "/v1/leases?x=1", b"{}"), authorized, NonceCache(), audiences=())
    # The audience is signed: naming this deployment in a header signed for another breaks it.
    forged = elsewhere.replace('aud="https://staging.example"', f'aud="{HERE}"')
    with pytest.raises(AuthenticationError, match="bad signature"):
        check(forged, authorized, NonceCache())


@pytest.mark.parametrize(
    ("endpoint", "audience"),
    [
        ("https://Lessor.Example.com/", "https://lessor.example.com"),
        ("https://lessor.example.com:443", "https://lessor.example.com"),
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("http://127.0.0.1:80/", "http://127.0.0.1"),
        ("https://example.com/lessor/", "https://example.com/lessor"),
        ("http://[::1]:8000", "http://[::1]:8000"),
    ],
)
def test_an_endpoint_has_one_audience(endpoint: str, audience: str) -> None:
    assert audience_of(endpoint) == audience


@pytest.mark.parametrize(
    "endpoint", ["ftp://x", "lessor.example.com", "https://", "http://h:99999"]
)
def test_an_audience_is_an_http_url(endpoint: str) -> None:
    with pytest.raises(ValueError):
        audience_of(endpoint)


def test_an_unlisted_key_is_refused(authorized: dict[bytes, str]) -> None:
    stranger = Ed25519PrivateKey.generate()
    with pytest.raises(AuthenticationError, match="not authorized"):
        check(header(stranger, "POST", "/v1/leases?x=1", b"{}"), authorized, NonceCache())


def test_a_forged_signature_does_not_burn_the_nonce(
    key: Ed25519PrivateKey, authorized: dict[bytes, str]
) -> None:
    nonces = NonceCache()
    nonce = secrets.token_urlsafe(24)
    forged = header(key, "POST", "/v1/leases?x=1", b"tampered", nonce=nonce)
    with pytest.raises(AuthenticationError):
        check(forged, authorized, nonces)
    genuine = header(key, "POST", "/v1/leases?x=1", b"{}", nonce=nonce)
    assert check(genuine, authorized, nonces) == "alice"


@pytest.mark.parametrize(
    "value",
    [
        "Bearer abc",
        'Lessor-SSH key="!!", ts="1", nonce="n", sig="x"',
        'Lessor-SSH ts="1"',
        'Lessor-SSH key="AAAA", ts="soon", nonce="nnnnnnnnnnnnnnnn", sig="AAAA"',
        'Lessor-SSH key="AAAA", ts="1", nonce="nnnnnnnnnnnnnnnn", sig="AAAA"',  # no audience
    ],
)
def test_malformed_headers_are_refused(value: str) -> None:
    with pytest.raises(AuthenticationError):
        parse_authorization(value)


def test_only_ed25519_public_keys_can_be_authorized() -> None:
    with pytest.raises(ValueError, match="ssh-ed25519"):
        key_blob_from_openssh("ssh-rsa AAAAB3NzaC1yc2E alice")
