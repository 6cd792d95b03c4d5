"""AccessPolicy evaluation: identities from claim templates, rule order, globs, TTL clamping."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from lessor.apiserver.policy.evaluation import (
    IdentityError,
    effective_ttl,
    grant_for,
    render_identity,
    visible_pools,
)
from lessor.resources.access_policy import AccessPolicySpec

CLAIMS: dict[str, Any] = {
    "sub": "repo:acme/api:ref:refs/heads/main",
    "repository": "api",
    "repository_owner": "acme",
    "org": {"team": "platform", "level": 3},
    "groups": ["devs", "oncall"],
}


def policy(
    *rules: dict[str, Any], identity: str = "{repository_owner}/{repository}"
) -> AccessPolicySpec:
    return AccessPolicySpec.model_validate(
        {
            "auth": {"oidc": {"issuer": "https://token.example", "audience": ["lessor"]}},
            "identity": identity,
            "rules": list(rules),
        }
    )


def test_identity_joins_claims_with_literal_separators_and_reaches_nested_ones() -> None:
    assert render_identity("{repository_owner}/{repository}", CLAIMS) == "acme/api"
    assert render_identity("{org.team}:{org.level}", CLAIMS) == "platform:3"
    with pytest.raises(IdentityError, match=r"org\.missing"):
        render_identity("{org.missing}", CLAIMS)
    with pytest.raises(IdentityError):  # a list is not an identity
        render_identity("{groups}", CLAIMS)


def test_identities_are_escaped_only_where_they_could_collide() -> None:
    assert render_identity("{org}/{user}", {"org": "a/b", "user": "c"}) == "a%2Fb/c"
    assert render_identity("{org}/{user}", {"org": "a", "user": "b/c"}) == "a/b%2Fc"
    assert render_identity("{repository}", {"repository": "octo/repo"}) == "octo/repo"
    # Text before the first placeholder and after the last escapes nothing: the shipped CI
    # examples' identities read as the repositories they are.
    repository = {"repository": "example-org/widgets"}
    assert render_identity("github/{repository}", repository) == "github/example-org/widgets"
    assert render_identity("<{a}>", {"a": "<x>"}) == "<<x>>"
    assert render_identity("g:{a}/{b}:g", {"a": "g/", "b": "g"}) == "g:g%2F/g:g"
    assert render_identity("{email}", {"email": "a+b@x.org"}) == "a+b@x.org"
    assert render_identity("{sub}", {"sub": "50%\nroot"}) == "50%25%0Aroot", "% and controls"


@pytest.mark.parametrize("template", ["{a}/{b}", "{a}:{b}", "x{a}.{b}y", "{a}//{b}", "{a}%{b}"])
def test_rendering_is_injective(template: str) -> None:
    """Every pair of claim values over an alphabet of the separators, the escape character and
    letters renders to a distinct identity."""
    alphabet = ["", "a", "/", ":", ".", "%", "%2F", "a/b", "b:", "x.y", "//"]
    seen: dict[str, tuple[str, str]] = {}
    for a in alphabet[1:]:
        for b in alphabet[1:]:
            identity = render_identity(template, {"a": a, "b": b})
            assert seen.setdefault(identity, (a, b)) == (a, b), (identity, seen[identity], a, b)


def test_a_template_with_touching_placeholders_is_refused() -> None:
    with pytest.raises(ValidationError, match="separated"):
        AccessPolicySpec.model_validate(
            {"auth": {"sshKeys": []}, "identity": "{org}{user}", "rules": []}
        )


def test_the_first_rule_that_matches_and_covers_the_pool_wins() -> None:
    spec = policy(
        {"match": {"claim": "org.team", "value": "platform"}, "pools": ["gpu-*"], "maxTtl": "4h"},
        {
            "match": {"claim": "repository_owner", "value": "acme"},
            "pools": ["*"],
            "maxTtl": "1h",
            "maxConcurrentLeases": 2,
            "maxExtensions": 0,
        },
        {"pools": ["*"], "maxTtl": "10m"},
    )
    gpu = grant_for(spec, CLAIMS, "gpu-large")
    assert gpu is not None and gpu.rule_index == 0 and gpu.max_extensions == 2
    ci = grant_for(spec, CLAIMS, "ci-small")
    assert ci is not None and ci.rule_index == 1
    assert (ci.max_concurrent_leases, ci.max_extensions) == (2, 0)
    stranger = grant_for(spec, {"repository_owner": "evil", "org": {}}, "ci-small")
    assert stranger is not None and stranger.rule_index == 2


def test_no_rule_covering_the_pool_is_a_refusal() -> None:
    spec = policy({"match": {"claim": "repository_owner", "value": "acme"}, "pools": ["ci-*"]})
    assert grant_for(spec, CLAIMS, "prod-db") is None
    assert grant_for(spec, {"repository_owner": "other"}, "ci-small") is None
    assert visible_pools(spec, CLAIMS, ["ci-a", "prod", "ci-b"]) == ["ci-a", "ci-b"]


def test_a_list_claim_matches_when_it_contains_the_value() -> None:
    spec = policy({"match": {"claim": "groups", "value": "oncall"}, "pools": ["*"]})
    assert grant_for(spec, CLAIMS, "any") is not None
    assert grant_for(spec, {"groups": ["devs"]}, "any") is None


def test_glob_star_is_the_only_wildcard() -> None:
    spec = policy({"pools": ["team-*-small"]})
    assert grant_for(spec, CLAIMS, "team-a-small") is not None
    assert grant_for(spec, CLAIMS, "team-a-large") is None


@pytest.mark.parametrize(
    ("requested", "default", "max_ttl", "expected"),
    [(None, "30m", "1h", "30m"), ("2h", "30m", "1h", "1h"), ("90s", "30m", None, "1m30s")],
)
def test_ttl_defaults_to_the_pool_and_is_clamped_to_max_ttl(
    requested: str | None, default: str, max_ttl: str | None, expected: str
) -> None:
    rule: dict[str, Any] = {"pools": ["*"]}
    if max_ttl:
        rule["maxTtl"] = max_ttl
    grant = grant_for(policy(rule), CLAIMS, "p")
    assert grant is not None
    assert effective_ttl(requested, default, grant) == expected
