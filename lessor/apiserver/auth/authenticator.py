"""Who is calling: OIDC JWTs, static tokens and SSH request signatures, against the policies.

Every method ends in the same place, the caller's claims and the policy that accepted them; the
identity is then the policy's template applied to the claims. Failures are a bare 401 for the
caller (the precise cause goes to the log and a metric); an identity provider that cannot be
reached is a 503 with a retryable reason, because the caller did nothing wrong.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import cachetools
from prometheus_client import Counter

from lessor.apiserver.auth.errors import AuthenticationError, IssuerUnavailableError
from lessor.apiserver.auth.jwks import JwksCache, https_fetch
from lessor.apiserver.auth.nonces import ClusterNonces
from lessor.apiserver.auth.oidc import LEEWAY_SECONDS, OidcIssuer, check_claims, verify_token
from lessor.apiserver.auth.sessions import DEFAULT_MAX_PER_OWNER, KEY_TTL, LoginSession, Sessions
from lessor.apiserver.auth.sessions import PREFIX as SESSION_PREFIX
from lessor.apiserver.auth.ssh import (
    key_blob_from_openssh,
    parse_authorization,
    verify_request,
)
from lessor.apiserver.auth.static_tokens import MalformedDigestError, stored_digest, token_digest
from lessor.apiserver.http.errors import ForbiddenError, UnauthorizedError, UnavailableError
from lessor.apiserver.policy.evaluation import IdentityError, render_identity
from lessor.apiserver.policy.store import NamedPolicy, PolicyStore
from lessor.apiserver.state.admission_limit import AdmissionLimiter
from lessor.apiserver.state.kube import Kube
from lessor.protocol.ssh_signature import SCHEME
from lessor.resources.access_policy import Auth, AuthMethod

log = logging.getLogger(__name__)

AUTH_FAILURES = Counter(
    "lessor_auth_failures_total", "Requests refused authentication, by method.", ["method"]
)
# A verified OIDC token's principal is reused, by the token's digest, for up to this long, never
# past what its verification allows (`exp` and the leeway for clocks), and only while the
# policies are the snapshot it was verified under (a change of any policy makes a new one).
# Why: verifying the same token again was a quarter of a watched read's CPU (bench.profile
# --load get, issue 45), and a client sends one token for its whole life. kube-apiserver keeps
# its token authenticators' successes 10 s the same way. A failure is never kept.
VERIFIED_FOR = 10.0


@dataclass(frozen=True)
class Principal:
    identity: str  # what the policy's template renders: the name people see
    method: str
    claims: Mapping[str, Any]
    policy: NamedPolicy
    session: LoginSession | None = None
    # Which of the policy's credentials it authenticated with (the OIDC issuer, a static
    # token's Secret key and token digest, an SSH key's digest): a session made from it lasts
    # only as long as the policy still has that credential.
    credential: str = ""

    @property
    def owner(self) -> str:
        """Who owns what this caller makes, and whose quota, aliases and admission bucket it
        spends: the identity within its policy. A policy is an administrator's unit of trust
        (an issuer, tokens, keys), and names are unique only within one: two IdPs both naming
        someone by `{email}`, or `{sub}`, must not meet in one owner. Policy names hold no `/`,
        so the owner is unambiguous."""
        return f"{self.policy.name}/{self.identity}"


class Authenticator:
    def __init__(
        self,
        policies: PolicyStore,
        kube: Kube,
        ssh_audiences: frozenset[str] = frozenset(),
        ssh_limiter: AdmissionLimiter | None = None,
        session_key_ttl: float = KEY_TTL,
        *,
        max_sessions_per_owner: int = DEFAULT_MAX_PER_OWNER,
    ) -> None:
        self.policies = policies
        self.kube = kube
        self.ssh_audiences = ssh_audiences
        self.jwks = JwksCache(https_fetch())
        self.nonces = ClusterNonces(kube, ssh_limiter)
        self.sessions = Sessions(kube, session_key_ttl, max_sessions_per_owner)
        self._token_digests: cachetools.TTLCache[tuple[str, str], bytes | None] = (
            cachetools.TTLCache(maxsize=1024, ttl=10)
        )
        # token digest -> (policies snapshot, until, principal)
        self._verified: cachetools.TTLCache[bytes, tuple[object, float, Principal]] = (
            cachetools.TTLCache(maxsize=4096, ttl=VERIFIED_FOR)
        )

    def methods(self) -> list[str]:
        """The methods some policy configures, for /v1/status."""
        return self._listed(lambda auth: auth.configured())

    def session_methods(self) -> list[str]:
        """The methods some policy exchanges for sessions (`auth.sessions.methods` of the
        methods it configures), for /v1/status."""
        return self._listed(
            lambda auth: [m for m in auth.configured() if m in auth.sessions.methods]
        )

    def _listed(self, of: Callable[[Auth], list[AuthMethod]]) -> list[str]:
        found = {method for policy in self.policies.snapshot for method in of(policy.spec.auth)}
        if not self.ssh_audiences:  # no audience: SSH signatures cannot be checked here
            found.discard("ssh")
        return [method for method in ("oidc", "token", "ssh") if method in found]

    def authenticate(self, method: str, target: str, header: str | None, body: bytes) -> Principal:
        if not header:
            raise UnauthorizedError("an Authorization header is required", reason="unauthenticated")
        kind = "ssh" if header.startswith(SCHEME + " ") else "bearer"
        try:
            if kind == "ssh":
                policy, claims, credential = self._ssh(method, target, header, body)
                via = "ssh"
            else:
                scheme, _, token = header.partition(" ")
                if scheme.lower() != "bearer" or not token:
                    raise AuthenticationError("unsupported Authorization scheme")
                if token.startswith(SESSION_PREFIX):
                    return self._session(token)
                if token.count(".") == 2:
                    return self._oidc_principal(token)
                policy, claims, credential = self._static(token)
                via = "token"
        except AuthenticationError as error:
            AUTH_FAILURES.labels(kind).inc()
            log.info("authentication failed (%s): %s", kind, error.cause)
            raise UnauthorizedError("invalid credentials", reason="unauthenticated") from error
        except IssuerUnavailableError as error:
            log.warning("identity provider unavailable: %s", error)
            raise UnavailableError("the identity provider cannot be reached; retry") from error
        return _principal(policy, claims, credential, via)

    def _oidc_principal(self, token: str) -> Principal:
        """The principal of an OIDC token, verified once per VERIFIED_FOR under one snapshot of
        the policies (it raises as `_oidc` does)."""
        digest, snapshot = hashlib.sha256(token.encode()).digest(), self.policies.snapshot
        known = self._verified.get(digest)
        if known is not None and known[0] is snapshot and time.time() < known[1]:
            return known[2]
        principal = _principal(*self._oidc(token), "oidc")
        expiry = principal.claims.get("exp")
        if isinstance(expiry, int | float):
            until = min(float(expiry) + LEEWAY_SECONDS, time.time() + VERIFIED_FOR)
            self._verified[digest] = (snapshot, until, principal)
        return principal

    def _session(self, token: str) -> Principal:
        """A session is as good as the credential it came from, checked on every use against
        the policy as it is now: the policy must still hold that credential (the OIDC issuer,
        the static token with the same value, the SSH key), and render the same identity from
        the claims (for a token or a key, the claims the policy gives it now)."""
        session = self.sessions.verify(token)
        policy = self.policies.named(session.policy)
        if policy is None:
            raise AuthenticationError("the session's policy no longer exists")
        claims = self._current_claims(policy, session.credential, session.claims)
        try:
            same = render_identity(policy.spec.identity, claims) == session.identity
        except IdentityError:
            same = False
        if not same:
            raise AuthenticationError("the session's policy no longer names it so")
        return Principal(
            session.identity, "session", claims, policy, session, credential=session.credential
        )

    def recheck(self, principal: Principal) -> None:
        """AuthenticationError once the credential a long-lived request authenticated with no
        longer would: its session record deleted (logout, an administrator's revocation) or
        expired, the static token rotated, the SSH key or OIDC issuer removed from the policy,
        the OIDC token past its `exp`. An open attach or port-forward asks this at every
        recheck, so revoking a credential ends the streams it opened, not only new requests."""
        session = principal.session
        if session is not None and (
            session.expires < time.time() or not self.sessions.exists(session)
        ):
            raise AuthenticationError("session revoked or expired")
        policy = self.policies.named(principal.policy.name)
        if policy is None:
            raise AuthenticationError("the policy no longer exists")
        self._current_claims(policy, principal.credential, principal.claims)
        expiry = principal.claims.get("exp")
        if principal.method == "oidc" and isinstance(expiry, int | float) and expiry < time.time():
            raise AuthenticationError("the OIDC token expired")

    def _current_claims(
        self, policy: NamedPolicy, credential: str, claims: Mapping[str, Any]
    ) -> Mapping[str, Any]:
        """The claims `credential` stands for under the policy as it is now (for an OIDC
        token, the token's own `claims`); AuthenticationError when the policy no longer holds
        it."""
        kind, _, which = credential.partition(":")
        auth = policy.spec.auth
        if kind == "oidc" and auth.oidc is not None and auth.oidc.issuer == which:
            # The token's claims, held to the policy's rules as they are now.
            check_claims(_issuer_of(policy), claims)
            return claims
        if kind == "token":
            for entry in auth.static_tokens:
                ref = entry.secret_ref
                stored = self._stored_digest(ref.name, ref.key)
                if stored and _token_credential(ref.name, ref.key, stored) == credential:
                    return entry.claims
        if kind == "ssh":
            for key in auth.ssh_keys:
                with contextlib.suppress(ValueError):
                    if _key_credential(key_blob_from_openssh(key.public_key)) == credential:
                        return key.claims
        raise AuthenticationError(f"the credential ({kind}) is no longer accepted")

    def _oidc(self, token: str) -> tuple[NamedPolicy, Mapping[str, Any], str]:
        """The token against every policy trusting its issuer, in the policies' name order."""
        by_issuer: dict[str, list[OidcIssuer]] = {}
        policies = {}
        for policy in self.policies.snapshot:
            if policy.spec.auth.oidc is None:
                continue
            issuer = _issuer_of(policy)
            by_issuer.setdefault(issuer.issuer, []).append(issuer)
            policies[policy.name] = policy
        issuer, claims = verify_token(token, by_issuer, self.jwks)
        return policies[issuer.policy], claims, f"oidc:{issuer.issuer}"

    def _static(self, token: str) -> tuple[NamedPolicy, Mapping[str, Any], str]:
        presented = token_digest(token)
        found: tuple[NamedPolicy, Mapping[str, Any], str] | None = None
        for policy in self.policies.snapshot:
            for entry in policy.spec.auth.static_tokens:
                ref = entry.secret_ref
                stored = self._stored_digest(ref.name, ref.key)
                # Constant-time, and every configured token is compared, match or not.
                if stored and hmac.compare_digest(presented, stored):
                    found = found or (
                        policy,
                        entry.claims,
                        _token_credential(ref.name, ref.key, stored),
                    )
        if found is None:
            raise AuthenticationError("unknown static token")
        return found

    def _stored_digest(self, name: str, key: str) -> bytes | None:
        """The digest of the token a Secret's key stands for, None while it stands for none.
        Read at most every 10 s by each worker; only digests are kept, never a token."""
        cache_key = (name, key)
        if cache_key not in self._token_digests:
            self._token_digests[cache_key] = self._read_digest(name, key)
        return self._token_digests[cache_key]

    def _read_digest(self, name: str, key: str) -> bytes | None:
        """A missing or empty value is no token; a malformed digest is an administrator's
        mistake, which disables its entry (never a 500, never a match) and is logged by where it
        is, never by what it holds."""
        value = self.kube.secret_value_bytes(self.kube.namespace, name, key)
        if not value:
            return None
        try:
            return stored_digest(value)
        except MalformedDigestError as error:
            log.error("static token in Secret %s, key %s, is ignored: %s", name, key, error)
            return None

    def _ssh(
        self, method: str, target: str, header: str, body: bytes
    ) -> tuple[NamedPolicy, Mapping[str, Any], str]:
        owners: dict[bytes, tuple[NamedPolicy, Mapping[str, Any]]] = {}
        for policy in self.policies.snapshot:
            for entry in policy.spec.auth.ssh_keys:
                try:
                    blob = key_blob_from_openssh(entry.public_key)
                except ValueError:
                    continue
                owners.setdefault(blob, (policy, entry.claims))
        request = parse_authorization(header)
        verify_request(
            request,
            method=method,
            target=target,
            body=body,
            authorized_keys=dict.fromkeys(owners, ""),
            nonces=self.nonces,
            audiences=self.ssh_audiences,
        )
        policy, claims = owners[request.key_blob]
        return policy, claims, _key_credential(request.key_blob)


def _principal(
    policy: NamedPolicy, claims: Mapping[str, Any], credential: str, via: str
) -> Principal:
    """The caller a policy accepted with these claims: its identity is the policy's template."""
    try:
        identity = render_identity(policy.spec.identity, claims)
    except IdentityError as error:
        raise ForbiddenError(str(error), reason="identity_unresolvable") from error
    return Principal(identity, via, claims, policy, credential=credential)


def _issuer_of(policy: NamedPolicy) -> OidcIssuer:
    oidc = policy.spec.auth.oidc
    assert oidc is not None
    return OidcIssuer(
        issuer=oidc.issuer,
        audiences=tuple(oidc.audience),
        authorized_parties=tuple(oidc.authorized_parties),
        jwks_url=oidc.jwks_url,
        algorithms=tuple(oidc.algorithms),
        required_claims=tuple(sorted(oidc.required_claims.items())),
        ca_bundle=oidc.ca_bundle,
        policy=policy.name,
    )


def _token_credential(secret: str, key: str, digest: bytes) -> str:
    """A static token as a session remembers it: where it is kept and part of the token's
    digest (never the token), so that a new token in the Secret ends the sessions of the old
    one, while the same token's digest written in place of the token does not."""
    return f"token:{secret}/{key}/{digest.hex()[:32]}"


def _key_credential(blob: bytes) -> str:
    return f"ssh:{hashlib.sha256(blob).hexdigest()[:32]}"
