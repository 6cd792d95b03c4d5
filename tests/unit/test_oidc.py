"""OIDC validation with real keys, real signatures and a real JWKS endpoint on loopback."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from lessor.apiserver.auth.errors import AuthenticationError, IssuerUnavailableError
from lessor.apiserver.auth.jwks import JwksCache, KeySource, https_fetch
from lessor.apiserver.auth.oidc import OidcIssuer, check_claims, verify_token


@dataclass
class Issuer:
    """A tiny OIDC issuer: keys, a JWKS document served over HTTP, and token minting."""

    url: str = ""
    keys: dict[str, Any] = field(default_factory=dict)
    jwks_requests: int = 0
    available: bool = True
    # None serves the keys at every path (the derived default included); a path lays the
    # issuer out as most providers are: keys there, named by its discovery document.
    jwks_path: str | None = None
    discovery: dict[str, Any] = field(default_factory=dict)  # overrides of the document
    paths: list[str] = field(default_factory=list)

    def add_key(self, kid: str, kind: str = "rsa") -> None:
        self.keys[kid] = (
            rsa.generate_private_key(public_exponent=65537, key_size=2048)
            if kind == "rsa"
            else ec.generate_private_key(ec.SECP256R1())
        )

    def jwks(self) -> dict[str, Any]:
        keys = []
        for kid, key in self.keys.items():
            algorithm = jwt.algorithms.RSAAlgorithm if isinstance(key, rsa.RSAPrivateKey) else None
            if algorithm is None:
                jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
            else:
                jwk = json.loads(algorithm.to_jwk(key.public_key()))
            keys.append({**jwk, "kid": kid, "use": "sig"})
        return {"keys": keys}

    def token(self, kid: str = "k1", algorithm: str = "RS256", **claims: Any) -> str:
        now = int(time.time())
        payload = {"iss": self.url, "aud": "lessor", "sub": "alice", "iat": now, "exp": now + 300}
        payload.update(claims)
        payload = {k: v for k, v in payload.items() if v is not None}
        return jwt.encode(payload, self.keys[kid], algorithm=algorithm, headers={"kid": kid})


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    state = Issuer()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.paths.append(self.path)
            if not state.available:
                self.send_error(503)
                return
            if state.jwks_path is None or self.path == state.jwks_path:
                state.jwks_requests += 1
                document = state.jwks()
            elif self.path == "/.well-known/openid-configuration":
                jwks_uri = f"{state.url}{state.jwks_path}"
                document = {"issuer": state.url, "jwks_uri": jwks_uri, **state.discovery}
            else:
                self.send_error(404)
                return
            body = json.dumps(document).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    state.add_key("k1")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()


def settings(issuer: Issuer, **overrides: Any) -> dict[str, list[OidcIssuer]]:
    values: dict[str, Any] = {"issuer": issuer.url, "audiences": ("lessor",)}
    values.update(overrides)
    return {issuer.url: [OidcIssuer(**values)]}


def cache(**kwargs: Any) -> JwksCache:
    return JwksCache(https_fetch(), **kwargs)


def test_a_valid_token_yields_its_claims(issuer: Issuer) -> None:
    _, claims = verify_token(issuer.token(), settings(issuer), cache())
    assert claims["sub"] == "alice"


def test_es256_is_accepted_only_when_the_policy_lists_it(issuer: Issuer) -> None:
    issuer.add_key("ec", kind="ec")
    token = issuer.token(kid="ec", algorithm="ES256")
    with pytest.raises(AuthenticationError):
        verify_token(token, settings(issuer), cache())
    _, claims = verify_token(token, settings(issuer, algorithms=("RS256", "ES256")), cache())
    assert claims["sub"] == "alice"


def _unsigned(issuer: Issuer) -> str:
    def b64(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    now = int(time.time())
    claims = {"iss": issuer.url, "aud": "lessor", "sub": "mallory", "exp": now + 300}
    return f"{b64({'alg': 'none', 'typ': 'JWT', 'kid': 'k1'})}.{b64(claims)}."


def _hs256_with_public_key(issuer: Issuer) -> str:
    public_pem = (
        issuer.keys["k1"]
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    header = {"alg": "HS256", "typ": "JWT", "kid": "k1"}
    now = int(time.time())
    claims = {"iss": issuer.url, "aud": "lessor", "sub": "mallory", "exp": now + 300}

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
    signature = hmac.new(public_pem, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(signature)}"


def _tampered(issuer: Issuer) -> str:
    header, payload, signature = issuer.token().split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    claims["sub"] = "admin"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{header}.{forged}.{signature}"


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(_unsigned, id="alg-none"),
        pytest.param(_hs256_with_public_key, id="hs256-signed-with-public-key"),
        pytest.param(lambda i: i.token(exp=int(time.time()) - 120), id="expired"),
        pytest.param(lambda i: i.token(nbf=int(time.time()) + 600), id="not-yet-valid"),
        pytest.param(lambda i: i.token(aud="someone-else"), id="wrong-audience"),
        pytest.param(lambda i: i.token(iss="https://elsewhere.example"), id="wrong-issuer"),
        pytest.param(lambda i: i.token(exp=None), id="no-expiry"),
        pytest.param(_tampered, id="tampered-payload"),
        pytest.param(lambda i: "not.a.jwt", id="garbage"),
    ],
)
def test_unacceptable_tokens_are_refused(issuer: Issuer, make: Any) -> None:
    with pytest.raises(AuthenticationError):
        verify_token(make(issuer), settings(issuer), cache())


def test_authorized_parties_restrict_azp(issuer: Issuer) -> None:
    policy = settings(issuer, authorized_parties=("ci",))
    assert verify_token(issuer.token(azp="ci"), policy, cache())[1]["azp"] == "ci"
    with pytest.raises(AuthenticationError):
        verify_token(issuer.token(azp="laptop"), policy, cache())
    with pytest.raises(AuthenticationError):
        verify_token(issuer.token(), policy, cache())


def test_an_empty_audience_list_accepts_tokens_without_aud_only(issuer: Issuer) -> None:
    policy = settings(issuer, audiences=())
    assert verify_token(issuer.token(aud=None), policy, cache())[1]["sub"] == "alice"
    with pytest.raises(AuthenticationError):
        verify_token(issuer.token(), policy, cache())


def test_a_token_signed_by_another_issuers_key_is_refused(issuer: Issuer) -> None:
    other = Issuer(url="https://other.example")
    other.add_key("k1")  # same kid, different key: only the signature can tell them apart
    forged = other.token(iss=issuer.url)
    with pytest.raises(AuthenticationError):
        verify_token(forged, settings(issuer), cache())


def test_key_rotation_is_picked_up_but_unknown_kids_cannot_hammer_the_issuer(
    issuer: Issuer,
) -> None:
    now = [1000.0]
    keys = cache(refetch_interval=30, clock=lambda: now[0])
    verify_token(issuer.token(), settings(issuer), keys)
    assert issuer.jwks_requests == 1
    now[0] += 31
    for attempt in range(20):
        with pytest.raises(AuthenticationError):
            verify_token(_bogus(issuer, f"bogus-{attempt}"), settings(issuer), keys)
    assert issuer.jwks_requests == 2, "one refetch for the first unknown kid, then none"
    issuer.add_key("k2")
    now[0] += 31
    _, claims = verify_token(issuer.token(kid="k2"), settings(issuer), keys)
    assert claims["sub"] == "alice"
    assert issuer.jwks_requests == 3


def _bogus(issuer: Issuer, kid: str) -> str:
    """A token whose header names a key the issuer never had."""
    token = issuer.token()
    header = {"alg": "RS256", "typ": "JWT", "kid": kid}
    encoded = base64.urlsafe_b64encode(json.dumps(header).encode()).rstrip(b"=").decode()
    return ".".join([encoded, *token.split(".")[1:]])


def test_an_unreachable_issuer_is_unavailable_not_unauthenticated(issuer: Issuer) -> None:
    issuer.available = False
    with pytest.raises(IssuerUnavailableError):
        verify_token(issuer.token(), settings(issuer), cache())


def test_an_issuer_that_fails_is_not_asked_again_within_the_interval() -> None:
    """A failed fetch counts as a fetch: within the refetch interval every token of that issuer
    is answered at once (unavailable), without another request to it."""
    calls: list[str] = []

    def failing(url: str, _ca: str | None) -> bytes:
        calls.append(url)
        raise OSError("connection refused")

    now = [1000.0]
    keys = JwksCache(failing, refetch_interval=30, clock=lambda: now[0])
    for kid in ("a", "b", "c"):
        with pytest.raises(IssuerUnavailableError):
            keys.key(KeySource("https://down.example", "https://down.example/jwks"), kid)
    assert calls == ["https://down.example/jwks"]
    now[0] += 31
    with pytest.raises(IssuerUnavailableError):
        keys.key(KeySource("https://down.example", "https://down.example/jwks"), "d")
    assert len(calls) == 2


def test_a_slow_issuer_stalls_no_other_issuer() -> None:
    """One issuer's fetch, held open by this test, does not keep another issuer's keys from
    being read meanwhile (each JWKS URL has a lock of its own)."""
    release = threading.Event()
    documents = {"https://fast.example/jwks": json.dumps({"keys": [_jwk("f")]}).encode()}

    def fetch(url: str, _ca: str | None) -> bytes:
        if url == "https://slow.example/jwks":
            release.wait(120)
            raise OSError("gave up")
        return documents[url]

    keys = JwksCache(fetch)
    slow_source = KeySource("https://slow.example", "https://slow.example/jwks")
    fast_source = KeySource("https://fast.example", "https://fast.example/jwks")
    slow = threading.Thread(target=lambda: _ignore(keys.key, slow_source, "s"))
    slow.start()
    try:
        fast: list[Any] = []
        reader = threading.Thread(target=lambda: fast.append(keys.key(fast_source, "f")))
        reader.start()
        reader.join(60)  # a hang guard: the fast issuer must not wait for the slow one
        assert fast and not reader.is_alive(), "the fast issuer waited for the slow one"
    finally:
        release.set()
        slow.join(60)


def _jwk(kid: str) -> dict[str, Any]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return {**json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key())), "kid": kid}


def _ignore(function: Any, *args: Any) -> None:
    with contextlib.suppress(IssuerUnavailableError, AuthenticationError):
        function(*args)


def test_keys_are_found_through_discovery_when_the_derived_default_has_none(
    issuer: Issuer,
) -> None:
    """Laid out as GitHub Actions' issuer is (keys at /.well-known/jwks): the derived default
    is asked first, as documented, then the discovery document; a rotation later refetches only
    the keys, at the URL discovery gave."""
    issuer.jwks_path = "/.well-known/jwks"
    now = [1000.0]
    keys = cache(refetch_interval=30, clock=lambda: now[0])
    _, claims = verify_token(issuer.token(), settings(issuer), keys)
    assert claims["sub"] == "alice"
    assert issuer.paths == [
        "/.well-known/jwks.json",
        "/.well-known/openid-configuration",
        "/.well-known/jwks",
    ]
    issuer.add_key("k2")
    now[0] += 31
    verify_token(issuer.token(kid="k2"), settings(issuer), keys)
    assert issuer.paths[3:] == ["/.well-known/jwks"]


def test_the_derived_default_is_used_without_discovery_when_it_has_the_keys(
    issuer: Issuer,
) -> None:
    verify_token(issuer.token(), settings(issuer), cache())
    assert issuer.paths == ["/.well-known/jwks.json"]


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        pytest.param({"issuer": "https://elsewhere.example"}, "another issuer", id="other-issuer"),
        pytest.param({"jwks_uri": "http://10.0.0.7/keys"}, "no https jwks_uri", id="http-keys"),
        pytest.param({"jwks_uri": None}, "no https jwks_uri", id="no-keys"),
    ],
)
def test_a_discovery_document_that_cannot_be_trusted_is_refused(
    issuer: Issuer, overrides: dict[str, Any], why: str
) -> None:
    """A document anyone can serve at the issuer's address must name that issuer exactly and
    keys over https, or it could point us at keys of an attacker's choosing."""
    issuer.jwks_path = "/keys"
    issuer.discovery = overrides
    with pytest.raises(IssuerUnavailableError, match=why):
        verify_token(issuer.token(), settings(issuer), cache())
    assert "/keys" not in issuer.paths


