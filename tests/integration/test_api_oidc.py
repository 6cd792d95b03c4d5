"""OIDC through the running API server with a second issuer run by the test: RSA and EC keys,
key rotation, and every kind of bad token refused with the same bare 401."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from lessor.apiserver.auth.oidc import LEEWAY_SECONDS
from tests.integration.test_apiserver import Stack, stack  # noqa: F401 - the fixture

pytestmark = pytest.mark.integration
GENERIC_401 = {
    "error": "unauthorized",
    "detail": "invalid credentials",
    "code": "unauthenticated",
}


# Each key's signing algorithm, by kid.
ALGORITHMS = {"rsa-1": "RS256", "ec-1": "ES256", "rsa-384": "RS384", "ec-384": "ES384"}


class Issuer:
    def __init__(self) -> None:
        self.keys: dict[str, Any] = {
            "rsa-1": rsa.generate_private_key(public_exponent=65537, key_size=2048),
            "ec-1": ec.generate_private_key(ec.SECP256R1()),
            "rsa-384": rsa.generate_private_key(public_exponent=65537, key_size=3072),
            "ec-384": ec.generate_private_key(ec.SECP384R1()),
        }
        self.url = ""

    def jwks(self) -> dict[str, Any]:
        keys = []
        for kid, key in self.keys.items():
            algorithm = (
                jwt.algorithms.RSAAlgorithm if kid.startswith("rsa") else jwt.algorithms.ECAlgorithm
            )
            keys.append({**json.loads(algorithm.to_jwk(key.public_key())), "kid": kid})
        return {"keys": keys}

    def token(self, kid: str = "rsa-1", **claims: Any) -> str:
        now = int(time.time())
        payload = {"iss": self.url, "aud": "lessor", "sub": "dana", "azp": "ci", "exp": now + 300}
        payload.update(claims)
        algorithm = ALGORITHMS.get(kid, "RS256" if kid.startswith("rsa") else "ES256")
        return jwt.encode(
            {k: v for k, v in payload.items() if v is not None},
            self.keys[kid],
            algorithm=algorithm,
            headers={"kid": kid},
        )


@pytest.fixture(scope="module")
def issuer(stack: Stack) -> Iterator[Issuer]:  # noqa: F811
    state = Issuer()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            # Only where the API server looks when the policy names no jwksUrl (from the issuer).
            if self.path != "/.well-known/jwks.json":
                self.send_error(404)
                return
            body = json.dumps(state.jwks()).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    policy = {
        "apiVersion": "lessor.dev/v1alpha1",
        "kind": "AccessPolicy",
        "metadata": {"name": "second-issuer", "namespace": stack.namespace},
        "spec": {
            "auth": {
                "oidc": {
                    "issuer": state.url,
                    "audience": ["lessor"],
                    "authorizedParties": ["ci"],
                    "algorithms": sorted(set(ALGORITHMS.values())),
                }
            },
            "identity": "{sub}",
            "rules": [{"pools": ["api-*"]}],
        },
    }
    stack.cluster.kubectl("apply", "-f", "-", input=json.dumps(policy))
    deadline = time.monotonic() + 120  # a hang guard
    while stack.api.call("GET", "/v1/pools", token=state.token()).status != 200:
        assert time.monotonic() < deadline, "the API server never picked up the policy"
        time.sleep(0.5)
    yield state
    server.shutdown()


def test_rsa_and_ec_tokens_of_a_second_issuer_authenticate(stack: Stack, issuer: Issuer) -> None:  # noqa: F811
    """RS256, ES256, RS384 and ES384 (issue 26), their keys found at the JWKS path derived from
    the issuer (the policy names no jwksUrl, and the issuer serves nothing elsewhere)."""
    for kid in ALGORITHMS:
        for api in stack.apis:
            assert api.call("GET", "/v1/pools", token=issuer.token(kid)).status == 200, kid


def test_bad_tokens_get_the_same_bare_401(stack: Stack, issuer: Issuer) -> None:  # noqa: F811
    now = int(time.time())
    good = issuer.token()
    header, _, signature = good.split(".")
    tampered_payload = jwt.utils.base64url_encode(
        json.dumps(
            {**jwt.decode(good, options={"verify_signature": False}), "sub": "root"}
        ).encode()
    ).decode()
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    tokens = {
        "alg none": jwt.encode(
            {"iss": issuer.url, "aud": "lessor", "sub": "x", "azp": "ci", "exp": now + 60},
            None,
            algorithm="none",
            headers={"kid": "rsa-1"},
        ),
        "expired": issuer.token(exp=now - 120),
        "not yet valid": issuer.token(nbf=now + 600),
        "wrong audience": issuer.token(aud="another-service"),
        "wrong azp": issuer.token(azp="laptop"),
        "unknown kid": jwt.encode(
            {"iss": issuer.url, "aud": "lessor", "sub": "x", "azp": "ci", "exp": now + 60},
            stranger,
            algorithm="RS256",
            headers={"kid": "rsa-unknown"},
        ),
        "another key, same kid": jwt.encode(
            {"iss": issuer.url, "aud": "lessor", "sub": "x", "azp": "ci", "exp": now + 60},
            stranger,
            algorithm="RS256",
            headers={"kid": "rsa-1"},
        ),
        "tampered payload": f"{header}.{tampered_payload}.{signature}",
        "unknown issuer": issuer.token(iss="https://nobody.example"),
        "HS256 keyed with the public key": _hs256_with_public_key(issuer),
    }
    for name, token in tokens.items():
        response = stack.api.call("GET", "/v1/pools", token=token)
        assert (response.status, response.body) == (401, GENERIC_401), name


def _hs256_with_public_key(issuer: Issuer) -> str:
    public = (
        issuer.keys["rsa-1"]
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    claims = {
        "iss": issuer.url,
        "aud": "lessor",
        "sub": "x",
        "azp": "ci",
        "exp": int(time.time()) + 60,
    }
    head = jwt.utils.base64url_encode(json.dumps({"alg": "HS256", "kid": "rsa-1"}).encode())
    body = jwt.utils.base64url_encode(json.dumps(claims).encode())
    signing_input = head + b"." + body
    mac = jwt.utils.base64url_encode(hmac.new(public, signing_input, hashlib.sha256).digest())
    return (signing_input + b"." + mac).decode()


def test_a_token_accepted_a_moment_ago_is_refused_once_it_expires(
    stack: Stack,  # noqa: F811
    issuer: Issuer,
) -> None:
    """A worker reuses a verified token's outcome for a few seconds (VERIFIED_FOR), never past
    what its verification allows: `exp` plus the 30 s leeway for clocks. A token short of that
    is accepted by every server, and refused by all of them once it is past. The margin, 6 s
    for 8 local GETs, counts from when every server has the issuer's policy; it is under
    VERIFIED_FOR, so a cache that ignored `exp` would still hold the token when it is refused."""
    deadline = time.monotonic() + 120  # a hang guard: the fixture waited for one server only
    while not all(
        api.call("GET", "/v1/pools", token=issuer.token()).status == 200 for api in stack.apis
    ):
        assert time.monotonic() < deadline, "a server never picked up the policy"
        time.sleep(0.5)
    past = int(time.time()) - LEEWAY_SECONDS + 6
    token = issuer.token(exp=past)
    for api in stack.apis:
        for _ in range(4):  # each worker verifies it once and keeps the outcome
            assert api.call("GET", "/v1/pools", token=token).status == 200
    time.sleep(max(0.0, past + LEEWAY_SECONDS + 1 - time.time()))
    for api in stack.apis:
        for _ in range(4):
            answer = api.call("GET", "/v1/pools", token=token)
            assert (answer.status, answer.body) == (401, GENERIC_401)


def test_a_rotated_key_is_picked_up(stack: Stack, issuer: Issuer) -> None:  # noqa: F811
    issuer.keys["rsa-2"] = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = issuer.token("rsa-2")
    # Each worker refetches a JWKS at most every 30 s, so a flood of unknown kids cannot hammer
    # the issuer; a real rotation is therefore accepted by every worker within that interval
    # (each worker on its own clock): wait until a run of requests over both servers succeeds.
    deadline = time.monotonic() + 120  # a hang guard: the throttle is 30 s
    while True:
        statuses = [
            api.call("GET", "/v1/pools", token=token).status for api in stack.apis for _ in range(4)
        ]
        if statuses == [200] * len(statuses):
            break
        assert time.monotonic() < deadline, f"the rotated key was not accepted: {statuses}"
        time.sleep(1)
