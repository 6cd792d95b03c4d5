"""Validation of OIDC JWTs against the issuers configured in AccessPolicies.

The issuer is chosen by the token's (unverified) `iss`, and everything else is then checked
against that issuer's settings only: its keys, its algorithms, its audiences and authorized
parties. A token can therefore never be accepted under the settings of another issuer. Several
policies may trust one issuer (for different audiences, say): their settings are tried in the
order given (the policies' names), and the first that accepts the token decides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jwt

from lessor.apiserver.auth.errors import AuthenticationError
from lessor.apiserver.auth.jwks import JwksCache
from lessor.apiserver.policy.evaluation import claim_text

ALLOWED_ALGORITHMS = frozenset({"RS256", "RS384", "ES256", "ES384"})
LEEWAY_SECONDS = 30


@dataclass(frozen=True)
class OidcIssuer:
    issuer: str
    audiences: tuple[str, ...]
    authorized_parties: tuple[str, ...] = ()
    jwks_url: str | None = None
    algorithms: tuple[str, ...] = ("RS256",)
    required_claims: tuple[tuple[str, str], ...] = ()
    policy: str = ""  # the AccessPolicy these settings are of

    @property
    def jwks_endpoint(self) -> str:
        return self.jwks_url or f"{self.issuer.rstrip('/')}/.well-known/jwks.json"


def verify_token(
    token: str, issuers: Mapping[str, Sequence[OidcIssuer]], jwks: JwksCache
) -> tuple[OidcIssuer, dict[str, Any]]:
    """The settings that accepted the token and its verified claims, or AuthenticationError."""
    try:
        header = jwt.get_unverified_header(token)
        unverified = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError as error:
        raise AuthenticationError(f"malformed token: {error}") from error
    candidates = issuers.get(str(unverified.get("iss", "")))
    if not candidates:
        raise AuthenticationError("issuer not configured")
    refusal = AuthenticationError("issuer not configured")
    for issuer in candidates:
        try:
            return issuer, _verify(token, header, issuer, jwks)
        except AuthenticationError as error:
            refusal = error
    raise refusal


def _verify(
    token: str, header: Mapping[str, Any], issuer: OidcIssuer, jwks: JwksCache
) -> dict[str, Any]:
    algorithm = header.get("alg")
    algorithms = [a for a in issuer.algorithms if a in ALLOWED_ALGORITHMS]
    if algorithm not in algorithms:
        # Checked before any key is used, so `none` and HMAC tokens (HS256 "signed" with a
        # public key) are refused outright.
        raise AuthenticationError(f"algorithm {algorithm!r} not allowed")
    key = _for_algorithm(jwks.key(issuer.jwks_endpoint, header.get("kid")), algorithm)
    try:
        claims: dict[str, Any] = jwt.decode(
            token,
            key,
            algorithms=algorithms,
            audience=list(issuer.audiences) or None,
            issuer=issuer.issuer,
            leeway=LEEWAY_SECONDS,
            options={"require": ["exp", "iss"]},
        )
    except jwt.PyJWTError as error:
        raise AuthenticationError(f"invalid token: {error}") from error
    if issuer.authorized_parties and claims.get("azp") not in issuer.authorized_parties:
        raise AuthenticationError("authorized party not accepted")
    for claim, value in issuer.required_claims:
        if claim_text(claims, claim) != value:
            raise AuthenticationError(f"required claim {claim!r} is not {value!r}")
    return claims


def _for_algorithm(key: jwt.PyJWK, algorithm: str) -> jwt.PyJWK:
    """The key, to verify a token of `algorithm` with. A JWK's `alg` is optional (RFC 7517,
    4.4), and PyJWK reads a key that names none as RS256 or ES256 by its type, which would refuse
    every RS384 token of an issuer whose JWKS omits it. A key that names its `alg` is taken at
    its word (a token of another algorithm is refused); one that names none serves the token's,
    when its type can (an RSA key never verifies an ES384 token)."""
    data: dict[str, Any] = key._jwk_data  # PyJWK keeps the JWK only there
    if data.get("alg") or key.algorithm_name == algorithm:
        return key
    try:
        return jwt.PyJWK(data, algorithm=algorithm)
    except jwt.PyJWTError as error:
        raise AuthenticationError(f"the key cannot verify {algorithm}: {error}") from error