@pytest.mark.parametrize(
    ("policy", "claims", "accepted"),
    [
        pytest.param({}, {"aud": "lessor"}, True, id="unchanged"),
        pytest.param({"audiences": ("ci",)}, {"aud": "lessor"}, False, id="audience-narrowed"),
        pytest.param({"audiences": ("ci", "lessor")}, {"aud": ["x", "lessor"]}, True, id="list"),
        pytest.param({"audiences": ()}, {"aud": "lessor"}, False, id="audience-emptied"),
        pytest.param(
            {"required_claims": (("email_verified", "true"),)},
            {"aud": "lessor", "email_verified": False},
            False,
            id="claim-required",
        ),
        pytest.param(
            {"authorized_parties": ("ci",)}, {"aud": "lessor", "azp": "cli"}, False, id="azp"
        ),
    ],
)
def test_a_sessions_claims_are_held_to_the_policy_as_it_is_now(
    policy: dict[str, Any], claims: dict[str, Any], accepted: bool
) -> None:
    issuer = OidcIssuer(**{"issuer": "https://idp.example", "audiences": ("lessor",), **policy})
    if accepted:
        check_claims(issuer, claims)
    else:
        with pytest.raises(AuthenticationError):
            check_claims(issuer, claims)


def test_a_token_naming_one_of_the_issuers_keys_and_signed_by_another_is_accepted(
    issuer: Issuer,
) -> None:
    """What ORY Hydra v2.3.0 issues on a refresh after a key rotation (ory/hydra#3573): the
    old key's kid over the new key's signature. Only the issuer's own keys are tried."""
    issuer.add_key("k2")
    mislabelled = jwt.encode(
        {"iss": issuer.url, "aud": "lessor", "sub": "alice", "exp": int(time.time()) + 300},
        issuer.keys["k2"],
        algorithm="RS256",
        headers={"kid": "k1"},
    )
    _, claims = verify_token(mislabelled, settings(issuer), cache())
    assert claims["sub"] == "alice"
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = jwt.encode(
        {"iss": issuer.url, "aud": "lessor", "sub": "admin", "exp": int(time.time()) + 300},
        stranger,
        algorithm="RS256",
        headers={"kid": "k1"},
    )
    with pytest.raises(AuthenticationError):
        verify_token(forged, settings(issuer), cache())
