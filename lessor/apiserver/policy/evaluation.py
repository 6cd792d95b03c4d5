"""AccessPolicy evaluation: the caller's identity, and what a rule grants for one pool.

Which rule wins when several match (the spec leaves it open): **the first one, in the order
written, whose match clause holds and whose pool globs cover the requested pool.** Like firewall
rules, put the most specific first. A caller whom no rule covers for a pool is refused (403).
"""

from __future__ import annotations

import datetime
import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from lessor.protocol.durations import format_duration, parse_duration
from lessor.resources.access_policy import AccessPolicySpec, Match, Rule, SandboxGrant

_PLACEHOLDER = re.compile(r"\{([A-Za-z0-9_.-]+)\}")


class IdentityError(ValueError):
    """The identity template names a claim the caller's token does not carry."""


def claim_at(claims: Mapping[str, Any], path: str) -> Any:
    """The claim at a dot path (`org.team`), or None when any step is missing."""
    value: Any = claims
    for step in path.split("."):
        if not isinstance(value, Mapping) or step not in value:
            return None
        value = value[step]
    return value


def _scalar(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return None


def claim_text(claims: Mapping[str, Any], path: str) -> str | None:
    """The claim at a dot path as text (booleans as true/false), None when absent or not a
    scalar: how identities, rule matches and required claims all read a claim."""
    return _scalar(claim_at(claims, path))


def render_identity(template: str, claims: Mapping[str, Any]) -> str:
    """The template with each placeholder replaced by its claim's value, escaped so that the
    result is injective: a character of a value that a separator between two placeholders uses,
    `%` itself, and control characters are percent-encoded. With placeholders always separated
    by literal text (the policy's schema requires it), a rendered identity has exactly one set
    of claims behind it: `{org}/{user}` renders org "a/b" and user "c" as `a%2Fb/c`, and org
    "a" and user "b/c" as `a/b%2Fc`. Text before the first placeholder and after the last is
    the same in every identity, so it cannot make two of them meet, and its characters stay as
    they are in values: `github/{repository}` renders GitHub's `octo-org/octo-repo` as
    `github/octo-org/octo-repo`."""
    pieces = _PLACEHOLDER.split(template)[2:-1:2]  # the literal text between placeholders
    literal = set("".join(pieces)) | {"%"}

    def escape(character: str) -> str:
        if character not in literal and character.isprintable():
            return character
        return "".join(f"%{byte:02X}" for byte in character.encode())

    def substitute(match: re.Match[str]) -> str:
        value = claim_text(claims, match.group(1))
        if value is None or value == "":
            raise IdentityError(f"the token has no usable claim {match.group(1)!r}")
        return "".join(map(escape, value))

    return _PLACEHOLDER.sub(substitute, template)


def matches(match: Match | None, claims: Mapping[str, Any]) -> bool:
    if match is None:
        return True
    value = claim_at(claims, match.claim)
    if isinstance(value, list):  # a claim like `groups` matches when it contains the value
        return match.value in [_scalar(v) for v in value]
    return _scalar(value) == match.value


def pool_allowed(globs: list[str], pool: str) -> bool:
    # Globs and pool names are both restricted to [a-z0-9.-] plus `*`, so fnmatch's other
    # metacharacters cannot occur and `*` is the only wildcard, as the spec says.
    return any(fnmatch.fnmatchcase(pool, pattern) for pattern in globs)


@dataclass(frozen=True)
class Grant:
    rule_index: int
    max_ttl: datetime.timedelta | None
    max_concurrent_leases: int | None
    max_extensions: int


def grant_for(policy: AccessPolicySpec, claims: Mapping[str, Any], pool: str) -> Grant | None:
    """What the first applicable rule grants for `pool`, or None (403)."""
    for index, rule in enumerate(policy.rules):
        if matches(rule.match, claims) and pool_allowed(rule.pools, pool):
            return _grant(index, rule)
    return None


def visible_pools(
    policy: AccessPolicySpec, claims: Mapping[str, Any], pools: list[str]
) -> list[str]:
    return [pool for pool in pools if grant_for(policy, claims, pool) is not None]


def _grant(index: int, rule: Rule) -> Grant:
    return Grant(
        rule_index=index,
        max_ttl=parse_duration(rule.max_ttl) if rule.max_ttl else None,
        max_concurrent_leases=rule.max_concurrent_leases,
        max_extensions=rule.max_extensions,
    )


def effective_ttl(requested: str | None, pool_default: str, grant: Grant) -> str:
    """The TTL a lease gets: the request or the pool's default, clamped to the rule's maxTtl."""
    ttl = parse_duration(requested or pool_default)
    if grant.max_ttl is not None:
        ttl = min(ttl, grant.max_ttl)
    return format_duration(ttl)


def sandbox_grant(
    policy: AccessPolicySpec, claims: Mapping[str, Any], pool: str, verb: str
) -> SandboxGrant | None:
    """The first Sandbox grant that applies to the caller, covers `pool` and gives `verb`
    (`lease`: create, read, extend; `release`: delete), or None."""
    for grant in policy.sandbox:
        if verb in grant.verbs and matches(grant.match, claims) and pool_allowed(grant.pools, pool):
            return grant
    return None


def _pod_request(template: Mapping[str, Any], resource: str) -> Decimal | None:
    """What one sandbox pod asks for: the sum over its containers of the request (or, without
    one, the limit, which Kubernetes then uses as the request). None when a container declares
    neither, so the pod's size is unbounded."""
    total = Decimal(0)
    for container in template.get("spec", {}).get("containers", []):
        resources = container.get("resources") or {}
        value = (resources.get("requests") or {}).get(resource) or (
            resources.get("limits") or {}
        ).get(resource)
        if value is None:
            return None
        total += parse_quantity(value)  # type: ignore[no-untyped-call]
    return total


def ceiling_exceeded(grant: SandboxGrant, template: Mapping[str, Any]) -> str | None:
    """Why the pool's sandbox is bigger than the grant's resource ceiling, or None."""
    for resource, ceiling in (("cpu", grant.max_cpu), ("memory", grant.max_memory)):
        if ceiling is None:
            continue
        asked = _pod_request(template, resource)
        if asked is None:
            return f"the pool's sandbox declares no {resource} size; the grant allows {ceiling}"
        if asked > parse_quantity(ceiling):  # type: ignore[no-untyped-call]
            return f"the pool's sandbox asks for {asked} {resource}; the grant allows {ceiling}"
    return None


def sandbox_ttl(
    requested: str | None, default: str, pool_max: str, grant: SandboxGrant
) -> tuple[str, str]:
    """(effective TTL, lifetime ceiling): the request or the pool's default, within the pool's
    cap and the grant's maxTtl; the ceiling also bounds extensions, measured from readiness."""
    ceiling = parse_duration(pool_max)
    if grant.max_ttl is not None:
        ceiling = min(ceiling, parse_duration(grant.max_ttl))
    ttl = min(parse_duration(requested or default), ceiling)
    return format_duration(ttl), format_duration(ceiling)
