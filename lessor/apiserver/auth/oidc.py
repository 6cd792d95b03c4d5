"""Validation of OIDC JWTs against the issuers configured in AccessPolicies.

The issuer is chosen by the token's (unverified) `iss`, and everything else is then checked
against that issuer's settings only: its keys, its algorithms, its audiences and authorized
parties. A token can therefore never be accepted under the settings of another issuer. Several
policies may trust one issuer (for different audiences, say): their settings are tried in the
order given (the policies' names), and the first that accepts the token decides.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jwt

from lessor.apiserver.auth.errors import AuthenticationError
from lessor.apiserver.auth.jwks import JwksCache, KeySource
from lessor.apiserver.policy.evaluation import claim_text

log = logging.getLogger(__name__)

ALLOWED_ALGORITHMS = frozenset({"RS256", "RS384", "ES256", "ES384"})
MAX_OTHER_KEYS = 4
LEEWAY_SECONDS = 30


@dataclass(frozen=True)
class OidcIssuer:
    issuer: str
    audiences: tuple[str, ...]
    authorized_parties: tuple[str, ...] = ()
    jwks_url: str | None = None
    algorithms: tuple[str, ...] = ("RS256",)
    required_claims: tuple[tuple[str, str], ...] = ()
    ca_bundle: str | None = None
    policy: str = ""  # the AccessPolicy these settings are of

    @property
    def keys(self) -> KeySource:
        return KeySource(self.issuer, self.jwks_url, self.ca_bundle)


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
    kid = header.get("kid")
    key = _for_algorithm(jwks.key(issuer.keys, kid), algorithm)
    try:
        claims = _decode(token, key, algorithms, issuer)
    except jwt.InvalidSignatureError as error:
        claims = _signed_by_another_key(
            token,
            algorithm=algorithm,
            algorithms=algorithms,
            issuer=issuer,
            jwks=jwks,
            kid=kid,
            refusal=error,
        )
    except jwt.PyJWTError as error:
        raise AuthenticationError(f"invalid token: {error}") from error
    check_claims(issuer, claims, audience=False)
    return claims


def _decode(
    token: str, key: jwt.PyJWK, algorithms: list[str], issuer: OidcIssuer
) -> dict[str, Any]:
    claims: dict[str, Any] = jwt.decode(
        token,
        key,
        algorithms=algorithms,
        audience=list(issuer.audiences) or None,
        issuer=issuer.issuer,
        leeway=LEEWAY_SECONDS,
        options={"require": ["exp", "iss"]},
    )
    return claims


def _signed_by_another_key(
    token: str,
    *,
    algorithm: str,
    algorithms: list[str],
    issuer: OidcIssuer,
    jwks: JwksCache,
    kid: str | None,
    refusal: jwt.InvalidSignatureError,
) -> dict[str, Any]:
    """The claims of a token whose `kid` names one of the issuer's keys but which another of
    its published keys signed. ORY Hydra does this to every ID token it issues on a refresh
    after a key rotation (ory/hydra#3573, open in v2.3.0): the old key's id, the new key's
    signature. Only the issuer's own keys are tried, at most MAX_OTHER_KEYS cached ones and as
    many fetched again (within the refetch throttle, as for an unknown kid), so this accepts
    nothing a key of the issuer did not sign and costs a forger a few verifications."""
    tried: set[str | None] = set()
    for refetch in (False, True):  # the cached keys, then (throttled) the issuer's current ones
        others = jwks.keys_of(issuer.keys, excluding=kid, refetch=refetch)
        for other in [key for key in others if key.key_id not in tried][:MAX_OTHER_KEYS]:
            tried.add(other.key_id)
            try:
                claims = _decode(token, _for_algorithm(other, algorithm), algorithms, issuer)
            except (jwt.PyJWTError, AuthenticationError):
                continue
            log.info("%s signed a token with key %r, named %r", issuer.issuer, other.key_id, kid)
            return claims
    raise AuthenticationError(f"invalid token: {refusal}") from refusal


def check_claims(issuer: OidcIssuer, claims: Mapping[str, Any], *, audience: bool = True) -> None:
    """AuthenticationError unless verified `claims` meet the issuer's settings: audience,
    authorized party, required claims. A session made from a token is held to this on every use
    against the policy as it is then, so tightening a policy ends the sessions it no longer
    accepts (the signature and its algorithm were checked once, at login)."""
    if audience:
        aud = claims.get("aud")
        presented = [aud] if isinstance(aud, str) else list(aud or [])
        if issuer.audiences and not set(presented) & set(issuer.audiences):
            raise AuthenticationError("audience not accepted")
        if not issuer.audiences and presented:
            raise AuthenticationError("the policy accepts only tokens without an audience")
    if issuer.authorized_parties and claims.get("azp") not in issuer.authorized_parties:
        raise AuthenticationError("authorized party not accepted")
    for claim, value in issuer.required_claims:
        if claim_text(claims, claim) != value:
            raise AuthenticationError(f"required claim {claim!r} is not {value!r}")


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
