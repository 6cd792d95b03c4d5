"""AccessPolicy: who may lease from which pools, with which limits (spec 2.1 and 5).

All three ways of authenticating end in the same place, a set of claims: an OIDC token's claims,
or the claims an administrator attaches to a static token or an SSH key. The identity template
and the rules then apply to every caller alike, so a policy reads the same whatever the method.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import AfterValidator, ConfigDict, Field, model_validator

from lessor.protocol.durations import PositiveDuration
from lessor.resources.base import (
    AGE,
    OBSERVED_GENERATION,
    Condition,
    CrdInfo,
    PrinterColumn,
    Resource,
    SecretKeyRef,
    SpecModel,
    StatusModel,
    conditions_field,
)

Algorithm = Literal["RS256", "ES256", "RS384", "ES384"]
Claims = dict[str, Any]
Glob = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[a-z0-9*][-a-z0-9.*]*$")]


def _default_algorithms() -> list[Algorithm]:
    return ["RS256"]


# https://, or http:// on loopback only: keys fetched over plain HTTP can be swapped by anyone on
# the path, who could then forge tokens; on loopback nobody is on the path.
SECURE_URL = r"^(https://|http://(127\.0\.0\.1|localhost|\[::1\])(:[0-9]{1,5})?(/|$))"


class OidcAuth(SpecModel):
    issuer: str = Field(
        pattern=SECURE_URL,
        max_length=2048,
        description="Token issuer; must equal the tokens' iss claim. https:// (or http:// on "
        "loopback).",
    )
    audience: list[str] = Field(
        description="Accepted audiences; empty accepts only tokens without an aud claim."
    )
    authorized_parties: list[str] = Field(
        default_factory=list, description="When set, the azp claim must be one of these."
    )
    jwks_url: str | None = Field(
        default=None,
        pattern=SECURE_URL,
        max_length=2048,
        description="JWKS endpoint; default {issuer}/.well-known/jwks.json, and where the "
        "issuer has none there, the jwks_uri of its discovery document "
        "({issuer}/.well-known/openid-configuration), which must name this issuer. https:// "
        "(or http:// on loopback).",
    )
    algorithms: list[Algorithm] = Field(
        default_factory=_default_algorithms,
        min_length=1,
        description="Accepted signing algorithms.",
    )
    ca_bundle: str | None = Field(
        default=None,
        description="PEM CA certificates to trust for the issuer's JWKS endpoint, for private "
        "issuers (for example a cluster's own service-account issuer).",
    )
    required_claims: dict[str, str] = Field(
        default_factory=dict,
        max_length=16,
        description="Claims a token must carry with these values, compared as strings (true, "
        'false, numbers as written), for example {"email_verified": "true"}: an issuer that '
        "also knows unverified addresses cannot then lend one to an identity built from it.",
    )


class StaticToken(SpecModel):
    """A bearer token kept in a Secret (never in the policy itself), and the claims it carries."""

    secret_ref: SecretKeyRef = Field(
        description="Secret and key holding the token's SHA-256 as sha256:<64 lowercase hex "
        "digits> (recommended: reading the Secret then gives no credential), or the token itself."
    )
    claims: Claims = Field(
        min_length=1, description="Claims of the caller, used by identity and rules."
    )


class SshKey(SpecModel):
    public_key: str = Field(
        pattern=r"^ssh-ed25519 [A-Za-z0-9+/=]+( .*)?$",
        description="An authorized_keys line with an Ed25519 key.",
    )
    claims: Claims = Field(
        min_length=1, description="Claims of the caller, used by identity and rules."
    )


AuthMethod = Literal["oidc", "token", "ssh"]


class Sessions(SpecModel):
    """Which of the policy's methods `POST /v1/login` exchanges for a session token (and which
    `/v1/status` lists in `auth.sessions`). Every login writes a session record (a ConfigMap):
    a CI fleet whose jobs send their OIDC token with each request can keep thousands of jobs
    from writing one each by leaving `oidc` out; such a login is a 403 that says to send the
    credential itself."""

    methods: list[AuthMethod] = Field(
        default_factory=lambda: list(get_args(AuthMethod)),
        max_length=3,
        description="Methods whose credentials may be exchanged for a session (default: all).",
    )


class Auth(SpecModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.oidc) || (has(self.staticTokens) && size(self.staticTokens)"
                    " > 0) || (has(self.sshKeys) && size(self.sshKeys) > 0)",
                    "message": "auth needs at least one of oidc, staticTokens, sshKeys",
                }
            ]
        }
    )

    oidc: OidcAuth | None = Field(
        default=None,
        description="Accept OIDC ID tokens (JWTs) of one issuer, sent as Bearer tokens; unset: no"
        " OIDC.",
    )
    static_tokens: list[StaticToken] = Field(
        default_factory=list,
        description="Bearer tokens kept in Secrets, each with the claims its holder is given.",
    )
    ssh_keys: list[SshKey] = Field(
        default_factory=list,
        description="Ed25519 keys whose SSH request signatures are accepted (only where the API"
        " server is configured with sshAudiences), each with the claims its holder is given.",
    )
    sessions: Sessions = Field(default_factory=Sessions)

    @model_validator(mode="after")
    def _some_method(self) -> Auth:
        if self.oidc is None and not self.static_tokens and not self.ssh_keys:
            raise ValueError("auth needs at least one of oidc, staticTokens, sshKeys")
        return self

    def configured(self) -> list[AuthMethod]:
        """The methods this policy authenticates, in the order /v1/status lists them."""
        found: list[AuthMethod] = []
        if self.oidc is not None:
            found.append("oidc")
        if self.static_tokens:
            found.append("token")
        if self.ssh_keys:
            found.append("ssh")
        return found


class Match(SpecModel):
    claim: str = Field(min_length=1, description="Claim name; dots reach into nested claims.")
    value: str = Field(description="Value the claim must equal for the rule to apply.")


class Rule(SpecModel):
    match: Match | None = Field(default=None, description="Without it the rule always applies.")
    pools: list[Glob] = Field(min_length=1, description="Pool name globs; * is the wildcard.")
    max_ttl: PositiveDuration | None = Field(default=None, description="Ceiling for lease TTLs.")
    max_concurrent_leases: int | None = Field(
        default=None, ge=0, description="Ceiling on simultaneous active leases of the identity."
    )
    max_extensions: int = Field(
        default=2, ge=0, le=100, description="Extensions per lease; 0 forbids."
    )


SandboxVerb = Literal["lease", "release"]


class SandboxGrant(SpecModel):
    """Sandbox authorization, separate from cluster rules. `lease` covers create, read and
    extend; `release` (delete) is granted independently so that, for example, an agent may
    create sandboxes whose release only a supervisor decides."""

    match: Match | None = Field(
        default=None,
        description="A claim the caller must have, as in a rule; without it the grant applies to"
        " every caller of the policy.",
    )
    pools: list[Glob] = Field(min_length=1, description="SandboxPool name globs.")
    verbs: list[SandboxVerb] = Field(
        min_length=1,
        description="lease: create, read and extend Sandbox leases; release: release (delete)"
        " them, granted apart.",
    )
    max_ttl: PositiveDuration | None = Field(
        default=None,
        description="Ceiling of a Sandbox lease's lifetime, measured from readiness and"
        " extensions included, besides the pool's maxTtl (a duration such as 1h30m); unset: the"
        " pool's alone.",
    )
    max_extensions: int = Field(
        default=2, ge=0, le=100, description="Extensions per Sandbox lease (default 2); 0 forbids."
    )
    max_concurrent_sandboxes: int | None = Field(
        default=None,
        ge=0,
        description="Ceiling on the identity's simultaneous active Sandbox leases; unset: the API"
        " server's apiserver.defaultMaxConcurrentLeases (20 by default).",
    )
    max_cpu: str | None = Field(
        default=None,
        pattern=r"^[0-9]+(\.[0-9]+)?m?$",
        description="Resource ceiling: largest CPU request of a pool's sandbox this grant allows.",
    )
    max_memory: str | None = Field(
        default=None,
        pattern=r"^[0-9]+(Ki|Mi|Gi|Ti|K|M|G|T)?$",
        description="Resource ceiling: largest memory request of a pool's sandbox.",
    )


def _separated(template: str) -> str:
    if "}{" in template:
        raise ValueError(
            "placeholders of the identity template must be separated by literal text "
            "({org}/{user}, not {org}{user}): otherwise two callers could render alike"
        )
    return template


IdentityTemplate = Annotated[
    str,
    Field(
        min_length=1,
        max_length=253,
        pattern=r"\{[A-Za-z0-9_.-]+\}",
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!self.contains('}{')",
                    "message": "placeholders must be separated by literal text: {org}/{user}",
                }
            ]
        },
    ),
    AfterValidator(_separated),
]


class AccessPolicySpec(SpecModel):
    auth: Auth = Field(
        description="How callers authenticate: at least one of oidc, staticTokens and sshKeys."
        " Each method ends in a set of claims, which identity and the rules read."
    )
    identity: IdentityTemplate = Field(
        description="Identity template: {claim} placeholders, dot paths, literal separators "
        "between placeholders. Claim values are escaped where they could pass for the "
        "template's own text, so two different sets of claims never render alike; the "
        "identity belongs to this policy (the same name from another policy is another "
        "caller).",
    )
    rules: list[Rule] = Field(description="Ordered rules for cluster leases.")
    sandbox: list[SandboxGrant] = Field(default_factory=list, description="Sandbox grants.")


class AccessPolicyStatus(StatusModel):
    observed_generation: int | None = Field(default=None, description=OBSERVED_GENERATION)
    conditions: list[Condition] = conditions_field(
        "Ready: True (reason Valid) when the API server applies the whole policy; False with"
        " reason Invalid when it ignores the policy (a field its model refuses), or"
        " SecretMissing when a static token's Secret or key is missing (that token is refused,"
        " the other methods work)."
    )


class AccessPolicy(Resource[AccessPolicySpec, AccessPolicyStatus]):
    kind: Literal["AccessPolicy"] = "AccessPolicy"
    crd: ClassVar[CrdInfo] = CrdInfo(
        plural="accesspolicies",
        singular="accesspolicy",
        short_names=("ap", "lap"),
        description="Who may lease from which pools, authenticated how, with which limits.",
        columns=(
            PrinterColumn("Issuer", ".spec.auth.oidc.issuer"),
            PrinterColumn("Identity", ".spec.identity"),
            PrinterColumn(
                "Ready",
                '.status.conditions[?(@.type=="Ready")].status',
                description="Whether the API server applies it (the operator checks)",
            ),
            PrinterColumn("Reason", '.status.conditions[?(@.type=="Ready")].reason', priority=1),
            AGE,
        ),
    )
